"""A whole generated dataset from a folder of authentic images (or the bundled photographs).

Three phases, each a list of tasks (`synthesis.items`) run in order or over CPU workers:
1. panels: every photo gives genuine panels (the photo, shrunk to `max_side`, plus random crops at
   random scales) written under `real/`; splits are drawn per photo, so every image made from one
   authentic photo (genuine panels and all their fakes) lands in one split;
2. generators: the autoencoder generator is trained once per decoder variant on the genuine panels
   and cached (`<output>/generators/<variant>.pt`, or `generator.dir`), then reused;
3. forgeries: for each panel, each active operation is applied `ops[name]` times on average
   (`synthesis.planning`).

Results do not depend on the number of workers or the order of completion, and an interrupted run
continues where it stopped (see `synthesis.items`). `generate_dataset` hands back plain manifest
rows; `make_generated_manifest` also writes them as `manifest.csv`.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import time
from collections import Counter
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Mapping, Sequence

from datamodules.io import split_keys, split_keys_by_group, write_manifest
from synthesis.families import check_reused_weights
from synthesis.items import execute, fragment_path, init_worker, one_thread
from synthesis.photos import stamped_table
from synthesis.planning import plan_items
from synthesis.shards import check_shards, finish_shard, finished_shards, shared_phase
from synthesis.spec import DEFAULT_RATES, KINDS, OPERATIONS, DatasetSpec, GeneratorOptions
from synthesis.summary import dataset_summary

log = logging.getLogger(__name__)

__all__ = [
    "OPERATIONS",
    "KINDS",
    "DEFAULT_RATES",
    "GeneratorOptions",
    "DatasetSpec",
    "generate_dataset",
    "make_generated_manifest",
]


def _generators(
    spec: DatasetSpec,
    output: Path,
    panels: list[dict[str, Any]],
    pool: Executor | None,
    progress: bool,
    counts: Counter,
) -> tuple[dict[str, str], dict[str, str]]:
    """Weights path per variant, training the ones not cached; and what happened to each."""
    options = spec.generator
    folder = Path(options.dir) if options.dir else output / "generators"
    training = options.training()
    train_panels = sorted(
        p["path"] for p in panels if p["path"].endswith("_full.png") and min(p["height"], p["width"]) >= options.crop
    )
    # A training's fragment is named for its run and removed once its weights are written: one left
    # behind is a training killed before that, of no use to any run.
    for stale in fragment_path(output, "generator/any").parent.glob("*.json"):
        stale.unlink()
    paths, status, tasks = {}, {}, []
    for index, variant in enumerate(options.variants):
        weights = folder / f"{variant}.pt"
        paths[variant] = str(weights.resolve())
        sidecar = weights.with_suffix(".json")
        if weights.is_file():
            meta = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
            if options.dir:
                check_reused_weights(weights, meta.get("training"), training)
            if options.dir or (meta.get("training") == training and meta.get("seed") == spec.seed + index):
                status[variant] = f"reused {weights}" + _psnr_note(meta)
                continue
            log.info("generator %s: cached weights were trained with other options; retraining", variant)
        status[variant] = f"trained -> {weights}"
        tasks.append(
            {
                "type": "generator",
                "id": f"generator/{variant}_{spec.seed + index}_{time.time_ns()}",
                "output": str(output),
                "variant": variant,
                "seed": spec.seed + index,
                "training": training,
                "images": train_panels,
                "weights": str(weights),
            }
        )
    if tasks and not train_panels:
        raise ValueError(f"no genuine panel is at least {options.crop} px: cannot train the generators")
    results = execute(tasks, pool, "generators", progress, Counter())
    for task, result in zip(tasks, results):  # the marker of a training task is its weights file
        fragment_path(output, task["id"]).unlink(missing_ok=True)
        if "skipped" in result:
            raise ValueError(f"generator {task['variant']}: {result['skipped']}")
        status[task["variant"]] += _psnr_note(result["generator"])
    counts["generators_trained"] += len(tasks)
    return paths, status


def _families(spec: DatasetSpec, output: Path, panels: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """Weights of the latent autoencoder and DDPMs the active operations need (trained unless cached)."""
    from synthesis.families import FAMILY_OPERATIONS, train_families

    needs = set(spec.active) & set(FAMILY_OPERATIONS)
    if not needs:
        return {}, {}
    folder = Path(spec.generator.dir) if spec.generator.dir else output / "generators"
    panel_paths = sorted(output / p["path"] for p in panels if p["path"].endswith("_full.png"))
    return train_families(spec.diffusion, folder, panel_paths, spec.seed, needs, reuse_any=bool(spec.generator.dir))


def _psnr_note(meta: Mapping[str, Any]) -> str:
    if "psnr_db" not in meta:
        return ""
    return f" (re-render PSNR {meta['psnr_db']} dB on its training panels, {meta.get('seconds', '?')} s to train)"


def generate_dataset(
    output: str | os.PathLike,
    spec: DatasetSpec = DatasetSpec(),
    photos: Sequence[str | os.PathLike] | None = None,
    root: str | os.PathLike | None = None,
    workers: int = 1,
    progress: bool = True,
    shard: tuple[int, int] = (0, 1),
    merge: bool = False,
) -> dict[str, Any]:
    """Generate the dataset under `output`; returns {"rows", "pairs", "summary"}.

    `photos` defaults to the bundled photographs; `root` (their common folder) names the photos'
    keys and categories (first sub-folder). `workers` > 1 runs items in that many processes.
    `shard=(i, n)` makes only every n-th forgery item from the i-th (the panels and generators,
    which every item needs, are made once by whichever shard comes first; the others reuse them);
    its summary counts its own items and no manifest rows are returned. `merge=True` checks that
    every shard has finished and joins their items, exactly as a single run would.
    Raises ValueError if `output` holds a dataset generated with a different spec.
    """
    output = Path(output).resolve()
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"shard must be i/n with 0 <= i < n, got {index}/{count}")
    if merge:
        finished_shards(output)  # before the shared phase makes anything
    started = time.perf_counter()
    counts: Counter = Counter()
    pool = (
        ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=init_worker) if workers > 1 else None
    )
    try:
        with one_thread():
            with shared_phase(output, exclusive=count > 1 or merge):
                table = stamped_table(output, spec, photos, root)
                panel_tasks = _panel_tasks(output, spec, table)
                fragments = execute(panel_tasks, pool, "panels", progress, counts)
                for unreadable in (f["skipped"] for f in fragments if f.get("skipped")):
                    log.warning("skipped a source image: %s", unreadable)
                panels = [p for f in fragments for p in f["panels"]]
                needs_generator = any(op in spec.active for op in ("rerender", "region_edit"))
                generators, generator_status = (
                    ({}, {}) if not needs_generator else _generators(spec, output, panels, pool, progress, counts)
                )
                families, family_status = _families(spec, output, panels)
                generator_status.update(family_status)
            items = plan_items(spec, output, panels, generators, families)
            if merge:
                check_shards(output, items)
            mine = items if count == 1 else items[index::count]
            fragments += execute(mine, pool, "forgeries", progress, counts)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if count > 1:
        return finish_shard(output, shard, len(mine), counts, time.perf_counter() - started)
    skipped = Counter(item["op"] for item, f in zip(items, fragments[len(panel_tasks) :]) if f.get("skipped"))
    sizes = {"photos": len(table), "panels": len(panels), "items": len(panel_tasks) + len(items)}
    return _whole_dataset(output, fragments, counts, skipped, sizes, generator_status, started)


def _whole_dataset(
    output: Path,
    fragments: list[dict[str, Any]],
    counts: Counter,
    skipped: Counter,
    sizes: dict[str, int],
    generator_status: dict[str, str],
    started: float,
) -> dict[str, Any]:
    """The rows and pairs of every finished item, the pairs file and contact sheet written, and the
    summary (`started`: the run's `time.perf_counter()` at its start)."""
    from synthesis.contact_sheet import contact_sheet

    rows = [row for f in fragments for row in f["rows"]]
    pairs = [pair for f in fragments for pair in f["pairs"]]
    _write_pairs(output / "duplication_pairs.csv", pairs)
    sheet = contact_sheet(output, rows)
    summary = {
        **dataset_summary(rows, pairs, fragments, counts, skipped),
        "output": str(output),
        **sizes,
        "generators": generator_status,
        "contact_sheet": str(sheet) if sheet else None,
        "seconds": round(time.perf_counter() - started, 1),
    }
    return {"rows": rows, "pairs": pairs, "summary": summary}


def _panel_tasks(output: Path, spec: DatasetSpec, table: list[dict[str, str]]) -> list[dict[str, Any]]:
    """One `panels` task per photo, with the split drawn for its source (within each category when
    genuine kinds are made, so every kind trains, calibrates and is tested on its own sources)."""
    if spec.genuine_kinds:
        categories: dict[str, str] = {}
        for p in table:  # a source's category is its first entry's: phone photos follow their photograph
            categories.setdefault(p["source"], p["category"])
        splits = split_keys_by_group(categories, spec.split_fractions, spec.seed)
    else:
        splits = split_keys([p["source"] for p in table], spec.split_fractions, spec.seed)
    spec_dict = {k: v for k, v in asdict(spec).items() if k != "generator"}
    return [
        {
            "type": "panels",
            "id": f"panels/{p['key']}",
            "output": str(output),
            "spec": spec_dict,
            "photo": p,
            "split": splits[p["source"]],
        }
        for p in table
    ]


def make_generated_manifest(
    output: str | os.PathLike,
    spec: DatasetSpec | None = None,
    photos: Sequence[str | os.PathLike] | None = None,
    root: str | os.PathLike | None = None,
    workers: int = 1,
    progress: bool = True,
    merge: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """`generate_dataset` under `output`, then its `manifest.csv`; returns (manifest, summary).
    `merge=True` joins the finished shards of `generate_dataset(shard=...)` instead of making items.

    Splits are drawn per authentic photo by the generator, so the manifest keeps them as they are.
    """
    output = Path(output).resolve()  # "a/b/../c" names c: no folder b is made for it
    result = generate_dataset(
        output, spec or DatasetSpec(), photos=photos, root=root, workers=workers, progress=progress, merge=merge
    )
    write_manifest(
        (
            {**row, "path": str(output / row["path"]), "mask": str(output / row["mask"]) if row.get("mask") else None}
            for row in result["rows"]
        ),
        output / "manifest.csv",
    )
    return output / "manifest.csv", result["summary"]


PAIR_COLUMNS = (
    "pair",
    "panel_a",
    "panel_b",
    "mask_a",
    "mask_b",
    "scope",
    "operations",
    "categories",
    "source",
    "split",
)


def _write_pairs(path: Path, pairs: list[dict[str, Any]]) -> None:
    """Duplication pairs for the multi-label task: two panels, their masks and the operation set."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=PAIR_COLUMNS)
        writer.writeheader()
        writer.writerows(pairs)
    os.replace(tmp, path)
