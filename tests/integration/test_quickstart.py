"""The README's quickstart, exactly as a new user runs it (minutes: marked slow)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.mark.slow
def test_python_train_py_with_no_arguments_reaches_auroc_0_9(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "train.py"), f"paths.root_dir={tmp_path}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=1800)
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
