"""Where train.py's runs go, settled before Hydra writes into them (a Hydra callback, configs/train.yaml).

A run directory holds one run. A second run into it (two started in the same second, or a
`hydra.run.dir` used before) would replace the first's checkpoints and test them as its own: the
first run claims it by creating its `config.yaml`, and the second is refused, unless it resumes a
checkpoint of that directory. Hydra writes a run's `.hydra/` record and opens its `train.log`
before the task starts, so the claim is made in `RunDirectories.on_run_start`, before that: a
refused run leaves the directory it was refused from as it was. A sweep (`-m`) into a folder that
holds a sweep's runs is refused as a whole, before its first job.

The run and sweep folders are built from `paths.*`, which read the run's own Hydra config
(`${hydra:runtime.cwd}`): Hydra sets that config before it resolves a single run's folder, but a
sweep's folder is resolved first, before any job, where it is not set yet.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from datamodules.records import LayoutError

EXPECTED_FAILURE = 2  # the exit status of a failure the user can fix, as inference.cli's
_claimed: set[Path] = set()  # run directories claimed by this process for the run it is about to start


def joins_or_resumes(output_dir: Path, ckpt_path: str | None) -> bool:
    """Another process of a multi-process run (which shares the first's directory), or a resume of a
    checkpoint of this directory (the same run going on in place): nothing to claim."""
    return any(os.environ.get(name, "0") != "0" for name in ("LOCAL_RANK", "NODE_RANK")) or bool(
        ckpt_path and Path(output_dir).resolve() in Path(ckpt_path).resolve().parents
    )


def claim_run_directory(output_dir: Path, ckpt_path: str | None) -> None:
    """Claims `output_dir` for the run about to start, or refuses it when it holds a run."""
    output_dir = Path(output_dir)
    if joins_or_resumes(output_dir, ckpt_path):
        return
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        (output_dir / "config.yaml").open("x").close()
    except FileExistsError:
        raise LayoutError(
            f"{output_dir} already holds a run (its config.yaml): give another hydra.run.dir, or leave it out "
            "for a new run directory; to go on with that run, give its checkpoint as ckpt_path"
        ) from None
    _claimed.add(output_dir.resolve())


@contextmanager
def claimed_run_directory(output_dir: Path, ckpt_path: str | None) -> Iterator[None]:
    """The run in `output_dir`, claimed (here, unless `RunDirectories` claimed it as the run started).
    A run that fails before its first checkpoint (refused data, a missing package) gives the
    directory back (removed when nothing else is in it), so the same command runs again once the
    cause is mended."""
    output_dir = Path(output_dir)
    if joins_or_resumes(output_dir, ckpt_path):
        yield
        return
    if output_dir.resolve() not in _claimed:
        claim_run_directory(output_dir, ckpt_path)
    _claimed.discard(output_dir.resolve())  # a later run of this process into it is a second run
    try:
        yield
    except BaseException:
        if not (output_dir / "checkpoints").exists():
            (output_dir / "config.yaml").unlink(missing_ok=True)
            with suppress(OSError):  # made by the claim and left empty: nothing of the run remains
                output_dir.rmdir()
        raise


def claimed_runs(sweep_dir: Path) -> list[Path]:
    """The run directories under a sweep folder that hold a run (their claim, not Hydra's record)."""
    return sorted(p.parent for p in Path(sweep_dir).rglob("config.yaml") if ".hydra" not in p.parts)


class RunDirectories(Callback):
    """Claims a run's directory before Hydra writes into it, and lets `python train.py -m ...` resolve
    its sweep folder (`hydra.sweep.dir`) from the sweep's own Hydra config, as a single run's is."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)  # what Hydra's run_job does before it reads the folder
        output_dir = Path(os.path.abspath(str(OmegaConf.select(config, "hydra.run.dir"))))
        with refused_before_the_run(config):
            claim_run_directory(output_dir, config.get("ckpt_path"))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)
        sweep_dir = Path(os.path.abspath(str(OmegaConf.select(config, "hydra.sweep.dir"))))
        held = [] if joins_or_resumes(sweep_dir, None) else claimed_runs(sweep_dir)
        with refused_before_the_run(config):
            if held:
                raise LayoutError(
                    f"{sweep_dir} already holds the runs of a sweep ({len(held)}, e.g. {held[0].name}/config.yaml): "
                    "give another hydra.sweep.dir, or leave it out for a new sweep folder"
                )


@contextmanager
def refused_before_the_run(config: DictConfig) -> Iterator[None]:
    """A refusal before Hydra starts the task, said in one line with the status of a failure the user
    can fix (the task's own refusals are said by inference.cli.expected_failures); `debug=true` or
    `HYDRA_FULL_ERROR=1` show the traceback."""
    try:
        yield
    except LayoutError as refused:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or config.get("debug"):
            raise
        print(refused, file=sys.stderr)
        raise SystemExit(EXPECTED_FAILURE) from None
