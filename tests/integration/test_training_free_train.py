"""`python train.py detector=<a training-free localizer>` ends as every training run ends: the
threshold calibrated on genuine validation images, then the test report (report.md, figures,
breakdowns and intervals in metrics.json) and the closing summary."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from datamodules.io import write_image
from infer import infer
from tests.helpers import compose_config, prepare_train_config
from train import train


def write_spliced_set(root: Path, corner: tuple[int, int] = (20, 24)) -> None:
    """12 IMDL pairs: a flat noisy photo and the same with a noisier region (rows, columns from `corner`)."""
    rng = np.random.default_rng(1)
    top, left = corner
    for i in range(12):
        clean = rng.normal(128, 2, (96, 96, 3))
        spliced = clean.copy()
        spliced[top : top + 40, left : left + 48] += rng.normal(0, 12, (40, 48, 3))  # another noise level
        write_image(root / "Tp" / f"t{i}.png", np.clip(spliced, 0, 255).astype(np.uint8))
        mask = np.zeros((96, 96), np.uint8)
        mask[top : top + 40, left : left + 48] = 255
        write_image(root / "Gt" / f"t{i}_gt.png", mask)
        write_image(root / "Au" / f"a{i}.png", np.clip(clean, 0, 255).astype(np.uint8))


def overrides_for(root: Path) -> list[str]:
    return [
        "detector=noise_level_tiny",  # calibrated on 64 px centre crops, were evaluation cropped
        "data=localization",
        f"data.root={root}",
        "data.split_fractions=[0.4,0.3,0.3]",
        "data.num_workers=0",
        "trainer=cpu",
        "trainer.enable_progress_bar=false",
    ]


def test_a_training_free_localizer_gets_the_test_report_a_trained_one_gets(tmp_path):
    root = tmp_path / "imdl"
    write_spliced_set(root)
    overrides = overrides_for(root)
    run = tmp_path / "run"
    metrics = train(prepare_train_config(overrides, run))
    assert (run / "report.md").is_file() and (run / "roc.png").is_file()
    written = json.loads((run / "metrics.json").read_text())
    assert "intervals" in written and "calibration" in written and written["checkpoint"].endswith("best.ckpt")
    assert metrics["pixel_f1"] == written["pixel_f1"]


def test_its_test_figures_are_the_ones_infer_py_gives_for_the_same_images(tmp_path):
    # the regions sit in a corner a 64 px centre crop cuts away: evaluated on crops, train.py calibrated
    # and tested other pixels than the whole images infer.py scores (test pixel F1 0.910 against 0.937)
    root = tmp_path / "imdl"
    write_spliced_set(root, corner=(0, 0))
    rows = [
        {"path": str(path), "label": label, "mask": str(root / "Gt" / f"{path.stem}_gt.png") if label else ""}
        for folder, label in (("Au", 0), ("Tp", 1))
        for path in sorted((root / folder).glob("*.png"))
    ]
    for row in rows:
        row["split"] = ("train", "val", "test")[int(Path(row["path"]).stem[1:]) % 3]
    manifest = tmp_path / "manifest.csv"
    with open(manifest, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    test_manifest = tmp_path / "test.csv"
    with open(test_manifest, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(row for row in rows if row["split"] == "test")
    overrides = [o for o in overrides_for(root) if not o.startswith(("data.root", "data.split_fractions"))]
    trained = train(prepare_train_config([*overrides, f"data.root={manifest}"], tmp_path / "run"))
    output = tmp_path / "scores.csv"
    scored = infer(
        compose_config("infer", [f"model={trained['checkpoint']}", f"input={test_manifest}", f"output={output}"])
    )
    assert scored["metrics"]["auroc"] == 1.0
    for key in ("auroc", "pixel_f1", "pixel_fpr_genuine"):
        assert trained[key] == pytest.approx(scored["metrics"][key], abs=1e-5), key
