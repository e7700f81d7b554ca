"""Pixel metrics of a localizer's maps under perturbations (`infer.py robustness=true` on input with masks).

The files go through the scoring run's own loop (`inference.scoring.predictions`), the
perturbation applied to the decoded pixels first, as for the scores. Each map is compared with the
true mask at the image's *original* size: a rescaled image gives a map at its new size, which is
brought back to the original size exactly as `infer.py save_masks=true` writes maps (rounded to 8
bits, then bilinear; `inference.masks.to_uint8_map`) and reduced by the same `PixelReduction`. So
the unperturbed level reproduces the pixel metrics `infer.py` reports, and a mask is never resampled.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from datamodules.records import Record
from inference.masks import PixelReduction, to_uint8_map
from inference.runtime import Runtime
from inference.scoring import Perturb, Prediction, effective_batch_size, perturbed_scores


def score_perturbed_maps_fn(
    runtime: Runtime, records: Sequence[Record], batch_size: int = 32, num_workers: int = 0, threshold: float = 0.5
) -> Callable[[Perturb | None], dict[str, Any]]:
    """`perturbation -> {"scores", "pixel"}` for `evaluation.robustness_curves`: the image scores of
    `records` (NaN where unreadable) and the pixel metrics of their maps at the original size
    (manipulated records need a `mask`; genuine ones count toward `pixel_fpr_genuine`)."""
    if not runtime.is_localizer:
        raise ValueError(f"{runtime.name} gives no maps (not a localizer): no pixel metrics to sweep")
    batch_size = effective_batch_size(runtime, batch_size)

    def score(perturb: Perturb | None) -> dict[str, Any]:
        reduction = PixelReduction(records, threshold, cases=0)

        def collect(prediction: Prediction) -> None:
            batch, maps = prediction.batch, prediction.outputs["mask"]
            for i, index in enumerate(batch["index"]):
                size = tuple(int(v) for v in batch["size"][i])
                reduction.add(index, to_uint8_map(maps[i][0], size))

        scores = perturbed_scores(runtime, records, perturb, batch_size, num_workers, collect)
        return {"scores": scores, "pixel": reduction.metrics() or {}}

    return score
