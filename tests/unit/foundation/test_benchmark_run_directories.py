"""Benchmarks that train through train.py again (other settings, a resume after an interruption)
start from an empty run directory: train.py refuses a run directory that holds a run."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest
import torch

import benchmarks.cross_generator as cross_generator
import benchmarks.localization_default as localization_default
import benchmarks.localization_quality as localization_quality


def fake_train_py(run, seen, returncode=0):
    """Stands in for the benchmark's `subprocess` running `python train.py`: notes what the run
    directory held when it started, then leaves what a run leaves (its claim, checkpoints, metrics)."""

    def run_train_py(command, **kwargs):
        seen.append(sorted(p.name for p in run.iterdir()))
        (run / "config.yaml").write_text("a run's claim")
        (run / "checkpoints").mkdir(exist_ok=True)
        torch.save({"epoch": 0, "global_step": 1}, run / "checkpoints" / "last.ckpt")
        (run / "metrics.json").write_text(json.dumps({"checkpoint": str(run / "checkpoints" / "last.ckpt")}))
        return SimpleNamespace(returncode=returncode)

    return SimpleNamespace(run=run_train_py, STDOUT=subprocess.STDOUT, CalledProcessError=subprocess.CalledProcessError)


def test_cross_generator_trains_again_into_an_emptied_run_directory(tmp_path, monkeypatch):
    """The second run was refused (train.py exited 2) and its row said 'failed'."""
    run, seen = tmp_path / "run", []
    monkeypatch.setattr(cross_generator, "subprocess", fake_train_py(run, seen))
    for epochs in (1, 2):
        cross_generator.train_detector("npr_tiny", tmp_path / "m.csv", run, epochs, 32, 0, [], {"epochs": epochs})
    assert seen == [["train.log"], ["train.log"]]


@pytest.mark.parametrize("script", ["localization_quality", "localization_default"])
def test_the_localization_benchmarks_train_again_into_an_emptied_run_directory(tmp_path, monkeypatch, script):
    run, seen = tmp_path / "run", []
    monkeypatch.setattr(localization_quality, "subprocess", fake_train_py(run, seen))
    monkeypatch.setattr(localization_default, "subprocess", fake_train_py(run, seen))
    for epochs in (1, 2):
        if script == "localization_quality":
            localization_quality.train("seg_tiny", tmp_path / "data", run, epochs, 1.0, reuse=True)
        else:
            localization_default.run_train("seg_tiny", tmp_path / "data", run, [f"trainer.max_epochs={epochs}"])
    log = "train.log" if script == "localization_quality" else "stdout.log"
    assert seen == [[log], [log]]
