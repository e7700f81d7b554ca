"""A whole generated dataset from a folder of authentic images (or the bundled photographs).

Three phases, each a list of items run in parallel over CPU workers:
1. panels: every photo gives genuine panels (the photo, shrunk to `max_side`, plus random crops at
   random scales) written under `real/`; splits are drawn per photo, so every image made from one
   authentic photo (genuine panels and all their fakes) lands in one split;
2. generators: the autoencoder generator is trained once per decoder variant on the genuine panels
   and cached (`<output>/generators/<variant>.pt`, or `generator.dir`), then reused;
3. forgeries: for each panel, each active operation is applied `ops[name]` times on average.

Each item draws from its own generator seeded by (seed, item id) and uses one thread, so results do
not depend on the number of workers or the order of completion. A finished item leaves a JSON
fragment under `<output>/.items/` (written after its files), so an interrupted run continues where it
stopped and never redoes finished work. `generate_dataset` hands back plain manifest rows; writing
the manifest is the caller's job (`datamodules.classification.make_generated_manifest`).
"""
from __future__ import annotations

import csv
import json
import logging
import math
import os
import random
import time
import zlib
from collections import Counter
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import cv2
import numpy as np
from tqdm import tqdm

from datamodules.io import read_image, write_image

log = logging.getLogger(__name__)

__all__ = ["OPERATIONS", "KINDS", "GeneratorOptions", "DatasetSpec", "generate_dataset", "format_summary"]

OPERATIONS = ("rerender", "region_edit", "splicing", "copy_move", "inpainting", "duplication_global",
              "duplication_local", "damage")
KINDS = {"aigi": ("rerender", "region_edit"),
         "forgery": ("region_edit", "splicing", "copy_move", "inpainting", "duplication_global",
                     "duplication_local", "damage"),
         "all": OPERATIONS}
# expected items per genuine panel; splicing and duplication items give two images each
DEFAULT_RATES = {"rerender": 1.0, "region_edit": 0.5, "splicing": 0.5, "copy_move": 0.5, "inpainting": 0.5,
                 "duplication_global": 0.25, "duplication_local": 0.5, "damage": 0.5}
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class GeneratorOptions:
    """How the autoencoder generators are trained (see `synthesis.generator.train_generator`)."""

    variants: Sequence[str] = ("transposed", "nearest_conv", "bilinear_conv", "pixel_shuffle")
    steps: int = 400
    width: int = 16
    depth: int = 2
    crop: int = 48
    batch_size: int = 8
    lr: float = 3e-3
    dir: str | None = None  # where weights are cached / reused; default <output>/generators

    def training(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("variants", "dir")}


@dataclass(frozen=True)
class DatasetSpec:
    """What to generate. `ops` maps operations to rates; `kind` says which of them are active."""

    kind: str = "all"
    ops: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RATES))
    seed: int = 0
    max_side: int = 512  # the whole-photo panel is shrunk to this longer side
    crops_per_photo: int = 4
    crop_size: int = 256
    crop_scales: Sequence[float] = (0.5, 1.0)  # crops are cut from the photo rescaled by U(lo, hi)
    min_panel_side: int = 64
    split_fractions: Sequence[float] = (0.7, 0.15, 0.15)
    splice_candidates: int = 12  # similarity ranking over this many random panels of the same split
    local_min_side: int = 350  # THEMIS: local duplication only for panels larger than this
    d15_fraction: float = 0.5
    generator: GeneratorOptions = field(default_factory=GeneratorOptions)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        unknown = set(self.ops) - set(OPERATIONS)
        if unknown:
            raise ValueError(f"unknown operations {sorted(unknown)}; expected among {OPERATIONS}")
        if len(self.split_fractions) != 3 or abs(sum(self.split_fractions) - 1) > 1e-6:
            raise ValueError(f"split_fractions must be three numbers summing to 1, got {self.split_fractions}")
        if isinstance(self.generator, Mapping):
            object.__setattr__(self, "generator", GeneratorOptions(**self.generator))

    @property
    def active(self) -> dict[str, float]:
        return {op: float(self.ops.get(op, 0.0)) for op in KINDS[self.kind] if self.ops.get(op, 0.0) > 0}

    def fingerprint(self) -> dict[str, Any]:
        """Everything that changes the output (not workers, not where generator weights live)."""
        data = asdict(self)
        data["generator"].pop("dir")
        return json.loads(json.dumps(data, default=list))


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


def _assign_splits(sources: Sequence[str], fractions: Sequence[float], seed: int) -> dict[str, str]:
    """Sources shuffled by `seed` and cut by `fractions`; val and test get at least one source each
    when there are three or more (a handful of photos must still give every split)."""
    keys = sorted(set(sources))
    random.Random(seed).shuffle(keys)
    n = len(keys)
    sizes = [round(f * n) for f in fractions]
    if n >= 3:
        sizes[1:] = [max(1, s) if f > 0 else 0 for s, f in zip(sizes[1:], fractions[1:])]
    sizes[0] = max(0, n - sizes[1] - sizes[2])
    b0, b1 = sizes[0], sizes[0] + sizes[1]
    return {k: SPLITS[0] if i < b0 else SPLITS[1] if i < b1 else SPLITS[2] for i, k in enumerate(keys)}


def _rng(seed: int, item: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(item.encode())])


# ------------------------------------------------------------------------------------ tasks
def _panels_task(task: dict[str, Any]) -> dict[str, Any]:
    """Genuine panels of one photo: the whole photo (shrunk to max_side) and random rescaled crops."""
    out, spec, photo = Path(task["output"]), task["spec"], task["photo"]
    rng = _rng(spec["seed"], task["id"])
    image = read_image(photo["photo"])
    h, w = image.shape[:2]
    scale = min(1.0, spec["max_side"] / max(h, w))
    full = image if scale == 1.0 else cv2.resize(image, (round(w * scale), round(h * scale)),
                                                 interpolation=cv2.INTER_AREA)
    crops = [("full", full)]
    for i in range(spec["crops_per_photo"]):
        s = float(rng.uniform(*spec["crop_scales"]))
        scaled = cv2.resize(image, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
        side = min(spec["crop_size"], *scaled.shape[:2])
        if side < spec["min_panel_side"]:
            continue
        y = int(rng.integers(0, scaled.shape[0] - side + 1))
        x = int(rng.integers(0, scaled.shape[1] - side + 1))
        crops.append((f"c{i}", scaled[y:y + side, x:x + side]))
    rows, panels = [], []
    for suffix, pixels in crops:
        if min(pixels.shape[:2]) < spec["min_panel_side"]:
            continue
        rel = f"real/{photo['key']}_{suffix}.png"
        write_image(out / rel, np.ascontiguousarray(pixels))
        row = {"path": rel, "label": 0, "mask": None, "group": "genuine", "category": photo["category"],
               "source": photo["source"], "split": task["split"], "review": None}
        rows.append(row)
        panels.append({**row, "height": int(pixels.shape[0]), "width": int(pixels.shape[1])})
    return {"rows": rows, "pairs": [], "panels": panels}


def _generator_task(task: dict[str, Any]) -> dict[str, Any]:
    from synthesis.generator import psnr, rerender_image, save_generator, train_generator

    out, options = Path(task["output"]), task["training"]
    images = [np.array(read_image(out / p)) for p in task["images"]]  # writable for torch
    started = time.perf_counter()
    model = train_generator(images, task["variant"], seed=task["seed"], **options)
    save_generator(model, task["weights"])
    # how close re-renders are to their input: close enough to pass as the photo, yet re-generated
    quality = [psnr(rerender_image(model, im), im) for im in images[:8]]
    sidecar = {"variant": task["variant"], "seed": task["seed"], "training": options, "images": task["images"],
               "psnr_db": round(float(np.mean(quality)), 2), "seconds": round(time.perf_counter() - started, 1)}
    Path(task["weights"]).with_suffix(".json").write_text(json.dumps(sidecar, indent=1))
    return {"rows": [], "pairs": [], "generator": sidecar}


def _item_task(task: dict[str, Any]) -> dict[str, Any]:
    from synthesis.operations import run_operation

    op, out = task["op"], Path(task["output"])
    rng = _rng(task["seed"], task["id"])
    if op == "splicing":  # both directions of the pair; either may be refused on its own
        result: dict[str, Any] = {"rows": [], "pairs": []}
        reasons = []
        for bg, donor in ((0, 1), (1, 0)):
            panels = [task["panels"][bg], task["panels"][donor]]
            name = f"{Path(panels[1]['path']).stem}_on_{Path(panels[0]['path']).stem}"
            try:
                result["rows"] += run_operation(op, name, out, panels, rng, task["options"])["rows"]
            except ValueError as error:
                reasons.append(str(error))
        if not result["rows"]:
            raise ValueError("; ".join(reasons))
        return result
    return run_operation(op, task["name"], out, task["panels"], rng, task["options"])


_TASKS = {"panels": _panels_task, "generator": _generator_task, "item": _item_task}


def _fragment_path(output: Path, task_id: str) -> Path:
    return output / ".items" / f"{task_id}.json"


def _run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run one task and leave its fragment (the done marker) after all its files are written."""
    try:
        result = _TASKS[task["type"]](task)
    except ValueError as error:  # the operation does not apply to this panel: recorded, not retried
        result = {"rows": [], "pairs": [], "skipped": str(error)}
    except Exception as error:
        raise RuntimeError(f"item {task['id']} failed: {type(error).__name__}: {error}") from error
    path = _fragment_path(Path(task["output"]), task["id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result, sort_keys=True))
    os.replace(tmp, path)
    return result


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)
    cv2.setNumThreads(1)


@contextmanager
def _one_thread() -> Iterator[None]:
    """Serial runs use one torch thread like the workers do, so bytes do not depend on `workers`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _execute(tasks: list[dict[str, Any]], pool: Executor | None, desc: str, progress: bool,
             counts: Counter) -> list[dict[str, Any]]:
    """Results in task order; finished tasks are read back from their fragments, the rest run."""
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    todo = []
    for i, task in enumerate(tasks):
        path = _fragment_path(Path(task["output"]), task["id"])
        done = json.loads(path.read_text()) if path.is_file() else None
        if done is not None and all((Path(task["output"]) / row[key]).is_file()
                                    for row in done["rows"] for key in ("path", "mask") if row.get(key)):
            results[i] = done
            counts["reused"] += 1
        else:  # not done, or its files were removed since
            todo.append(i)
    bar = tqdm(total=len(todo), desc=desc, unit="item", disable=not progress or not todo)
    if pool is None:
        for i in todo:
            results[i] = _run_task(tasks[i])
            bar.update()
    else:
        futures = {pool.submit(_run_task, tasks[i]): i for i in todo}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            bar.update()
    bar.close()
    counts["made"] += len(todo)
    return results  # type: ignore[return-value]


# ------------------------------------------------------------------------------------ planning
def _similarity_features(image: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """What `synthesis.splicing.pair_similarity` looks at, computed once per panel: the 224 x 224
    grey image, its 256-bin histogram and the original size (a few dozen KB instead of the panel)."""
    grey = cv2.resize(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY), (224, 224), interpolation=cv2.INTER_AREA)
    return grey.astype(np.float64) / 255.0, cv2.calcHist([grey], [0], None, [256], [0, 256]), image.shape[:2]


def _feature_similarity(a: tuple, b: tuple) -> float:
    """`pair_similarity` on precomputed features (same formula; a test checks they agree)."""
    (x, ha, (h1, w1)), (y, hb, (h2, w2)) = a, b
    hist = (cv2.compareHist(ha, hb, cv2.HISTCMP_CORREL) + 1.0) / 2.0
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    mx, my = x.mean(), y.mean()
    cov = ((x - mx) * (y - my)).mean()
    ssim = ((2 * mx * my + c1) * (2 * cov + c2)) / ((mx ** 2 + my ** 2 + c1) * (x.var() + y.var() + c2))
    size = (1 - abs(h1 - h2) / max(h1, h2)) * (1 - abs(w1 - w2) / max(w1, w2))
    return float(0.4 * hist + 0.4 * max(ssim, 0.0) + 0.2 * size)


def _similar_partner(panel: dict[str, Any], pool: list[dict[str, Any]], rng: np.random.Generator,
                     features: dict[str, tuple], used: set, limit: int) -> dict[str, Any] | None:
    """The most similar panel (THEMIS score) among `limit` random panels of other photos, pair unused."""
    others = [p for p in pool if p["source"] != panel["source"]]
    if not others:
        return None
    picks = rng.choice(len(others), size=min(limit, len(others)), replace=False)
    scored = sorted(((_feature_similarity(features[others[j]["path"]], features[panel["path"]]), others[j]["path"])
                     for j in picks), reverse=True)
    for _, path in scored:
        if frozenset((path, panel["path"])) not in used:
            used.add(frozenset((path, panel["path"])))
            return next(p for p in others if p["path"] == path)
    return None


def _plan_items(spec: DatasetSpec, output: Path, panels: list[dict[str, Any]],
                generators: dict[str, str]) -> list[dict[str, Any]]:
    active = spec.active
    variants = list(spec.generator.variants)
    features = ({p["path"]: _similarity_features(read_image(output / p["path"])) for p in panels}
                if "splicing" in active else {})
    by_split = {s: [p for p in panels if p["split"] == s] for s in SPLITS}
    used: set = set()
    items = []
    base = {"type": "item", "output": str(output), "seed": spec.seed}
    options = {"local_min_side": spec.local_min_side, "d15_fraction": spec.d15_fraction}
    for panel in panels:
        stem = Path(panel["path"]).stem
        rng = _rng(spec.seed, f"plan/{stem}")
        offset = int(rng.integers(len(variants))) if variants else 0
        for op in OPERATIONS:
            draw = rng.random()  # drawn whatever is active, so switching ops off keeps the others' plans
            rate = active.get(op, 0.0)
            if op == "duplication_local" and min(panel["height"], panel["width"]) < spec.local_min_side:
                rate = 0.0
            count = int(math.floor(rate)) + int(draw < rate - math.floor(rate))
            for j in range(count):
                item = {**base, "op": op, "id": f"{op}/{stem}_{j}", "name": f"{stem}_{j}", "panels": [panel],
                        "options": options}
                if op in ("rerender", "region_edit"):
                    variant = variants[(offset + j) % len(variants)]
                    item["options"] = {**options, "variant": variant, "generator_path": generators[variant]}
                    item["name"] = f"{stem}_{variant}_{j}"
                    item["id"] = f"{op}/{item['name']}"
                if op == "splicing":
                    partner = _similar_partner(panel, by_split[panel["split"]], _rng(spec.seed, item["id"]),
                                               features, used, spec.splice_candidates)
                    if partner is None:
                        continue
                    item["panels"] = [panel, partner]
                items.append(item)
    return items


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
    results = _execute(tasks, pool, "generators", progress, Counter())
    for task, result in zip(tasks, results):  # the marker of a training task is its weights file
        _fragment_path(output, task["id"]).unlink(missing_ok=True)
        if "skipped" in result:
            raise ValueError(f"generator {task['variant']}: {result['skipped']}")
        status[task["variant"]] += _psnr_note(result["generator"])
    counts["generators_trained"] += len(tasks)
    return paths, status


def _psnr_note(meta: Mapping[str, Any]) -> str:
    if "psnr_db" not in meta:
        return ""
    return f" (re-render PSNR {meta['psnr_db']} dB on its training panels, {meta.get('seconds', '?')} s to train)"


def generate_dataset(output: str | os.PathLike, spec: DatasetSpec = DatasetSpec(),
                     photos: Sequence[str | os.PathLike] | None = None, root: str | os.PathLike | None = None,
                     workers: int = 1, progress: bool = True) -> dict[str, Any]:
    """Generate the dataset under `output`; returns {"rows", "pairs", "summary"}.

    `photos` defaults to the bundled photographs; `root` (their common folder) names the photos'
    keys and categories (first sub-folder). `workers` > 1 runs items in that many processes.
    Raises ValueError if `output` holds a dataset generated with a different spec.
    """
    output = Path(output).resolve()
    started = time.perf_counter()
    table = _photo_table(photos, root)
    if not table:
        raise ValueError("no photos to generate from")
    stamp = output / ".items" / "spec.json"
    fingerprint = {**spec.fingerprint(), "photos": [p["key"] for p in table]}
    if stamp.is_file() and json.loads(stamp.read_text()) != fingerprint:
        raise ValueError(f"{output} holds a dataset generated with other options or photos ({stamp}); "
                         "choose a new output folder or delete the old one")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(fingerprint, indent=1, sort_keys=True))
    splits = _assign_splits([p["source"] for p in table], spec.split_fractions, spec.seed)
    spec_dict = {k: v for k, v in asdict(spec).items() if k != "generator"}
    counts: Counter = Counter()
    pool = (ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init_worker)
            if workers > 1 else None)
    try:
        with _one_thread():
            panel_tasks = [{"type": "panels", "id": f"panels/{p['key']}", "output": str(output), "spec": spec_dict,
                            "photo": p, "split": splits[p["source"]]} for p in table]
            fragments = _execute(panel_tasks, pool, "panels", progress, counts)
            panels = [p for f in fragments for p in f["panels"]]
            needs_generator = any(op in spec.active for op in ("rerender", "region_edit"))
            generators, generator_status = (_generators(spec, output, panels, pool, progress, counts)
                                            if needs_generator else ({}, {}))
            items = _plan_items(spec, output, panels, generators)
            fragments += _execute(items, pool, "forgeries", progress, counts)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    rows = [row for f in fragments for row in f["rows"]]
    pairs = [pair for f in fragments for pair in f["pairs"]]
    skipped = Counter(item["op"] for item, f in zip(items, fragments[len(panel_tasks):]) if f.get("skipped"))
    _write_pairs(output / "duplication_pairs.csv", pairs)
    from synthesis.contact_sheet import contact_sheet

    sheet = contact_sheet(output, rows)
    summary = {
        "output": str(output), "photos": len(table), "panels": len(panels), "images": len(rows),
        "items": len(panel_tasks) + len(items), "made": counts["made"], "reused": counts["reused"],
        "skipped": dict(sorted(skipped.items())), "by_group": dict(sorted(Counter(r["group"] for r in rows).items())),
        "by_split": {s: {"genuine": sum(r["split"] == s and r["label"] == 0 for r in rows),
                         "fake": sum(r["split"] == s and r["label"] == 1 for r in rows)} for s in SPLITS},
        "pairs": len(pairs), "generators": generator_status, "contact_sheet": str(sheet) if sheet else None, "seconds": round(time.perf_counter() - started, 1),
    }
    return {"rows": rows, "pairs": pairs, "summary": summary}


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
    if summary.get("contact_sheet"):
        lines.append(f"examples of every operation: {summary['contact_sheet']}")
    return "\n".join(lines)
