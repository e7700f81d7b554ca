"""Pixel metrics of a localizer's maps under perturbations (`infer.py robustness=true` on input with masks).

The files go through the scoring run's own path (`inference.batches.iter_batches`, the runtime's
geometry, `predict_batch`), the perturbation applied to the decoded pixels first, as
`inference.scoring.score_perturbed_fn` does for scores. Each map is compared with the true mask at
the image's *original* size: a rescaled image gives a map at its new size, which is brought back to
the original size exactly as `infer.py save_masks=true` writes maps (rounded to 8 bits, then bilinear;
`inference.masks.to_uint8_map`). So the unperturbed level reproduces the pixel metrics `infer.py`
reports from its saved maps, and a mask is never resampled.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import numpy as np

from datamodules.io import ImageReadError, read_mask
from datamodules.records import Record
from inference.batches import iter_batches
from inference.masks import to_uint8_map
from inference.runtime import runtime_transform
from inference.scoring import effective_batch_size, predict_batch

log = logging.getLogger(__name__)
Perturb = Callable[[np.ndarray], np.ndarray]


def pixel_truth(record: Record) -> np.ndarray | None | bool:
    """The boolean mask of a manipulated record, None for a genuine one (scored by its false-positive
    rate), False when the record says nothing about pixels (unlabelled, or manipulated without a mask)."""
    if record.label == 0:
        return None
    if record.label != 1 or not record.mask:
        return False
    try:
        return read_mask(record.mask) > 0
    except ImageReadError as error:
        log.warning("pixel metrics skip %s: %s", record.path, error.reason)
        return False


def score_perturbed_maps_fn(runtime: Any, records: Sequence[Record], batch_size: int = 32, num_workers: int = 0,
                            threshold: float = 0.5) -> Callable[[Perturb | None], dict[str, Any]]:
    """`perturbation -> {"scores", "pixel"}` for `evaluation.robustness_curves`: the image scores of
    `records` (NaN where unreadable) and the pixel metrics of their maps at the original size
    (manipulated records need a `mask`; genuine ones count toward `pixel_fpr_genuine`)."""
    from evaluation import PixelMetricAccumulator

    if not runtime.is_localizer:
        raise ValueError(f"{runtime.name} gives no maps (not a localizer): no pixel metrics to sweep")
    geometry = runtime_transform(runtime)
    step = effective_batch_size(runtime, batch_size)
    items = [(i, r.path) for i, r in enumerate(records)]

    def score(perturb: Perturb | None) -> dict[str, Any]:
        prepare = geometry if perturb is None else (lambda image: geometry(perturb(image)))
        scores = np.full(len(records), np.nan)
        accumulator = PixelMetricAccumulator(threshold)
        for batch in iter_batches(items, prepare, step, workers=num_workers):
            if "image" not in batch:
                continue
            outputs = predict_batch(runtime, batch["image"])
            scores[batch["index"]] = np.asarray(outputs["score"], dtype=np.float64)
            for i, index in enumerate(batch["index"]):
                truth = pixel_truth(records[index])
                if truth is False:
                    continue
                size = tuple(int(v) for v in batch["size"][i])
                accumulator.add(truth, to_uint8_map(outputs["mask"][i][0], size).astype(np.float32) / 255)
        pixel = accumulator.compute() if accumulator.counts else {}
        return {"scores": scores, "pixel": pixel}

    return score
