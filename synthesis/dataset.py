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
import zlib
from collections import Counter
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from datamodules.io import SPLITS, split_keys, write_manifest
from synthesis.items import execute, fragment_path, init_worker, item_done, one_thread
from synthesis.planning import plan_items
from synthesis.spec import DEFAULT_RATES, KINDS, OPERATIONS, DatasetSpec, GeneratorOptions

log = logging.getLogger(__name__)

__all__ = ["OPERATIONS", "KINDS", "DEFAULT_RATES", "GeneratorOptions", "DatasetSpec", "generate_dataset",
           "make_generated_manifest", "format_summary"]

# ------------------------------------------------------------------------------------ photos
_LABEL_FOLDERS = {"0_real", "real", "1_fake", "fake"}


def _photo_table(photos: Sequence[str | os.PathLike] | None, root: str | os.PathLike | None
                 ) -> list[dict[str, str]]:
    """key (unique file name stem), source (what splits group by) and category of every photo."""
    if photos is None:
        from synthesis.embedded import bundled_photo_paths

        paths, root = bundled_photo_paths(), None
    else:
        paths = [Path(p) for p in photos]
    table, seen = [], set()
    for path in sorted(paths, key=str):
        rel = Path(path).relative_to(root) if root is not None and Path(path).is_relative_to(root) else Path(path.name)
        # label folders of a 0_real/1_fake tree say nothing about the content
        rel = Path(*[p for p in rel.parent.parts if p.lower() not in _LABEL_FOLDERS], rel.name)
        key = "__".join(rel.with_suffix("").parts).replace(" ", "_")
        if key in seen:
            key = f"{key}_{zlib.crc32(str(path).encode()):08x}"
        seen.add(key)
        # a stereo pair (motorcycle_left/right) shows one scene: one source, or the split would leak
        source = key.removesuffix("_left").removesuffix("_right")
        category = rel.parts[0] if len(rel.parts) > 1 else (key if root is None else None)
        table.append({"photo": str(path), "key": key, "source": source, "category": category})
    return table


# ------------------------------------------------------------------------------------ main
def _generators(spec: DatasetSpec, output: Path, panels: list[dict[str, Any]], pool: Executor | None,
                progress: bool, counts: Counter) -> tuple[dict[str, str], dict[str, str]]:
    """Weights path per variant, training the ones not cached; and what happened to each."""
    options = spec.generator
    folder = Path(options.dir) if options.dir else output / "generators"
    training = options.training()
    train_panels = sorted(p["path"] for p in panels
                          if p["path"].endswith("_full.png") and min(p["height"], p["width"]) >= options.crop)
    paths, status, tasks = {}, {}, []
    for index, variant in enumerate(options.variants):
        weights = folder / f"{variant}.pt"
        paths[variant] = str(weights.resolve())
        sidecar = weights.with_suffix(".json")
        if weights.is_file():
            meta = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
            if options.dir or (meta.get("training") == training and meta.get("seed") == spec.seed + index):
                status[variant] = f"reused {weights}" + _psnr_note(meta)
                continue
            log.info("generator %s: cached weights were trained with other options; retraining", variant)
        status[variant] = f"trained -> {weights}"
        tasks.append({"type": "generator", "id": f"generator/{variant}_{spec.seed + index}_{time.time_ns()}",
                      "output": str(output), "variant": variant, "seed": spec.seed + index,
                      "training": training, "images": train_panels, "weights": str(weights)})
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


def generate_dataset(output: str | os.PathLike, spec: DatasetSpec = DatasetSpec(),
                     photos: Sequence[str | os.PathLike] | None = None, root: str | os.PathLike | None = None,
                     workers: int = 1, progress: bool = True, shard: tuple[int, int] = (0, 1),
                     merge: bool = False) -> dict[str, Any]:
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
    started = time.perf_counter()
    counts: Counter = Counter()
    pool = (ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=init_worker)
            if workers > 1 else None)
    try:
        with one_thread():
            with _shared_phase(output, exclusive=count > 1 or merge):
                table = _stamped_table(output, spec, photos, root)
                panel_tasks = _panel_tasks(output, spec, table)
                fragments = execute(panel_tasks, pool, "panels", progress, counts)
                panels = [p for f in fragments for p in f["panels"]]
                needs_generator = any(op in spec.active for op in ("rerender", "region_edit"))
                generators, generator_status = ({}, {}) if not needs_generator else _generators(
                    spec, output, panels, pool, progress, counts)
                families, family_status = _families(spec, output, panels)
                generator_status.update(family_status)
            items = plan_items(spec, output, panels, generators, families)
            if merge:
                _check_shards(output, items)
            mine = items if count == 1 else items[index::count]
            fragments += execute(mine, pool, "forgeries", progress, counts)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if count > 1:
        _mark_shard_done(output, index, count, len(mine))
        return {"rows": [], "pairs": [], "summary": {
            "shard": f"{index}/{count}", "output": str(output), "items": len(mine),
            "made": counts["made"], "reused": counts["reused"],
            "seconds": round(time.perf_counter() - started, 1)}}
    rows = [row for f in fragments for row in f["rows"]]
    pairs = [pair for f in fragments for pair in f["pairs"]]
    skipped = Counter(item["op"] for item, f in zip(items, fragments[len(panel_tasks):]) if f.get("skipped"))
    _write_pairs(output / "duplication_pairs.csv", pairs)
    from synthesis.contact_sheet import contact_sheet

    sheet = contact_sheet(output, rows)
    summary = {**_summary(rows, pairs, fragments, counts, skipped), "output": str(output), "photos": len(table),
               "panels": len(panels), "items": len(panel_tasks) + len(items), "generators": generator_status,
               "contact_sheet": str(sheet) if sheet else None, "seconds": round(time.perf_counter() - started, 1)}
    return {"rows": rows, "pairs": pairs, "summary": summary}


def _panel_tasks(output: Path, spec: DatasetSpec, table: list[dict[str, str]]
                 ) -> list[dict[str, Any]]:
    """One `panels` task per photo, with the split drawn for its source."""
    splits = split_keys([p["source"] for p in table], spec.split_fractions, spec.seed)
    spec_dict = {k: v for k, v in asdict(spec).items() if k != "generator"}
    return [{"type": "panels", "id": f"panels/{p['key']}", "output": str(output), "spec": spec_dict,
             "photo": p, "split": splits[p["source"]]} for p in table]


def _stamped_table(
    output: Path,
    spec: DatasetSpec,
    photos: Sequence[str | os.PathLike] | None,
    root: str | os.PathLike | None,
) -> list[dict[str, str]]:
    """The photo table (with the genuine kinds' sources written), checked against and stamped into
    `output`, so a folder never mixes items made with other options or photos."""
    table = _photo_table(photos, root)
    if spec.genuine_kinds:
        from synthesis.genuine_kinds import write_genuine_sources

        if photos is None:  # the bundled photographs are one kind among the others
            table = [{**p, "category": "photo"} for p in table]
        table += write_genuine_sources(
            output / "sources",
            spec.genuine_kinds,
            spec.seed,
            photos={p["source"]: p["photo"] for p in table},
        )
    if not table:
        raise ValueError("no photos to generate from")
    stamp = output / ".items" / "spec.json"
    fingerprint = {**spec.fingerprint(), "photos": [p["key"] for p in table]}
    if stamp.is_file() and json.loads(stamp.read_text()) != fingerprint:
        raise ValueError(
            f"{output} holds a dataset generated with other options or photos ({stamp}); "
            "choose a new output folder or delete the old one"
        )
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(fingerprint, indent=1, sort_keys=True))
    return table


# ------------------------------------------------------------------------------------ shards
def _shards_dir(output: Path) -> Path:
    return output / ".items" / "shards"


@contextmanager
def _shared_phase(output: Path, exclusive: bool) -> Iterator[None]:
    """With `exclusive`, one shard at a time makes the shared part (sources, panels, generators):
    the first makes it, the others wait and then find it done. An advisory file lock, so shards on
    one machine or on a shared file system that honours locks do not write the same files at once."""
    if not exclusive:
        yield
        return
    import fcntl

    _shards_dir(output).mkdir(parents=True, exist_ok=True)
    with open(_shards_dir(output) / "shared.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _mark_shard_done(output: Path, index: int, count: int, items: int) -> None:
    path = _shards_dir(output) / f"{index}-of-{count}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"shard": index, "of": count, "items": items}))
    os.replace(tmp, path)


def _check_shards(output: Path, items: list[dict[str, Any]]) -> None:
    """Refuse to merge unless one sharding of the items has every shard finished and every item's
    result on disk; the message names the shards to (re)run."""
    done = [json.loads(p.read_text()) for p in sorted(_shards_dir(output).glob("*-of-*.json"))]
    if not done:
        raise ValueError(
            f"nothing to merge in {output}: no shard has finished there (run shard=i/n first)"
        )
    sizes = sorted({d["of"] for d in done})
    if len(sizes) > 1:
        raise ValueError(
            f"{output} holds shards of different splittings (n = {sizes}); merge one of them "
            "into a fresh folder"
        )
    count = sizes[0]
    missing = set(range(count)) - {d["shard"] for d in done}
    absent = {k % count for k, item in enumerate(items) if not item_done(item)}
    if missing or absent:
        rerun = ", ".join(f"shard={i}/{count}" for i in sorted(missing | absent))
        raise ValueError(
            f"{output}: shards not finished or with items missing: rerun {rerun} (a rerun "
            "keeps every finished item), then merge again"
        )


def _summary(rows: list[dict[str, Any]], pairs: list[dict[str, Any]], fragments: list[dict[str, Any]],
             counts: Counter, skipped: Counter) -> dict[str, Any]:
    """Counts per group and split, items made and reused, and the mean re-render PSNR per group."""
    fidelity: dict[str, list[float]] = {}
    for f in fragments:
        for group, value in (f.get("psnr") or {}).items():
            fidelity.setdefault(group, []).append(value)
    return {
        "images": len(rows), "made": counts["made"], "reused": counts["reused"],
        "skipped": dict(sorted(skipped.items())), "by_group": dict(sorted(Counter(r["group"] for r in rows).items())),
        "by_split": {s: {"genuine": sum(r["split"] == s and r["label"] == 0 for r in rows),
                         "fake": sum(r["split"] == s and r["label"] == 1 for r in rows)} for s in SPLITS},
        "pairs": len(pairs),
        "psnr_db": {g: round(sum(v) / len(v), 2) for g, v in sorted(fidelity.items())
                    if all(x != float("inf") for x in v)},
    }


def make_generated_manifest(output: str | os.PathLike, spec: DatasetSpec | None = None,
                            photos: Sequence[str | os.PathLike] | None = None, root: str | os.PathLike | None = None,
                            workers: int = 1, progress: bool = True, merge: bool = False
                            ) -> tuple[Path, dict[str, Any]]:
    """`generate_dataset` under `output`, then its `manifest.csv`; returns (manifest, summary).
    `merge=True` joins the finished shards of `generate_dataset(shard=...)` instead of making items.

    Splits are drawn per authentic photo by the generator, so the manifest keeps them as they are.
    """
    output = Path(output)
    result = generate_dataset(output, spec or DatasetSpec(), photos=photos, root=root, workers=workers,
                              progress=progress, merge=merge)
    write_manifest(({**row, "path": str(output.resolve() / row["path"]),
                     "mask": str(output.resolve() / row["mask"]) if row.get("mask") else None}
                    for row in result["rows"]), output / "manifest.csv")
    return output / "manifest.csv", result["summary"]


PAIR_COLUMNS = ("pair", "panel_a", "panel_b", "mask_a", "mask_b", "scope", "operations", "categories", "source",
                "split")


def _write_pairs(path: Path, pairs: list[dict[str, Any]]) -> None:
    """Duplication pairs for the multi-label task: two panels, their masks and the operation set."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=PAIR_COLUMNS)
        writer.writeheader()
        writer.writerows(pairs)
    os.replace(tmp, path)


def format_summary(summary: Mapping[str, Any]) -> str:
    """A few readable lines: what was made, per group and split, and what was skipped."""
    lines = [f"{summary['images']} images from {summary['photos']} photos ({summary['panels']} genuine panels) "
             f"in {summary['output']}; {summary['made']} items made, {summary['reused']} reused from an "
             f"earlier run, {summary['seconds']} s",
             "by group: " + ", ".join(f"{g} {n}" for g, n in summary["by_group"].items()),
             "by split: " + ", ".join(f"{s} {v['genuine']} genuine + {v['fake']} fake"
                                      for s, v in summary["by_split"].items()),
             f"duplication pairs: {summary['pairs']}"]
    if summary["skipped"]:
        lines.append("skipped (operation did not apply to the panel): "
                     + ", ".join(f"{op} {n}" for op, n in summary["skipped"].items()))
    for variant, status in summary["generators"].items():
        lines.append(f"generator {variant}: {status}")
    if summary.get("psnr_db"):
        lines.append("mean PSNR of the fakes to their source panel, per group (dB): "
                     + ", ".join(f"{g} {v}" for g, v in summary["psnr_db"].items()))
    if summary.get("contact_sheet"):
        lines.append(f"examples of every operation: {summary['contact_sheet']}")
    return "\n".join(lines)
