"""Scoring many images with a loaded detector, streaming rows to CSV or JSONL as batches finish."""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import cv2
import numpy as np
from torch.utils.data import DataLoader
from tqdm import tqdm

from datamodules.datasets import ImageDataset, collate
from datamodules.io import write_image
from datamodules.records import Record
from inference.runtime import runtime_transform
from inference.writer import ResultWriter

log = logging.getLogger(__name__)


def safe_mask_name(index: int, path: str) -> str:
    """A file name that cannot leave the masks folder, whatever the input path contains."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(path).stem)[:80].lstrip(".") or "image"
    return f"{index:07d}_{stem}.png"


def score_records(runtime: Any, records: Sequence[Record], writer: ResultWriter, batch_size: int = 32,
                  num_workers: int = 2, threshold: float | None = None, masks_dir: str | os.PathLike | None = None,
                  progress: bool = True) -> dict[str, int]:
    """Score every record not already in `writer`; unreadable files become `status=error` rows."""
    threshold = runtime.threshold if threshold is None else float(threshold)
    todo = [r for r in records if r.path not in writer.done]
    if not runtime.preprocess.fixed_size and batch_size != 1:
        log.warning("preprocess mode 'none' keeps each image's own size: scoring one image at a time")
        batch_size = 1
    dataset = ImageDataset(todo, runtime_transform(runtime), keep_size=True)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate,
                        shuffle=False, persistent_workers=False)
    counts = {"ok": 0, "error": 0, "skipped": len(records) - len(todo)}
    masks_dir = Path(masks_dir) if masks_dir is not None else None
    for batch in tqdm(loader, desc="scoring", unit="batch", disable=not progress):
        rows = [{"path": path, "score": "", "label": "", "status": "error", "error": reason}
                for path, reason in batch["errors"]]
        if "image" in batch:
            try:
                outputs = runtime.predict(batch["image"])
            except Exception as error:  # a model failure on one batch is reported per image, not fatal
                log.error("model failed on a batch: %s", error)
                rows += [{"path": p, "score": "", "label": "", "status": "error", "error": f"model error: {error}"}
                         for p in batch["path"]]
            else:
                for i, (path, score) in enumerate(zip(batch["path"], outputs["score"])):
                    row = {"path": path, "score": float(score), "label": int(score >= threshold),
                           "status": "ok", "error": ""}
                    if masks_dir is not None and "mask" in outputs:
                        row["mask"] = str(save_mask(masks_dir, int(batch["index"][i]), path, outputs["mask"][i][0],
                                                    tuple(int(v) for v in batch["size"][i])))
                    rows.append(row)
        for row in rows:
            counts[row["status"]] += 1
        writer.write(rows)
    return counts


def save_mask(masks_dir: Path, index: int, path: str, probabilities: np.ndarray, size: tuple[int, int]) -> Path:
    """Write a probability map as an 8-bit PNG at the input image's original size."""
    target = masks_dir / safe_mask_name(index, path)
    pixels = np.clip(np.rint(probabilities * 255), 0, 255).astype(np.uint8)
    if pixels.shape != size:
        pixels = cv2.resize(pixels, (size[1], size[0]), interpolation=cv2.INTER_LINEAR)
    write_image(target, pixels)
    return target


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
    and preprocessed by the same dataset and transform as a scoring run, the perturbation applied
    right after decoding. Unreadable files score NaN."""
    transform = runtime_transform(runtime)
    step = batch_size if runtime.preprocess.fixed_size else 1

    def score(perturb: Callable[[np.ndarray], np.ndarray] | None) -> np.ndarray:
        dataset = ImageDataset(records, transform, perturb=perturb)
        scores = np.full(len(records), np.nan)
        for batch in DataLoader(dataset, batch_size=step, num_workers=num_workers, collate_fn=collate):
            if "image" in batch:
                scores[batch["index"].numpy()] = np.asarray(runtime.predict(batch["image"])["score"], dtype=np.float64)
        return scores

    return score
