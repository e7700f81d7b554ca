"""train.py as a Hydra app: sweeps (`-m`) and run folders, as a user's command sees them.

The end-to-end cases run `python train.py` in a new process from a folder of their own (where the
run folders go is the contract), with a tiny detector that trains one batch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import hydra
import pytest
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from tests.helpers import ROOT, compose_config


def quick_run(manifest: Path) -> list[str]:
    """A tiny NPR on the small manifest: one training and one validation batch, no test split."""
    return [
        "detector=npr_tiny",
        "data=manifest",
        f"data.manifest={manifest}",
        "data.num_workers=0",
        "trainer=cpu",
        "trainer.max_epochs=1",
        "trainer.enable_progress_bar=false",
        "+trainer.limit_train_batches=1",
        "+trainer.limit_val_batches=1",
        "test=false",
    ]


def train_py(cwd: Path, *settings: str) -> subprocess.CompletedProcess:
    """`python train.py settings` started in `cwd`, with this checkout's packages."""
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *settings],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )


def test_a_sweep_finds_its_folder_under_the_folder_it_was_started_in(tmp_path, monkeypatch):
    """`hydra.sweep.dir` is built from `paths.log_dir`, which reads the run's Hydra config: the
    sweep's own is set before its folder is needed, as Hydra sets a single run's."""
    monkeypatch.chdir(tmp_path)
    config = compose_config("train", ["hydra.sweep.dir=${paths.log_dir}/sweep"])
    HydraConfig.instance().cfg = None  # what a sweep starts with
    try:
        for callback in (config.hydra.callbacks or {}).values():  # as Hydra calls train.yaml's callbacks
            hydra.utils.instantiate(callback).on_multirun_start(config=config)
        assert OmegaConf.select(config, "hydra.sweep.dir") == f"{tmp_path}/outputs/sweep"
    finally:
        HydraConfig.instance().cfg = None


@pytest.mark.slow
def test_python_train_py_m_runs_each_job_in_its_own_folder_of_the_multiruns_area(tmp_path, small_dataset):
    done = train_py(tmp_path, "-m", *quick_run(small_dataset), "seed=0,1")
    assert done.returncode == 0, done.stderr[-3000:]
    (sweep,) = (tmp_path / "outputs" / "train" / "multiruns").iterdir()
    assert (sweep / "multirun.yaml").is_file()
    for job in ("0", "1"):
        assert (sweep / job / "checkpoints" / "last.ckpt").is_file() and (sweep / job / "metrics.json").is_file()
    assert OmegaConf.load(sweep / "1" / ".hydra" / "overrides.yaml")[-1] == "seed=1"
