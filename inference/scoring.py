"""Scoring many images with a loaded detector, streaming rows to CSV or JSONL as batches finish."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from tqdm import tqdm

from datamodules.records import Record
from inference.batches import iter_batches
from inference.masks import save_mask, save_overlay
from inference.runtime import runtime_transform
from inference.writer import ResultWriter

log = logging.getLogger(__name__)


def error_row(path: str, reason: str) -> dict[str, Any]:
    return {"path": path, "score": "", "label": "", "status": "error", "error": reason}


def batch_rows(runtime: Any, batch: dict[str, Any], threshold: float,
               masks_dir: Path | None = None, overlays_dir: Path | None = None) -> list[dict[str, Any]]:
    """Result rows for one decoded batch (see `inference.batches.collate_samples`): unreadable files
    and model failures become `status=error` rows, never exceptions."""
    rows = [error_row(path, reason) for path, reason in batch["errors"]]
    if "image" not in batch:
        return rows
    try:
        outputs = runtime.predict(batch["image"])
    except Exception as error:  # a model failure on one batch is reported per image, not fatal
        log.error("model failed on a batch: %s", error)
        return rows + [error_row(p, f"model error: {error}") for p in batch["path"]]
    for i, (path, score) in enumerate(zip(batch["path"], outputs["score"])):
        row = {"path": path, "score": float(score), "label": int(score >= threshold), "status": "ok", "error": ""}
        if masks_dir is not None and "mask" in outputs:
            row["mask"] = str(save_mask(masks_dir, int(batch["index"][i]), path, outputs["mask"][i][0],
                                        tuple(int(v) for v in batch["size"][i])))
        if overlays_dir is not None and "mask" in outputs:
            save_overlay(overlays_dir, int(batch["index"][i]), path, np.asarray(batch["image"][i]),
                         outputs["mask"][i][0])
        rows.append(row)
    return rows


def effective_batch_size(runtime: Any, batch_size: int) -> int:
    if not runtime.preprocess.fixed_size and batch_size != 1:
        log.warning("preprocess mode 'none' keeps each image's own size: scoring one image at a time")
        return 1
    return batch_size


def score_records(runtime: Any, records: Sequence[Record], writer: ResultWriter, batch_size: int = 32,
                  num_workers: int = 2, threshold: float | None = None, masks_dir: str | os.PathLike | None = None,
                  progress: bool = True, overlays_dir: str | os.PathLike | None = None) -> dict[str, int]:
    """Score every record not already in `writer`, in input order; unreadable files become
    `status=error` rows. `num_workers` threads decode ahead of the model (0: decode inline)."""
    threshold = runtime.threshold if threshold is None else float(threshold)
    todo = [(i, r.path) for i, r in enumerate(records) if r.path not in writer.done]
    batch_size = effective_batch_size(runtime, batch_size)
    counts = {"ok": 0, "error": 0, "skipped": len(records) - len(todo)}
    masks_dir = Path(masks_dir) if masks_dir is not None else None
    overlays_dir = Path(overlays_dir) if overlays_dir is not None else None
    batches = iter_batches(todo, runtime_transform(runtime), batch_size, workers=num_workers)
    total = -(-len(todo) // batch_size)
    for batch in tqdm(batches, desc="scoring", unit="batch", total=total, disable=not progress):
        rows = batch_rows(runtime, batch, threshold, masks_dir, overlays_dir)
        for row in rows:
            counts[row["status"]] += 1
        writer.write(rows)
    return counts


def join_truth(records: Iterable[Record], results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scored rows of labelled inputs, joined with what the input knew about each image (label,
    group, category, mask...): the table `evaluation.report_records` scores."""
    known = {r.path: r for r in records if r.label is not None}
    return [{**known[row["path"]].to_row(), "label": known[row["path"]].label, "score": row["score"]}
            for row in results
            if row.get("status") == "ok" and row["path"] in known and row.get("score") is not None]


def score_perturbed_fn(runtime: Any, records: Sequence[Record], batch_size: int = 32, num_workers: int = 0
                       ) -> Callable[[Callable[[np.ndarray], np.ndarray] | None], np.ndarray]:
    """`perturbation -> scores of records` for `evaluation.robustness_curves`: the files are decoded
    and brought to the network by the same batches and geometry as `score_records`, the perturbation
    applied to the decoded pixels before the geometry. Unreadable files score NaN."""
    geometry = runtime_transform(runtime)
    step = effective_batch_size(runtime, batch_size)
    items = [(i, r.path) for i, r in enumerate(records)]

    def score(perturb: Callable[[np.ndarray], np.ndarray] | None) -> np.ndarray:
        prepare = geometry if perturb is None else (lambda image: geometry(perturb(image)))
        scores = np.full(len(records), np.nan)
        for batch in iter_batches(items, prepare, step, workers=num_workers):
            if "image" in batch:
                scores[batch["index"]] = np.asarray(runtime.predict(batch["image"])["score"], dtype=np.float64)
        return scores

    return score
