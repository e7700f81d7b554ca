"""The README's quickstart, exactly as a new user runs it (minutes: marked slow)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.mark.slow
@pytest.mark.ci  # the README's quickstart promise: CI runs it
def test_python_train_py_with_no_arguments_reaches_auroc_0_9(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), f"paths.root_dir={tmp_path}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = list((tmp_path / "outputs" / "train" / "runs").iterdir())
    assert len(runs) == 1
    run = runs[0]
    for name in ("checkpoints/best.ckpt", "checkpoints/last.ckpt", "metrics.json", "config.yaml", "report.md"):
        assert (run / name).is_file(), name
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["detector"] == "npr" and metrics["n_pos"] > 50 and metrics["n_neg"] > 50
    assert metrics["auroc"] >= 0.9
    assert (tmp_path / "data" / "embedded" / "manifest.csv").is_file()
    assert "test auroc=" in done.stdout + done.stderr


@pytest.mark.slow
def test_python_train_py_with_a_localizer_and_no_data_trains_on_the_embedded_localization_set(tmp_path):
    """`python train.py detector=seg_tiny`: forgeries with masks are generated, a localizer is trained
    and tested, and the report carries pixel metrics and a contact sheet. (One epoch, to keep the
    test short; the set is the real default.)"""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "detector=seg_tiny",
            f"paths.root_dir={tmp_path}",
            "trainer.max_epochs=1",
            "trainer.enable_progress_bar=false",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = list((tmp_path / "outputs" / "train" / "runs").iterdir())
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["detector"] == "seg_tiny" and metrics["n_masks"] > 10
    assert 0.0 <= metrics["pixel_f1"] <= 1.0 and "per manipulated image" in metrics["pixel_protocol"]
    assert (run / "contact_sheet.png").is_file() and "pixel_f1" in (run / "report.md").read_text()
    assert (tmp_path / "data" / "embedded_localization" / "manifest.csv").is_file()
    assert "monitor: val/pixel_f1_within_fpr" in (run / "config.yaml").read_text()  # best.ckpt: F1 within the bound
