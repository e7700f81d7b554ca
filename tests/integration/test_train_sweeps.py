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


def a_finished_run(folder: Path) -> dict[str, bytes]:
    """What a run leaves in its folder that a refused run must not touch: its claim, Hydra's record
    of its settings and its log. Returns the folder's files (`files_of`)."""
    for name, text in {
        "config.yaml": "detector: {name: npr_tiny}\n",
        ".hydra/config.yaml": "detector: {name: npr_tiny}\n",
        ".hydra/hydra.yaml": "hydra: {mode: RUN}\n",
        ".hydra/overrides.yaml": "- detector=npr_tiny\n",
        "train.log": "[train][INFO] - the first run's log\n",
    }.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return files_of(folder)


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, its bytes by its relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def started(overrides: list[str], hook: str) -> int | None:
    """Calls train.yaml's callbacks as Hydra does when a run (`on_run_start`) or a sweep
    (`on_multirun_start`) starts; the exit status they end the process with, None when they let it go on."""
    config = compose_config("train", overrides)
    HydraConfig.instance().cfg = None
    try:
        for callback in (config.hydra.callbacks or {}).values():
            getattr(hydra.utils.instantiate(callback), hook)(config=config)
    except SystemExit as stop:
        return stop.code
    finally:
        HydraConfig.instance().cfg = None
    return None


def test_a_run_into_a_folder_holding_a_run_is_refused_before_hydra_writes_into_it(tmp_path, capsys):
    """Hydra writes `.hydra/` and opens `train.log` right after the run starts: the claim is made
    before, so the first run's record of its settings and its log stay as they were."""
    kept = a_finished_run(tmp_path / "run")
    assert started(["detector=dct_tiny", f"hydra.run.dir={tmp_path / 'run'}"], "on_run_start") == 2
    assert "already holds a run (its config.yaml)" in capsys.readouterr().err
    assert files_of(tmp_path / "run") == kept
    # a new folder is claimed for the run, and a resume of the run's own checkpoint goes on in place
    assert started([f"hydra.run.dir={tmp_path / 'new'}"], "on_run_start") is None
    assert (tmp_path / "new" / "config.yaml").is_file()
    resume = f"ckpt_path={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}"
    assert started([f"hydra.run.dir={tmp_path / 'run'}", resume], "on_run_start") is None


def test_a_sweep_into_a_folder_holding_a_sweeps_runs_is_refused_before_its_first_job(tmp_path, capsys):
    a_finished_run(tmp_path / "sweep" / "0")
    (tmp_path / "sweep" / "multirun.yaml").write_text("hydra: {mode: MULTIRUN}\n")
    kept = files_of(tmp_path / "sweep")
    assert started([f"hydra.sweep.dir={tmp_path / 'sweep'}"], "on_multirun_start") == 2
    assert "already holds the runs of a sweep (1, e.g. 0/config.yaml)" in capsys.readouterr().err
    assert files_of(tmp_path / "sweep") == kept
    # a job that failed before its first checkpoint gave its folder back: the sweep may run again there
    (tmp_path / "sweep" / "0" / "config.yaml").unlink()
    assert started([f"hydra.sweep.dir={tmp_path / 'sweep'}"], "on_multirun_start") is None


def test_a_run_refused_by_a_check_gives_back_the_folder_claimed_when_it_started(tmp_path, small_dataset):
    from datamodules.records import SettingError
    from detectors.run_directory import claim_run_directory
    from tests.helpers import prepare_train_config, small_train_overrides
    from train import train

    claim_run_directory(tmp_path / "run", None)  # as the callback does when `python train.py` starts
    with pytest.raises(SettingError, match="target_fpr"):
        train(prepare_train_config([*small_train_overrides(small_dataset), "target_fpr=1.5"], tmp_path / "run"))
    assert not (tmp_path / "run" / "config.yaml").exists()


@pytest.mark.slow
def test_python_train_py_refused_from_a_run_folder_leaves_it_byte_identical(tmp_path, small_dataset):
    kept = a_finished_run(tmp_path / "run")
    done = train_py(tmp_path, *quick_run(small_dataset), "detector=dct_tiny", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2 and "already holds a run" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and files_of(tmp_path / "run") == kept
    a_finished_run(tmp_path / "sweep" / "0")
    kept = files_of(tmp_path / "sweep")
    done = train_py(tmp_path, "-m", *quick_run(small_dataset), "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert done.returncode == 2 and "already holds the runs of a sweep" in done.stderr, done.stderr[-3000:]
    assert files_of(tmp_path / "sweep") == kept


@pytest.mark.slow
def test_python_train_py_m_runs_the_jobs_after_a_refused_one_and_names_it_at_the_end(tmp_path, small_dataset):
    sweep = f"hydra.sweep.dir={tmp_path / 'x'}"
    done = train_py(tmp_path, "-m", *quick_run(small_dataset), "target_fpr=1.5,0.05", sweep)
    assert done.returncode == 2, done.stderr[-3000:]
    assert (tmp_path / "x" / "1" / "metrics.json").is_file()
    assert not (tmp_path / "x" / "0" / "config.yaml").exists()  # the refused job gave its folder back
    assert "job #0 (target_fpr=1.5) was refused: detector: target_fpr must be a number between 0 and 1" in done.stderr
    assert "Traceback" not in done.stderr
