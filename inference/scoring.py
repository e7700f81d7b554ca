"""Scoring many images with a loaded detector: one prediction loop (`predictions`: decode a batch,
predict, collect) serves the scoring run, which streams rows to CSV or JSONL as batches finish,
and the robustness sweeps, which score the same files again with a perturbation after decoding."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from datamodules.records import Record
from inference.batches import Thumbnailer, iter_batches, single_image_batches
from inference.masks import MapCollector, MapWriter
from inference.runtime import Runtime, runtime_transform
from inference.writer import ResultWriter

log = logging.getLogger(__name__)
Perturb = Callable[[np.ndarray], np.ndarray]


@dataclass
class Prediction:
    """One decoded batch (see `inference.batches.collate_samples`) and what the runtime made of it."""

    batch: dict[str, Any]
    outputs: dict[str, Any] | None  # None: no readable image in the batch, or the model failed
    failure: str = ""  # why the model failed on this batch ("" when it did not)


def predictions(
    runtime: Runtime,
    items: Sequence[tuple[int, str]],
    batch_size: int = 32,
    num_workers: int = 2,
    perturb: Perturb | None = None,
    keep_going: bool = True,
    thumbnailer: Thumbnailer | None = None,
) -> Iterator[Prediction]:
    """The prediction loop: `(input position, path)` items decoded by `num_workers` threads (0:
    inline), `perturb` applied to the decoded pixels, brought to the network by the runtime's own
    geometry, in batches, in order. A model failure is logged and reported in `failure`
    (`keep_going`) or raised; a batch of several images it failed on is scored again one image at a
    time, so only the images it fails on alone fail. `thumbnailer`: batches also carry each image's
    thumbnail."""
    geometry = runtime_transform(runtime)
    prepare = geometry if perturb is None else (lambda image: geometry(perturb(image)))
    size = effective_batch_size(runtime, batch_size)
    for batch in iter_batches(items, prepare, size, workers=num_workers, thumbnailer=thumbnailer):
        if "image" not in batch:
            yield Prediction(batch, None)
            continue
        try:
            outputs = predict_batch(runtime, batch["image"])
        except Exception as error:  # a model failure on one batch is reported per image, not fatal
            if not keep_going:
                raise
            if len(batch["path"]) == 1:
                yield failed(batch, error)
                continue
            # one image (too small for the model, say) must not take the others with it
            log.warning("model failed on a batch of %d images (%s): scoring them one by one", len(batch["path"]), error)
            for single in single_image_batches(batch):
                try:
                    yield Prediction(single, predict_batch(runtime, single["image"]))
                except Exception as single_error:
                    yield failed(single, single_error)
            continue
        yield Prediction(batch, outputs)


def failed(batch: dict[str, Any], error: Exception) -> Prediction:
    """A single-image batch the model failed on, logged, its reason in `failure`."""
    log.error("model failed on %s: %s", batch["path"][0], error)
    return Prediction(batch, None, f"model error: {error}")


def error_row(path: str, reason: str) -> dict[str, Any]:
    return {"path": path, "score": "", "label": "", "status": "error", "error": reason}


def batch_rows(
    prediction: Prediction,
    threshold: float,
    masks_dir: Path | None = None,
    overlays_dir: Path | None = None,
    maps: MapWriter | None = None,
    collect_map: MapCollector | None = None,
    evidence: Any = None,
) -> list[dict[str, Any]]:
    """Result rows for one predicted batch: unreadable files and model failures become `status=error`
    rows, never exceptions. Rows come in input order, so a run's file does not depend on how the
    input was split into batches or processes. Maps and overlays are queued on `maps` (needed when
    `masks_dir` or `overlays_dir` is given); each saved map also goes to `collect_map`, and the report
    page's pictures to `evidence` (an `EvidenceDrawer`, on `maps` too)."""
    batch = prediction.batch
    rows = list(zip(batch["error_index"], (error_row(path, reason) for path, reason in batch["errors"])))
    if "image" in batch:
        rows += list(
            zip(
                batch["index"], scored_rows(prediction, threshold, masks_dir, overlays_dir, maps, collect_map, evidence)
            )
        )
    return [row for _, row in sorted(rows, key=lambda item: item[0])]


def scored_rows(
    prediction: Prediction,
    threshold: float,
    masks_dir: Path | None,
    overlays_dir: Path | None,
    maps: MapWriter | None,
    collect_map: MapCollector | None,
    evidence: Any = None,
) -> list[dict[str, Any]]:
    batch, outputs = prediction.batch, prediction.outputs
    if outputs is None:
        return [error_row(p, prediction.failure) for p in batch["path"]]
    rows, pictures = [], []
    for i, (path, score) in enumerate(zip(batch["path"], outputs["score"])):
        broken = non_finite_output(outputs, i)
        if broken:
            log.error("%s: %s", path, broken)
            rows.append(error_row(path, broken))
            continue
        cut = threshold(path) if callable(threshold) else threshold  # per-category thresholds
        row = {"path": path, "score": float(score), "label": int(score >= cut), "status": "ok", "error": ""}
        index, size = int(batch["index"][i]), tuple(int(v) for v in batch["size"][i])
        if masks_dir is not None and "mask" in outputs:
            row["mask"] = str(maps.mask(masks_dir, index, path, outputs["mask"][i][0], size, collect_map))
        if masks_dir is not None and "confidence" in outputs:  # asked for: `save_confidence=true`
            row["confidence"] = str(maps.mask(masks_dir / "confidence", index, path, outputs["confidence"][i][0], size))
        if overlays_dir is not None and "mask" in outputs:
            image = batch["image"][i][0] if isinstance(batch["image"], list) else batch["image"][i]
            maps.overlay(overlays_dir, index, path, np.asarray(image), outputs["mask"][i][0])
        if evidence is not None and batch.get("thumb") is not None:
            probabilities = outputs["mask"][i][0] if "mask" in outputs else None
            pictures.append((index, path, batch["thumb"][i], probabilities, size))
        rows.append(row)
    if pictures:
        maps.evidence(evidence, pictures)
    return rows


def non_finite_output(outputs: dict[str, Any], i: int) -> str:
    """Why image `i`'s outputs cannot be trusted (a NaN or infinite score or map value: broken
    weights, an overflow in reduced precision), or "" when they are fine. Such an image gets an
    error row, never a score that compares false with every threshold."""
    for name in ("score", "mask", "confidence"):
        if name in outputs and not np.isfinite(np.asarray(outputs[name][i], dtype=np.float32)).all():
            value = np.asarray(outputs[name][i], dtype=np.float32)
            bad = value if value.ndim == 0 else value[~np.isfinite(value)].flat[0]
            return (
                f"model error: non-finite {name} ({float(bad)}); the model's weights may be broken "
                "(NaN or infinite values) or its precision too low for this image"
            )
    return ""


def predict_batch(runtime: Runtime, images: Any) -> dict[str, Any]:
    """`runtime.predict` on a stacked batch, or image by image on a list of different-size images
    (outputs then hold one entry per image: scores as an array, maps as a list)."""
    if not isinstance(images, list):
        return runtime.predict(images)
    parts = [runtime.predict(image) for image in images]
    merged: dict[str, Any] = {name: [part[name][0] for part in parts] for name in parts[0]}
    merged["score"] = np.asarray(merged["score"], dtype=np.float32)
    return merged


def effective_batch_size(runtime: Runtime, batch_size: int) -> int:
    """Whole-image localizers batch images that share a size; other detectors without a fixed input
    size score one image at a time."""
    if not runtime.preprocess.fixed_size and batch_size != 1 and not runtime.is_localizer:
        log.info(
            "this model takes each image at its own size (tiles, preprocessing in the graph, or preprocess "
            "mode none): scoring one image at a time"
        )
        return 1
    return batch_size


def score_items(
    runtime: Runtime,
    items: Sequence[tuple[int, str]],
    writer: ResultWriter,
    batch_size: int = 32,
    num_workers: int = 2,
    threshold: float | None = None,
    masks_dir: str | os.PathLike | None = None,
    progress: bool = True,
    overlays_dir: str | os.PathLike | None = None,
    collect_map: MapCollector | None = None,
    evidence: Any = None,
) -> dict[str, int]:
    """Score `(input position, path)` items in order into `writer`; unreadable files become
    `status=error` rows. `num_workers` threads decode ahead of the model (0: decode inline).
    `collect_map(position, 8-bit map)` receives every saved map (pixel metrics while streaming).
    `evidence` (an `inference.report_pictures.EvidenceDrawer`): the report page's thumbnails and
    overlays are drawn as the rows are scored, by the same background writer as the maps.
    Kept in one piece: a batch's rows wait for its maps while the next batch is scored, across the
    loop and the handling of an interruption."""
    if not callable(threshold):  # a callable gives each path its threshold (`CategoryThreshold`)
        threshold = runtime.threshold if threshold is None else float(threshold)
    counts = {"ok": 0, "error": 0}
    masks_dir = Path(masks_dir) if masks_dir is not None else None
    overlays_dir = Path(overlays_dir) if overlays_dir is not None else None
    batch_size = effective_batch_size(runtime, batch_size)  # warns once; predictions keep it
    taken = {Path(row["mask"]).name: path for path, row in writer.done.items() if row.get("mask")}
    maps = MapWriter(taken) if masks_dir is not None or overlays_dir is not None or evidence is not None else None
    thumbnailer = evidence.thumbnailer(runtime.is_localizer) if evidence is not None else None

    def write(rows: list[dict[str, Any]], saving: list[Any]) -> None:
        for future in saving:  # the maps these rows name are on disk before the rows are
            future.result()
        for row in rows:
            counts[row["status"]] += 1
        writer.write(rows)

    waiting: tuple[list[dict[str, Any]], list[Any]] | None = None  # a batch whose maps are being written
    bar = tqdm(desc="scoring", unit="image", total=len(items), disable=not progress)
    try:
        for prediction in predictions(runtime, items, batch_size, num_workers, thumbnailer=thumbnailer):
            rows = batch_rows(prediction, threshold, masks_dir, overlays_dir, maps, collect_map, evidence)
            bar.update(len(rows))
            if waiting is not None:  # its maps were written while this batch's forward pass ran
                done, waiting = waiting, None
                write(*done)
            saving = maps.take() if maps is not None else []
            if saving:
                waiting = (rows, saving)
            else:
                write(rows, [])
        if waiting is not None:
            done, waiting = waiting, None
            write(*done)
    except KeyboardInterrupt:
        if waiting is not None:  # keep the finished batch: its rows and maps are whole
            write(*waiting)
        raise
    finally:
        bar.close()
        if maps is not None:
            maps.close()
    return counts


def score_records(runtime: Runtime, records: Sequence[Record], writer: ResultWriter, **options: Any) -> dict[str, int]:
    """Score every record not already in `writer` (see `score_items` for the options)."""
    todo = [(i, r.path) for i, r in enumerate(records) if r.path not in writer.done]
    return {**score_items(runtime, todo, writer, **options), "skipped": len(records) - len(todo)}


def join_truth(records: Iterable[Record], results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scored rows of labelled inputs, joined with what the input knew about each image (label,
    group, category, mask...): the table `evaluation.report_records` scores."""
    known = {r.path: r for r in records if r.label is not None}
    return [
        {**known[row["path"]].to_row(), "label": known[row["path"]].label, "score": row["score"]}
        for row in results
        if row.get("status") == "ok" and row["path"] in known and row.get("score") is not None
    ]


def perturbed_scores(
    runtime: Runtime,
    records: Sequence[Record],
    perturb: Perturb | None,
    batch_size: int = 32,
    num_workers: int = 0,
    collect: Callable[[Prediction], None] | None = None,
) -> np.ndarray:
    """Scores of `records` with `perturb` applied to the decoded pixels (None: unchanged), through
    the scoring run's own loop; unreadable files score NaN. `collect` sees every predicted batch."""
    scores = np.full(len(records), np.nan)
    items = [(i, r.path) for i, r in enumerate(records)]
    for prediction in predictions(runtime, items, batch_size, num_workers, perturb, keep_going=False):
        if prediction.outputs is not None:
            scores[prediction.batch["index"]] = np.asarray(prediction.outputs["score"], dtype=np.float64)
            if collect is not None:
                collect(prediction)
    return scores


def score_perturbed_fn(
    runtime: Runtime, records: Sequence[Record], batch_size: int = 32, num_workers: int = 0
) -> Callable[[Perturb | None], np.ndarray]:
    """`perturbation -> scores of records` for `evaluation.robustness_curves` (see `perturbed_scores`)."""
    batch_size = effective_batch_size(runtime, batch_size)  # warns once, not at every level
    return lambda perturb: perturbed_scores(runtime, records, perturb, batch_size, num_workers)
