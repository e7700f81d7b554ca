"""On GPUs: mixed-precision training, `device=cuda` scoring, and a two-GPU DDP run (`pytest -m gpu`).

Each test is the GPU counterpart of a CPU test and checks values, not just that the run finished.
Without a CUDA device (or with one GPU, for DDP) they skip with the reason.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from datamodules.classification import ManifestDataModule
from datamodules.records import read_manifest
from infer import infer
from inference.runtime import load_checkpoint
from inference.writer import read_results
from tests.helpers import ROOT, compose_config, prepare_train_config, small_train_overrides
from train import train

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def gpu_overrides(manifest: Path) -> list[str]:
    return [o for o in small_train_overrides(manifest) if not o.startswith("trainer=")] + ["trainer=gpu"]


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory, small_dataset) -> tuple[Path, dict]:
    """Two epochs of the tiny NPR with `trainer=gpu` (16-bit mixed precision)."""
    run = tmp_path_factory.mktemp("gpu_run")
    cfg = prepare_train_config(
        [*gpu_overrides(small_dataset), "trainer.max_epochs=2", "detector.optimizer.lr=2e-3"], run
    )
    assert cfg.trainer.precision == "16-mixed" and cfg.trainer.accelerator == "gpu"
    return run, train(cfg)


def test_mixed_precision_training_keeps_float32_weights_and_finite_metrics(gpu_run, small_dataset):
    run, metrics = gpu_run
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    weights = {k: v for k, v in checkpoint["state_dict"].items() if v.is_floating_point()}
    assert all(v.dtype == torch.float32 and torch.isfinite(v).all() for v in weights.values())
    assert "scale" in checkpoint["MixedPrecision"]  # the gradient scaler's state: it really ran in 16-bit AMP
    assert all(math.isfinite(metrics[k]) for k in ("auroc", "ap", "tpr", "tnr"))
    assert metrics["n_pos"] + metrics["n_neg"] == sum(r.split == "test" for r in read_manifest(small_dataset))
    assert 0.0 < metrics["threshold"] < 1.0


def test_cuda_scoring_matches_cpu_scoring(gpu_run, small_dataset, tmp_path):
    run, _ = gpu_run
    best = run / "checkpoints" / "best.ckpt"
    results = {}
    for device in ("cpu", "cuda"):
        infer(
            compose_config(
                "infer",
                [
                    f"model={best}",
                    f"input={small_dataset}",
                    f"output={tmp_path / device}.csv",
                    f"device={device}",
                    "num_workers=0",
                    "progress=false",
                    "batch_size=16",
                ],
            )
        )
        results[device] = {r["path"]: r for r in read_results(tmp_path / f"{device}.csv")}
    assert set(results["cpu"]) == set(results["cuda"]) and results["cpu"]
    differences = [abs(results["cpu"][p]["score"] - results["cuda"][p]["score"]) for p in results["cpu"]]
    assert max(differences) <= 1e-4
    threshold = float(load_checkpoint(best).threshold)
    for path, row in results["cuda"].items():
        if abs(row["score"] - threshold) > 1e-4:  # away from the threshold the decision cannot differ
            assert row["label"] == results["cpu"][path]["label"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_gpu_ddp_scores_the_whole_validation_split_like_one_process(tmp_path, small_dataset):
    run = tmp_path / "ddp"
    overrides = [o for o in small_train_overrides(small_dataset) if not o.startswith("trainer=")]
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        "trainer=ddp",
        "trainer.devices=2",
        *overrides,
        "data.batch_size=7",
        "test=false",
        f"hydra.run.dir={run}",
        f"paths.root_dir={tmp_path}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    ddp_val = json.loads((run / "metrics.json").read_text())["val"]

    module = load_checkpoint(run / "checkpoints" / "last.ckpt")
    datamodule = ManifestDataModule(str(small_dataset), preprocess=module.net.preprocess, batch_size=16, num_workers=0)
    trainer = L.Trainer(
        accelerator="gpu",
        devices=1,
        precision="16-mixed",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    trainer.validate(module, datamodule=datamodule)
    single = module.stage_metrics["val"]
    assert single["n_pos"] + single["n_neg"] == ddp_val["n_pos"] + ddp_val["n_neg"]  # each image once
    assert np.isclose(single["auroc"], ddp_val["auroc"], atol=1e-3)
    assert np.isclose(single["ap"], ddp_val["ap"], atol=1e-3)
