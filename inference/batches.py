"""Decoded, preprocessed batches of records, without torch.

Decoding (Pillow, OpenCV) and the numpy geometry release the GIL, so a thread pool keeps the cores
busy without pickling images between processes; a bounded read-ahead keeps memory flat however
many images are scored. The multi-device path feeds the same `load_sample` through a DataLoader.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from datamodules.geometry import to_network_input
from datamodules.io import DEFAULT_MAX_PIXELS, ImageReadError, read_image

log = logging.getLogger(__name__)
Sample = dict[str, Any]
Thumbnailer = Callable[[str, np.ndarray], "np.ndarray | None"]  # (path, decoded image) -> the report's picture


def load_sample(
    index: int,
    path: str,
    geometry: Callable[[np.ndarray], np.ndarray],
    max_pixels: int = DEFAULT_MAX_PIXELS,
    thumbnailer: Thumbnailer | None = None,
) -> Sample:
    """{"index", "path", "image" (network-size uint8), "size" (original H, W)} or {"index", "path", "error"};
    with a `thumbnailer` also "thumb", what it makes of the decoded image for the report page (while
    it is in memory, so the page never decodes it again; None where the page shows the file itself)."""
    try:
        image = read_image(path, max_pixels)
    except ImageReadError as error:
        return {"index": index, "path": path, "error": error.reason}
    sample = {"index": index, "path": path, "image": geometry(image), "size": image.shape[:2]}
    if thumbnailer is not None:
        sample["thumb"] = thumbnailer(path, image)
    return sample


def collate_samples(samples: Sequence[Sample]) -> dict[str, Any]:
    """Readable samples stacked as `image` (N x 3 x H x W float32 in [0, 1]) with their `path`,
    `index` and `size`; unreadable ones listed under `errors` as (path, reason), their positions
    under `error_index`."""
    good = [s for s in samples if "error" not in s]
    errors = [(s["path"], s["error"]) for s in samples if "error" in s]
    for path, reason in errors:
        log.warning("skipping unreadable image %s: %s", path, reason)
    batch: dict[str, Any] = {
        "errors": errors,
        "error_index": [s["index"] for s in samples if "error" in s],
        "path": [s["path"] for s in good],
        "index": [s["index"] for s in good],
        "size": [tuple(s["size"]) for s in good],
    }
    if any("thumb" in s for s in good):
        batch["thumb"] = [s.get("thumb") for s in good]
    if good:
        shapes = {s["image"].shape for s in good}
        # Whole-image localizers see each image at its own size: images of one size share a batch,
        # a batch of mixed sizes is a list of single images (scored one by one).
        batch["image"] = (
            to_network_input([s["image"] for s in good])
            if len(shapes) == 1
            else [to_network_input([s["image"]]) for s in good]
        )
    return batch


def single_image_batches(batch: dict[str, Any]) -> list[dict[str, Any]]:
    """A decoded batch split into one batch per readable image, each as `collate_samples` would
    have made it; an unreadable one goes with the readable image before it in the input (the first
    when none is), so the rows keep the input's order."""
    images = batch["image"]
    singles = []
    for i, path in enumerate(batch["path"]):
        single = {"errors": [], "error_index": [], "path": [path], "index": [batch["index"][i]]}
        single["size"] = [batch["size"][i]]
        single["image"] = images[i] if isinstance(images, list) else images[i : i + 1]
        if "thumb" in batch:
            single["thumb"] = [batch["thumb"][i]]
        singles.append(single)
    for error, position in zip(batch["errors"], batch["error_index"]):
        owner = next((single for single in reversed(singles) if single["index"][0] < position), singles[0])
        owner["errors"].append(error)
        owner["error_index"].append(position)
    return singles


def iter_batches(
    items: Sequence[tuple[int, str]],
    geometry: Callable[[np.ndarray], np.ndarray],
    batch_size: int,
    workers: int = 2,
    read_ahead: int = 2,
    thumbnailer: Thumbnailer | None = None,
) -> Iterator[dict[str, Any]]:
    """Batches of `(index, path)` items in order, decoded by `workers` threads while the caller
    scores; at most `read_ahead` batches wait decoded in memory.

    Each batch is also stacked and converted to float on a worker (after its images, which come
    first in the pool's queue, so it never waits on work queued behind it): the caller's thread
    only runs the model, instead of leaving the cores idle while it converts pixels.
    `thumbnailer`: each sample also carries its thumbnail (see `load_sample`).
    """
    chunks = (items[start : start + batch_size] for start in range(0, len(items), batch_size))
    if workers <= 0:
        for chunk in chunks:
            yield collate_samples([load_sample(i, p, geometry, thumbnailer=thumbnailer) for i, p in chunk])
        return
    pending: deque[Future] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decode") as pool:
        for chunk in chunks:
            samples = [pool.submit(load_sample, i, p, geometry, DEFAULT_MAX_PIXELS, thumbnailer) for i, p in chunk]
            pending.append(pool.submit(collate_futures, samples))
            if len(pending) > read_ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def collate_futures(samples: list[Future]) -> dict[str, Any]:
    return collate_samples([future.result() for future in samples])
