"""What a search's rows were found with: `<output stem>.run.json` beside them, as infer.py's runs.

The rows of a search depend on the pair detector (its file's SHA-256 and threshold), on the index
(its folder, descriptor, format, type, how it split panels, and which commit of it: its panel count
and generation, since an index grows between searches) and on the search's own settings (`top_k`,
`exclude_same`, `split_panels`, `index_nprobe`, where it searched). A search writes its output anew;
one into an output whose stamp names another detector, index or settings says what changed, since
the rows it replaces cannot be told apart from its own afterwards.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from collection.store import NPROBE, PanelStore
from datamodules.io import file_sha256
from inference.writer import stamp_run

log = logging.getLogger(__name__)

COMPARED = ("model_sha256", "threshold", "index", "searched_with")  # what makes other rows; the model's path may move


def search_stamp(cfg: Any, store: PanelStore, threshold: float) -> dict[str, Any]:
    """The stamp of a search of `store` with infer.py's configuration `cfg` at `threshold`."""
    meta = store.meta
    nprobe = cfg.get("index_nprobe")
    scanned = (NPROBE if nprobe is None else int(nprobe)) if store.index_type in ("ivf", "ivf_pq") else None
    return {
        "model": str(Path(cfg.model).resolve()),
        "model_sha256": file_sha256(cfg.model),
        "threshold": float(threshold),
        "index": {
            "path": str(Path(cfg.index).resolve()),
            "descriptor": meta.get("descriptor"),  # its full name: settings, a pairnet checkpoint's hash
            **{k: meta[k] for k in ("descriptor_checkpoint", "descriptor_checkpoint_sha256") if k in meta},
            "format_version": meta.get("format_version"),
            "index_type": store.index_type,
            "split_panels": store.state("split_panels"),
            "panels": store.n_panels,
            "generation": store.state("generation"),  # the commit searched: a build adds one
        },
        "searched_with": {
            "top_k": int(cfg.top_k),
            "exclude_same": str(cfg.get("exclude_same", "path")),
            "split_panels": bool(cfg.get("split_panels", False)),
            "index_nprobe": scanned,
            "on_gpu": bool(store.on_gpu),
        },
    }


def stamp_search(output: Path, stamp: dict[str, Any]) -> None:
    """Write `stamp` as the output's run.json; an earlier one of other rows is said, with what changed."""
    path = output.with_name(f"{output.stem}.run.json")
    if output.is_file() and path.is_file():
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            before = None
        if isinstance(before, dict) and (changed := differences(before, stamp)):
            log.warning(
                "%s held rows found otherwise (%s): this search replaces them; to keep both, write to another output",
                output,
                "; ".join(changed),
            )
    stamp_run(output, stamp, compare=False)


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`key: before -> now` for each compared setting that differs (one level into the index and
    the search settings); an earlier run that was no search is said to be one."""
    if not isinstance(before.get("index"), dict):
        return [f"a scoring run of {before.get('model')}, not a search"]
    said = []
    for key in COMPARED:
        old, new = before.get(key), now[key]
        if isinstance(new, dict):
            old = old if isinstance(old, dict) else {}
            said += [f"{key}.{k}: {old.get(k)} -> {v}" for k, v in new.items() if old.get(k) != v]
        elif old != new:
            said.append(f"{key}: {short(old)} -> {short(new)}" if key.endswith("sha256") else f"{key}: {old} -> {new}")
    return said


def short(digest: Any) -> str:
    """A SHA-256 as its first 12 hex digits, as the index names a pairnet checkpoint."""
    return str(digest)[:12]
