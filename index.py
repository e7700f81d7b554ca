"""Index a collection's panels for search: `python index.py input=DIR|MANIFEST index=DIR`."""

from __future__ import annotations

import logging
from typing import Any

import hydra
from omegaconf import DictConfig

from collection.build import build_index, merge_parts
from collection.store import IndexBusy, IndexRefused
from datamodules.records import LayoutError
from inference.cli import expected_failures, run

log = logging.getLogger("index")


class IndexFailed(RuntimeError):
    """The build could not start or finish; the message says why."""


def index(cfg: DictConfig) -> dict[str, Any]:
    """Add the input's new panels to the index (or fold shard parts in with `merge=true`)."""
    try:
        if cfg.merge:
            result = merge_parts(cfg.index, cfg.descriptor, cfg.get("descriptor_checkpoint"))
            log.info(
                "merged %(parts)d parts, %(panels)d panels: %(total_panels)d in the index (%(index_type)s)", result
            )
            return result
        result = build_index(
            cfg.input,
            cfg.index,
            cfg.descriptor,
            cfg.layout,
            bool(cfg.split_panels),
            cfg.shard,
            cfg.index_type,
            int(cfg.commit_every),
            int(cfg.get("workers", 1)),
            cfg.get("descriptor_checkpoint"),
        )
    except (IndexRefused, IndexBusy, LayoutError, ValueError) as error:
        raise IndexFailed(str(error)) from None
    log.info(
        "indexed %(panels)d panels of %(files)d files (%(errors)d unreadable, %(skipped)d already indexed) "
        "in %(seconds).1f s: %(total_panels)d panels in %(index)s (%(index_type)s)",
        result,
    )
    return result


@hydra.main(version_base="1.3", config_path="configs", config_name="index")
@expected_failures(IndexFailed)
def main(cfg: DictConfig) -> None:
    index(cfg)


if __name__ == "__main__":
    run(main)
