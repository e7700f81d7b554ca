"""Index a collection's panels for search: `python index.py input=DIR|MANIFEST index=DIR`."""

from __future__ import annotations

import logging
from typing import Any

import hydra
from omegaconf import DictConfig

from collection.build import build_index, index_up_to_date, merge_parts
from collection.store import IndexBusy, IndexRefused
from datamodules.records import LayoutError
from inference.cli import expected_failures, run
from inference.job_folders import place_in_job_folder
from inference.parts import Shard
from inference.runs import launch
from inference.runtime import ModelLoadError

log = logging.getLogger("index")


class IndexFailed(RuntimeError):
    """The build could not start or finish; the message says why."""


def index(cfg: DictConfig) -> dict[str, Any]:
    """Add the input's new panels to the index (or fold shard parts in with `merge=true`).

    With `devices=N` (Lightning Fabric processes, as `infer.py` scores) each process describes its
    share into a part of its own, as a `shard` would, and the first merges the parts at the end
    (unless the run is itself one shard of several: then `merge=true` after the last)."""
    place_in_job_folder(cfg, ("index",))  # a multirun's jobs each build their own (shards: one)
    try:
        if cfg.merge:
            return merged(cfg)
        shard = Shard.parse(cfg.shard)
        processes = launch(cfg.devices, cfg.num_nodes, cfg.strategy, cfg.device)
        mine = process_shard(shard, processes.rank, processes.world_size)
        result = build_index(
            cfg.input,
            cfg.index,
            cfg.descriptor,
            cfg.layout,
            bool(cfg.split_panels),
            f"{mine.index}/{mine.count}",
            cfg.index_type,
            int(cfg.commit_every),
            int(cfg.get("workers", 1)),
            cfg.get("descriptor_checkpoint"),
            processes.device,
        )
        if processes.world_size > 1:
            result.update(processes.total({k: result[k] for k in ("files", "panels", "errors", "skipped")}))
            processes.barrier()  # every part is complete before the first process merges them
            if processes.is_main and shard.count == 1:  # the whole input was described: pruned as one process does
                checkpoint = cfg.get("descriptor_checkpoint")
                removed = index_up_to_date(cfg.input, cfg.index, cfg.descriptor, cfg.layout, checkpoint)
                result.update(merged(cfg), index=str(cfg.index), removed=removed)
            processes.barrier()
    except (IndexRefused, IndexBusy, LayoutError, ModelLoadError, ValueError) as error:
        raise IndexFailed(str(error)) from None
    if not processes.is_main:
        return result
    log.info(
        "indexed %(panels)d panels of %(files)d files (%(errors)d unreadable, %(skipped)d already indexed) "
        "in %(seconds).1f s: %(total_panels)d panels in %(index)s (%(index_type)s)",
        result,
    )
    return result


def process_shard(shard: Shard, rank: int, world_size: int) -> Shard:
    """This process's share: its rank's every `world_size`-th file of the job's shard, as one shard
    of `shard.count * world_size` (the parts of all processes of all jobs cover every file once)."""
    return Shard(shard.index + shard.count * rank, shard.count * world_size)


def merged(cfg: DictConfig) -> dict[str, Any]:
    result = merge_parts(cfg.index, cfg.descriptor, cfg.get("descriptor_checkpoint"))
    log.info("merged %(parts)d parts, %(panels)d panels: %(total_panels)d in the index (%(index_type)s)", result)
    return result


@hydra.main(version_base="1.3", config_path="configs", config_name="index")
@expected_failures(IndexFailed)
def main(cfg: DictConfig) -> None:
    index(cfg)


if __name__ == "__main__":
    run(main, config_name="index")
