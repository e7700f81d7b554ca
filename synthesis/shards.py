"""Sharded generation (`generate.py shard=i/n`, then `merge=true`): one shard at a time makes the
shared part, each shard marks itself done, and a merge is refused until every item is on disk."""

from __future__ import annotations

import json
import os
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from synthesis.items import item_done


def shards_dir(output: Path) -> Path:
    return output / ".items" / "shards"


@contextmanager
def shared_phase(output: Path, exclusive: bool) -> Iterator[None]:
    """With `exclusive`, one shard at a time makes the shared part (sources, panels, generators):
    the first makes it, the others wait and then find it done. An advisory file lock, so shards on
    one machine or on a shared file system that honours locks do not write the same files at once."""
    if not exclusive:
        yield
        return
    import fcntl

    shards_dir(output).mkdir(parents=True, exist_ok=True)
    with open(shards_dir(output) / "shared.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def mark_shard_done(output: Path, index: int, count: int, items: int) -> None:
    path = shards_dir(output) / f"{index}-of-{count}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"shard": index, "of": count, "items": items}))
    os.replace(tmp, path)


def finished_shards(output: Path) -> list[dict[str, Any]]:
    """The finished shards' marks in `output`, the latest last; a refusal when there is none, which
    `merge=true` checks before it makes anything (a mistyped output would otherwise be filled)."""
    marks = sorted(shards_dir(output).glob("*-of-*.json"), key=lambda path: path.stat().st_mtime)
    if not marks:
        raise ValueError(f"nothing to merge in {output}: no shard has finished there (run shard=i/n first)")
    return [json.loads(path.read_text()) for path in marks]


def check_shards(output: Path, items: list[dict[str, Any]]) -> None:
    """Refuse to merge unless every item's result is on disk, whichever shards made it (shards of
    several splittings join as well); the message names the shards of the latest splitting to
    (re)run."""
    done = finished_shards(output)
    count = done[-1]["of"]
    missing = set(range(count)) - {d["shard"] for d in done if d["of"] == count}
    absent = {k % count for k, item in enumerate(items) if not item_done(item)}
    if absent:
        rerun = ", ".join(f"shard={i}/{count}" for i in sorted(missing | absent))
        raise ValueError(
            f"{output}: shards not finished or with items missing: rerun {rerun} (a rerun "
            "keeps every finished item), then merge again"
        )


def finish_shard(output: Path, shard: tuple[int, int], items: int, counts: Counter, seconds: float) -> dict[str, Any]:
    """Mark shard `i/n` done; what `generate_dataset` returns for it (its own counts, no rows)."""
    index, count = shard
    mark_shard_done(output, index, count, items)
    summary = {
        "shard": f"{index}/{count}",
        "output": str(output),
        "items": items,
        "made": counts["made"],
        "reused": counts["reused"],
        "seconds": round(seconds, 1),
    }
    return {"rows": [], "pairs": [], "summary": summary}
