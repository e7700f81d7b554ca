"""A job of a Hydra multirun writes a relative output in its own folder, so no job replaces another's."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import open_dict, read_write

from inference.job_folders import place_in_job_folder
from tests.helpers import compose_config

ENTRY_POINTS = ("infer", "calibrate", "export", "index", "generate")


def as_hydra_job(tmp_path: Path, mode: RunMode, number: int = 1) -> Path:
    """Hydra's record of the running job, as `python infer.py -m ...` sets it for job `number`."""
    cfg = compose_config("infer", ["model=m.ckpt", "input=photos"])
    folder = tmp_path / "sweep" / str(number)
    with read_write(cfg), open_dict(cfg):
        cfg.hydra.mode = mode
        cfg.hydra.job.num = number
        cfg.hydra.runtime.output_dir = str(folder)
    HydraConfig().set_config(cfg)
    return folder


@pytest.fixture(autouse=True)
def no_hydra_job_left_behind():
    yield
    HydraConfig.instance().cfg = None


def config(*overrides: str):
    cfg = compose_config("infer", ["model=m.ckpt", "input=photos", *overrides])
    with open_dict(cfg):
        del cfg["hydra"]  # as the task function sees it
    return cfg


def test_a_multirun_job_writes_a_relative_output_in_its_own_folder(tmp_path):
    folder = as_hydra_job(tmp_path, RunMode.MULTIRUN)
    cfg = config("output=scores.csv", "masks_dir=maps")
    place_in_job_folder(cfg, ("output", "masks_dir"))
    assert cfg.output == str(folder / "scores.csv")
    assert cfg.masks_dir == str(folder / "maps")


def test_an_absolute_output_and_an_unset_path_are_kept_as_given_in_a_multirun(tmp_path):
    as_hydra_job(tmp_path, RunMode.MULTIRUN)
    cfg = config(f"output={tmp_path / 'all.csv'}")
    place_in_job_folder(cfg, ("output", "masks_dir"))
    assert cfg.output == str(tmp_path / "all.csv")
    assert cfg.masks_dir is None


@pytest.mark.parametrize("sharding", ["shard=1/4", "merge=true"])
def test_the_jobs_of_a_sharded_run_keep_their_output_where_the_parts_meet(tmp_path, sharding):
    as_hydra_job(tmp_path, RunMode.MULTIRUN)
    cfg = config("output=scores.csv", sharding)
    place_in_job_folder(cfg, ("output",))
    assert cfg.output == "scores.csv"


def test_a_single_run_writes_where_it_is_told(tmp_path):
    as_hydra_job(tmp_path, RunMode.RUN)
    cfg = config("output=scores.csv")
    place_in_job_folder(cfg, ("output",))
    assert cfg.output == "scores.csv"


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_each_entry_point_gives_a_multiruns_jobs_their_folders_under_multirun_and_its_name(entry_point):
    hydra = compose_config(entry_point, []).hydra
    assert hydra.sweep.dir.startswith(f"multirun/{entry_point}/")  # then <job number>/, Hydra's subdir
