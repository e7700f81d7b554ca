"""Two CPU processes (trainer=ddp_cpu) score the whole validation and test splits exactly like one process."""

from __future__ import annotations

import json
import subprocess
import sys

import lightning as L
import pytest

from datamodules.classification import ManifestDataModule
from inference.runtime import load_checkpoint
from tests.helpers import ROOT, small_train_overrides


@pytest.mark.slow  # two spawned processes (~30 s)
def test_ddp_validation_and_test_metrics_equal_single_process(tmp_path, small_dataset):
    run = tmp_path / "ddp"
    overrides = [o for o in small_train_overrides(small_dataset) if not o.startswith("trainer=")]
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        "trainer=ddp_cpu",
        *overrides,
        "data.batch_size=7",
        "test=true",
        f"hydra.run.dir={run}",
        f"paths.root_dir={tmp_path}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Starting with 2 processes" in done.stdout + done.stderr
    written = json.loads((run / "metrics.json").read_text())
    ddp_val = written["val"]

    module = load_checkpoint(run / "checkpoints" / "last.ckpt")
    datamodule = ManifestDataModule(str(small_dataset), preprocess=module.net.preprocess, batch_size=16, num_workers=0)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_checkpointing=False
    )
    threshold = float(module.threshold)
    trainer.validate(module, datamodule=datamodule)
    single = module.stage_metrics["val"]
    assert single["n_pos"] + single["n_neg"] == ddp_val["n_pos"] + ddp_val["n_neg"]  # each image once
    assert single["auroc"] == pytest.approx(ddp_val["auroc"], abs=1e-6)
    assert single["ap"] == pytest.approx(ddp_val["ap"], abs=1e-6)
    assert float(module.threshold) == pytest.approx(threshold)  # same calibration from the same scores

    # the test split, scored by the checkpoint train.py tested, in one process
    tested = load_checkpoint(written["checkpoint"])
    trainer.test(tested, datamodule=datamodule)
    single_test = tested.stage_metrics["test"]
    assert single_test["n_pos"] == written["n_pos"] and single_test["n_neg"] == written["n_neg"]
    for key in ("auroc", "ap", "tpr", "tnr", "tpr@fpr=0.1"):
        assert single_test[key] == pytest.approx(written[key], abs=1e-6), key
