"""`python train.py detector=<a training-free localizer>` ends as every training run ends: the
threshold calibrated on genuine validation images, then the test report (report.md, figures,
breakdowns and intervals in metrics.json) and the closing summary."""

from __future__ import annotations

import json

import numpy as np

from datamodules.io import write_image
from tests.helpers import prepare_train_config
from train import train


def test_a_training_free_localizer_gets_the_test_report_a_trained_one_gets(tmp_path):
    root, rng = tmp_path / "imdl", np.random.default_rng(1)
    for i in range(12):
        clean = rng.normal(128, 2, (96, 96, 3))
        spliced = clean.copy()
        spliced[20:60, 24:72] += rng.normal(0, 12, (40, 48, 3))  # a region with another noise level
        write_image(root / "Tp" / f"t{i}.png", np.clip(spliced, 0, 255).astype(np.uint8))
        mask = np.zeros((96, 96), np.uint8)
        mask[20:60, 24:72] = 255
        write_image(root / "Gt" / f"t{i}_gt.png", mask)
        write_image(root / "Au" / f"a{i}.png", np.clip(clean, 0, 255).astype(np.uint8))
    overrides = [
        "detector=noise_level_tiny",
        "data=localization",
        f"data.root={root}",
        "data.split_fractions=[0.4,0.3,0.3]",
        "data.num_workers=0",
        "trainer=cpu",
        "trainer.enable_progress_bar=false",
    ]
    run = tmp_path / "run"
    metrics = train(prepare_train_config(overrides, run))
    assert (run / "report.md").is_file() and (run / "roc.png").is_file()
    written = json.loads((run / "metrics.json").read_text())
    assert "intervals" in written and "calibration" in written and written["checkpoint"].endswith("best.ckpt")
    assert metrics["pixel_f1"] == written["pixel_f1"]
