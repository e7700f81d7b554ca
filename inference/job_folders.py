"""Where each job of a Hydra multirun (`python infer.py -m ...`) writes: its own folder.

infer.py, calibrate.py, export.py, index.py and generate.py run in the folder they are started
from (`hydra.run.dir: .`), so a relative `output` is a file there. In a multirun every job would
write that same file and the last one would replace the others' results without a word. So, as
Hydra gives every job a folder of its own (`hydra.sweep.dir/<job number>/`), a job of a multirun
takes its relative written paths inside that folder and says so. An absolute path is written as it
is given: that is how the jobs of a sweep share one file on purpose (`resume=true` gathering every
job's rows, an index every job adds to). The jobs of a sharded run (`shard=i/n`, `merge=true`)
keep their output as given, since their parts are meant to meet there.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

log = logging.getLogger("toolkit")


def multirun_job() -> tuple[int, Path] | None:
    """This job's number and folder when it is one job of a multirun; None in a single run (or
    when no Hydra app is running, as when a test calls an entry point's function)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    hydra = HydraConfig.get()
    return int(hydra.job.num), Path(hydra.runtime.output_dir)


def job_path(path: Any, key: str, sharded: bool = False) -> Any:
    """`path` as this job writes it: in a multirun, a relative one inside the job's own folder
    (logged, with how to share a file instead); otherwise, absolute, empty or `sharded`, as given."""
    job = multirun_job()
    if job is None or sharded or path in (None, "") or Path(str(path)).is_absolute():
        return path
    number, folder = job
    placed = str(folder / str(path))
    log.info(
        "multirun job %d writes %s=%s in its own folder: %s (an absolute %s is shared by every job)",
        number,
        key,
        path,
        placed,
        key,
    )
    return placed


def place_in_job_folder(cfg: Any, keys: Sequence[str]) -> None:
    """Set the written paths `keys` of an entry point's config to where this job writes them
    (`job_path`); a sharded run's (`shard=i/n` or `merge=true`) stay where its parts meet."""
    sharded = bool(cfg.get("shard") or cfg.get("merge"))
    for key in keys:
        cfg[key] = job_path(cfg.get(key), key, sharded)
