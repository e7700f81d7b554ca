"""Localization maps from `infer.py`: 8-bit PNGs at the original size, overlays, pixel metrics.

Maps are written under `masks_dir` with names made from the row's position and a sanitized stem,
so no input path (`..`, absolute, odd characters) can place a file outside it. Pixel metrics are
reduced from each 8-bit map as it is written (`PixelReduction`), never from the files read back; a
resumed run reads only the maps of the rows it did not score itself, so every image, old and new,
is scored the same way (a probability p counts as positive at 0.5 exactly when round(255 p) >= 128).
"""

from __future__ import annotations

import hashlib
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


def safe_mask_name(index: int | str, path: str) -> str:
    """A file name that cannot leave the masks folder, whatever the input path contains: `index`
    (an input's position, or another name of its own) then the path's stem."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(path)).stem)[:80].lstrip(".") or "image"
    return f"{index:07d}_{stem}.png" if isinstance(index, int) else f"{index}_{stem}.png"


def write_pair_masks(masks_dir: Path, key: str, paths: Sequence[str], masks: Sequence[np.ndarray]) -> dict[str, str]:
    """The masks of a pair's panels A and B as `<digest of key>_<stem>_<a|b>.png`: named by the pair
    (not by its position, which moves when inputs are added before a resume), so no two pairs or
    sides share a file; returns the rows' `mask_a` and `mask_b`."""
    named = hashlib.sha1(key.encode()).hexdigest()[:12]
    written = {}
    for side, path, mask in zip("ab", paths, masks):
        target = masks_dir / safe_mask_name(named, f"{Path(path).stem}_{side}.png")
        write_image(target, mask.astype(np.uint8) * 255)
        written[f"mask_{side}"] = str(target)
    return written


def to_uint8_map(probabilities: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A probability map as 0-255 at `size` (H, W); resized only if the model saw another size."""
    pixels = np.clip(np.rint(np.asarray(probabilities, dtype=np.float32) * 255), 0, 255).astype(np.uint8)
    if pixels.shape != tuple(size):
        import cv2  # only when a model's map is not at the input size

        pixels = cv2.resize(pixels, (size[1], size[0]), interpolation=cv2.INTER_LINEAR)
    return pixels


MapCollector = Callable[[int, np.ndarray], None]  # (input position, 8-bit map as written)


def save_mask(
    masks_dir: Path,
    index: int,
    path: str,
    probabilities: np.ndarray,
    size: tuple[int, int],
    collect: MapCollector | None = None,
    name: str | None = None,
) -> Path:
    """Write a probability map as an 8-bit PNG at the input image's original size (named `name`, by
    default `safe_mask_name`), and hand the written pixels to `collect` (pixel metrics reduced while
    streaming)."""
    target = masks_dir / (name or safe_mask_name(index, path))
    pixels = to_uint8_map(probabilities, size)
    write_image(target, pixels)
    if collect is not None:
        collect(index, pixels)
    return target


def heat_overlay(image: np.ndarray, probabilities: np.ndarray, strength: float = 0.6) -> np.ndarray:
    """Red heat over the image in proportion to the probability, for people to look at."""
    alpha = (np.asarray(probabilities, dtype=np.float32) * strength)[..., None]
    red = np.zeros_like(image, dtype=np.float32)
    red[..., 0] = 255
    return np.clip(image.astype(np.float32) * (1 - alpha) + red * alpha, 0, 255).round().astype(np.uint8)


def save_overlay(
    overlays_dir: Path, index: int, path: str, image: np.ndarray, probabilities: np.ndarray, name: str | None = None
) -> Path:
    """`image` (H x W x 3 uint8 or 3 x H x W float in [0, 1], as the network saw it) with its map,
    as a JPEG named like the mask."""
    picture = np.asarray(image)
    if picture.ndim == 3 and picture.shape[0] == 3 and picture.dtype != np.uint8:
        picture = (np.clip(picture.transpose(1, 2, 0), 0, 1) * 255).round().astype(np.uint8)
    prob = to_uint8_map(probabilities, picture.shape[:2]).astype(np.float32) / 255
    target = overlays_dir / (name or safe_mask_name(index, path)).replace(".png", ".jpg")
    write_image(target, heat_overlay(picture, prob), quality=90)
    return target


class MapWriter:
    """Writes a run's maps and overlays on a background thread, so encoding the PNGs of one batch
    overlaps the next batch's forward pass instead of stalling it. A map's path is known at once
    (its row can name it); `take()` hands over the writes queued since the last call, and the rows
    of a batch are written only once those are done, so a row never names a map not yet on disk.
    The report page's thumbnails and overlays are drawn here too (`evidence`), for the same reason."""

    def __init__(self, taken: dict[str, str] | None = None) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="maps")
        self.queued: list[Future] = []
        self.taken = dict(taken or {})  # map names the rows of an earlier run (resume) give -> their input

    def name(self, index: int, path: str) -> str:
        """A map's file name (`safe_mask_name`), with a suffix where a row of an earlier run names
        that file for another input (inputs added before a resume move the positions)."""
        name = stem = safe_mask_name(index, path)[: -len(".png")]
        copies = 1
        while self.taken.setdefault(f"{name}.png", path) != path:
            copies += 1
            name = f"{stem}-{copies}"
        return f"{name}.png"

    def _submit(self, write: Callable[..., Any], *args: Any) -> None:
        self.queued.append(self.pool.submit(write, *args))

    def mask(
        self,
        masks_dir: Path,
        index: int,
        path: str,
        probabilities: np.ndarray,
        size: tuple[int, int],
        collect: MapCollector | None = None,
    ) -> Path:
        """Queue `save_mask`; returns the path it writes. `collect` runs on the writing thread, in
        the order the maps were queued."""
        name = self.name(index, path)
        self._submit(save_mask, masks_dir, index, path, probabilities, size, collect, name)
        return masks_dir / name

    def overlay(self, overlays_dir: Path, index: int, path: str, image: np.ndarray, probabilities: np.ndarray) -> None:
        self._submit(save_overlay, overlays_dir, index, path, image, probabilities, self.name(index, path))

    def evidence(
        self, drawer: Any, rows: list[tuple[int, str, np.ndarray, np.ndarray | None, tuple[int, int]]]
    ) -> None:
        """Queue the report page's pictures of a batch's rows (`inference.report_pictures.EvidenceDrawer`):
        (input position, path, thumbnail, probability map or None, original size) each; a map is made
        8-bit at the original size as `save_mask` makes it, so the page's mask at the threshold counts
        the saved map's pixels. One task per batch: the queue costs nothing per image."""
        if rows:
            self._submit(draw_evidence, drawer, rows)

    def take(self) -> list[Future]:
        queued, self.queued = self.queued, []
        return queued

    def close(self) -> None:
        """Finish every queued write (their errors were already raised where waited on)."""
        self.pool.shutdown(wait=True)


def draw_evidence(drawer: Any, rows: list[tuple[int, str, np.ndarray, np.ndarray | None, tuple[int, int]]]) -> None:
    for index, path, small, probabilities, size in rows:
        pixels = to_uint8_map(probabilities, size) if probabilities is not None and drawer.maps else None
        drawer.draw(index, path, small, pixels)


def records_with_masks(records: Iterable[Record]) -> bool:
    return any(r.mask for r in records)


def pixel_truth(record: Record) -> np.ndarray | None | bool:
    """The boolean mask of a manipulated record, None for a genuine one (scored by its false-positive
    rate), False when the record says nothing about pixels (unlabelled, or manipulated without a mask
    or with an empty one: no pixel to find, and not a genuine image either, as training counts it)."""
    if record.label == 0:
        return None
    if record.label != 1 or not record.mask:
        return False
    try:
        mask = read_mask(record.mask) > 0
    except ImageReadError as error:
        log.warning("pixel metrics skip %s: %s", record.path, error.reason)
        return False
    return mask if mask.any() else False


class PixelReduction:
    """Pixel metrics of a run's maps, reduced map by map as they are made, and the contact-sheet
    cases (the `cases` worst and best images by pixel F1, their maps kept in memory).

    Each map is the 8-bit map at the image's original size, as `infer.py` saves it, so the metrics
    are those of the saved files. Genuine records (label 0) count toward `pixel_fpr_genuine`;
    manipulated ones need a mask in the input; others are left out.
    """

    def __init__(self, records: Sequence[Record], threshold: float = 0.5, cases: int = CONTACT_CASES) -> None:
        from evaluation import PixelMetricAccumulator

        self.records, self.cases = records, cases
        self.accumulator = PixelMetricAccumulator(threshold)
        self.scored: list[tuple[float, str, int, np.ndarray]] = []  # (pixel F1, path, position, map)

    def add(self, index: int, pixels: np.ndarray) -> None:
        """The 8-bit map (H x W, original size) of the record at input position `index`."""
        record = self.records[index]
        truth = pixel_truth(record)
        if truth is False:
            return
        if truth is not None and truth.shape != pixels.shape:  # as training sets such an image aside
            log.warning(
                "pixel metrics skip %s: its mask is %d x %d, the image %d x %d",
                record.path,
                *truth.shape[::-1],
                *pixels.shape[::-1],
            )
            return
        self.accumulator.add(truth, pixels.astype(np.float32) / 255)
        if truth is not None and self.cases:
            self.scored.append((self.accumulator.f1[-1], record.path, index, pixels))
            if len(self.scored) > 4 * self.cases:  # keep only the extremes: memory stays flat
                self.scored = self._extremes()

    def add_saved(self, index: int, map_path: str) -> None:
        """A map written earlier (a resumed run's rows, or other processes' parts)."""
        try:
            pixels = read_image(map_path)[..., 0]
        except ImageReadError as error:
            log.warning("pixel metrics skip %s: %s", self.records[index].path, error.reason)
            return
        self.add(index, pixels)

    def _extremes(self) -> list[tuple[float, str, int, np.ndarray]]:
        ordered = sorted(self.scored, key=lambda item: (item[0], item[1]))
        return ordered if len(ordered) <= 2 * self.cases else ordered[: self.cases] + ordered[-self.cases :]

    def metrics(self) -> dict[str, float] | None:
        """The pixel metrics, or None when no map was reduced."""
        return self.accumulator.compute() if self.accumulator.counts else None

    def contact_sheet(self) -> list[tuple]:
        """(image, true mask, map, title) of the worst and best images, read from the input files."""
        sheet = []
        for f1, path, index, pixels in self._extremes():
            try:
                sheet.append(
                    (
                        read_image(path),
                        read_mask(self.records[index].mask) > 0,
                        pixels.astype(np.float32) / 255,
                        f"{Path(path).name}  pixel F1 {f1:.2f}",
                    )
                )
            except ImageReadError as error:
                log.warning("contact sheet skips %s: %s", path, error.reason)
        return sheet
