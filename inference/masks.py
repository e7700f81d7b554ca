"""Localization maps from `infer.py`: 8-bit PNGs at the original size, overlays, pixel metrics.

Maps are written under `masks_dir` with names made from the row's position and a sanitized stem,
so no input path (`..`, absolute, odd characters) can place a file outside it. Pixel metrics are
computed afterwards from the written maps, so a resumed run scores every image, old and new, the
same way (8-bit maps: a probability p counts as positive at 0.5 exactly when round(255 p) >= 128).
"""
from __future__ import annotations

import logging
import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from datamodules.io import ImageReadError, read_image, read_mask, write_image
from datamodules.records import Record

log = logging.getLogger(__name__)

CONTACT_CASES = 4  # worst and best images shown in the report's contact sheet


def safe_mask_name(index: int, path: str) -> str:
    """A file name that cannot leave the masks folder, whatever the input path contains."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(path)).stem)[:80].lstrip(".") or "image"
    return f"{index:07d}_{stem}.png"


def to_uint8_map(probabilities: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A probability map as 0-255 at `size` (H, W); resized only if the model saw another size."""
    pixels = np.clip(np.rint(np.asarray(probabilities, dtype=np.float32) * 255), 0, 255).astype(np.uint8)
    if pixels.shape != tuple(size):
        import cv2  # only when a model's map is not at the input size

        pixels = cv2.resize(pixels, (size[1], size[0]), interpolation=cv2.INTER_LINEAR)
    return pixels


def save_mask(masks_dir: Path, index: int, path: str, probabilities: np.ndarray, size: tuple[int, int]) -> Path:
    """Write a probability map as an 8-bit PNG at the input image's original size."""
    target = masks_dir / safe_mask_name(index, path)
    write_image(target, to_uint8_map(probabilities, size))
    return target


def heat_overlay(image: np.ndarray, probabilities: np.ndarray, strength: float = 0.6) -> np.ndarray:
    """Red heat over the image in proportion to the probability, for people to look at."""
    alpha = (np.asarray(probabilities, dtype=np.float32) * strength)[..., None]
    red = np.zeros_like(image, dtype=np.float32)
    red[..., 0] = 255
    return np.clip(image.astype(np.float32) * (1 - alpha) + red * alpha, 0, 255).round().astype(np.uint8)


def save_overlay(overlays_dir: Path, index: int, path: str, image: np.ndarray, probabilities: np.ndarray) -> Path:
    """`image` (H x W x 3 uint8 or 3 x H x W float in [0, 1], as the network saw it) with its map,
    as a JPEG named like the mask."""
    picture = np.asarray(image)
    if picture.ndim == 3 and picture.shape[0] == 3 and picture.dtype != np.uint8:
        picture = (np.clip(picture.transpose(1, 2, 0), 0, 1) * 255).round().astype(np.uint8)
    prob = to_uint8_map(probabilities, picture.shape[:2]).astype(np.float32) / 255
    target = overlays_dir / safe_mask_name(index, path).replace(".png", ".jpg")
    write_image(target, heat_overlay(picture, prob), quality=90)
    return target


class MapWriter:
    """Writes a run's maps and overlays on a background thread, so encoding the PNGs of one batch
    overlaps the next batch's forward pass instead of stalling it. A map's path is known at once
    (its row can name it); `take()` hands over the writes queued since the last call, and the rows
    of a batch are written only once those are done, so a row never names a map not yet on disk."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="maps")
        self.queued: list[Future] = []

    def _submit(self, write: Callable[..., Any], *args: Any) -> None:
        self.queued.append(self.pool.submit(write, *args))

    def mask(self, masks_dir: Path, index: int, path: str, probabilities: np.ndarray, size: tuple[int, int]) -> Path:
        """Queue `save_mask`; returns the path it writes."""
        self._submit(save_mask, masks_dir, index, path, probabilities, size)
        return masks_dir / safe_mask_name(index, path)

    def overlay(self, overlays_dir: Path, index: int, path: str, image: np.ndarray, probabilities: np.ndarray) -> None:
        self._submit(save_overlay, overlays_dir, index, path, image, probabilities)

    def take(self) -> list[Future]:
        queued, self.queued = self.queued, []
        return queued

    def close(self) -> None:
        """Finish every queued write (their errors were already raised where waited on)."""
        self.pool.shutdown(wait=True)


def read_map(path: str) -> np.ndarray:
    """A saved 8-bit map back as probabilities in [0, 1]."""
    return read_image(path)[..., 0].astype(np.float32) / 255


def records_with_masks(records: Iterable[Record]) -> bool:
    return any(r.mask for r in records)


def pixel_report(records: Sequence[Record], results: Iterable[dict[str, Any]], threshold: float = 0.5,
                 cases: int = CONTACT_CASES) -> tuple[dict[str, float], list[tuple]] | None:
    """Pixel metrics over the scored rows that have a saved map and a known label, and the
    contact-sheet items (image, true mask, map, title) of the `cases` worst and best images.

    Genuine images (label 0) count toward `pixel_fpr_genuine`; manipulated ones need a mask in the
    input. Returns None when no manipulated image with a mask was scored.
    """
    from evaluation import PixelMetricAccumulator

    known = {r.path: r for r in records if r.label is not None}
    accumulator = PixelMetricAccumulator(threshold)
    scored: list[tuple[float, str, str, str]] = []
    for row in results:
        record = known.get(row.get("path"))
        if record is None or row.get("status") != "ok" or not row.get("mask"):
            continue
        try:
            prob = read_map(row["mask"])
            truth = read_mask(record.mask) > 0 if record.mask else None
        except ImageReadError as error:
            log.warning("pixel metrics skip %s: %s", row["path"], error.reason)
            continue
        if record.label == 1 and truth is None:
            continue  # a manipulated image whose mask is unknown says nothing about pixels
        if record.label == 0:
            truth = None
        accumulator.add(truth, prob)
        if truth is not None:
            scored.append((accumulator.f1[-1], row["path"], row["mask"], record.mask))
    if not accumulator.counts:
        return None
    scored.sort(key=lambda item: (item[0], item[1]))
    chosen = scored if len(scored) <= 2 * cases else scored[:cases] + scored[-cases:]
    sheet = []
    for f1, path, map_path, mask_path in chosen:
        try:
            sheet.append((read_image(path), read_mask(mask_path) > 0, read_map(map_path),
                          f"{Path(path).name}  pixel F1 {f1:.2f}"))
        except ImageReadError as error:
            log.warning("contact sheet skips %s: %s", path, error.reason)
    return accumulator.compute(), sheet
