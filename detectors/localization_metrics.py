"""Pixel metrics of a whole split, streamed batch by batch and exact under DDP.

Each rank feeds its images to `evaluation`'s `PixelMetricAccumulator`, which keeps a few numbers
per image. At the end the per-image numbers of every rank are gathered and de-duplicated by dataset
index (the distributed sampler pads ranks with repeated images), then computed once, so two
processes report what one process would. A few best and worst cases are kept for the contact sheet.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from evaluation import PixelMetricAccumulator

PER_MASK_FIELDS = ("f1", "iou", "auroc", "f1_best", "counts")


def all_gather_objects(local: Any) -> list[Any]:
    """`[local]` in one process, every rank's `local` under DDP."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        everything: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everything, local)
        return everything
    return [local]


class SplitPixelMetrics:
    """Pixel metrics of one split (val or test) for a localizer.

    `threshold`: pixel decision threshold on probabilities (0.5, as IMDL-BenCo and most papers).
    `keep_cases`: how many best and worst manipulated images to keep for the contact sheet.
    A manipulated image whose crop holds no manipulated pixel is left out (it is neither a mask
    to find nor a genuine image).
    """

    def __init__(self, threshold: float = 0.5, per_image_curves: bool = True, keep_cases: int = 0) -> None:
        self.threshold, self.per_image_curves, self.keep_cases = threshold, per_image_curves, keep_cases
        self.reset()

    def reset(self) -> None:
        self.accumulator = PixelMetricAccumulator(self.threshold, 0, self.per_image_curves)
        self.mask_index: list[int] = []
        self.genuine_index: list[int] = []
        self.cases: list[tuple[float, int, np.ndarray, np.ndarray, np.ndarray]] = []

    def update(self, batch: dict[str, Any], mask_logit: torch.Tensor) -> None:
        probs = torch.sigmoid(mask_logit.detach().float()).cpu().numpy()[:, 0]
        masks = batch["mask"].detach().cpu().numpy()[:, 0] > 0.5
        for i, index in enumerate(batch["index"].tolist()):
            label = int(batch["label"][i])
            if label == 0:
                self.accumulator.add(None, probs[i])
                self.genuine_index.append(index)
            elif label == 1 and masks[i].any():
                self.accumulator.add(masks[i], probs[i])
                self.mask_index.append(index)
                if self.keep_cases:
                    self._keep_case(self.accumulator.f1[-1], index, batch["image"][i], masks[i], probs[i])

    def _keep_case(self, f1: float, index: int, image: torch.Tensor, mask: np.ndarray, prob: np.ndarray) -> None:
        """Keep only the `keep_cases` best and worst so far: memory stays bounded on any test set."""
        picture = (image.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)
        self.cases.append((float(f1), int(index), picture, mask.copy(), prob.astype(np.float16)))
        self.cases = select_cases(self.cases, self.keep_cases)

    def compute(self) -> tuple[dict[str, float], list[tuple[float, int, np.ndarray, np.ndarray, np.ndarray]]]:
        """(metrics over the whole split, best and worst cases), identical on every rank; resets."""
        acc = self.accumulator
        local = {
            "mask_index": self.mask_index,
            "genuine_index": self.genuine_index,
            "fpr_genuine": acc.fpr_genuine,
            "cases": self.cases,
            **{name: getattr(acc, name) for name in PER_MASK_FIELDS},
        }
        merged = PixelMetricAccumulator(self.threshold, 0, self.per_image_curves)
        seen_masks: set[int] = set()
        seen_genuine: set[int] = set()
        cases: dict[int, tuple] = {}
        for part in all_gather_objects(local):
            for row, index in enumerate(part["mask_index"]):
                if index not in seen_masks:
                    seen_masks.add(index)
                    for name in PER_MASK_FIELDS:
                        getattr(merged, name).append(part[name][row])
            for row, index in enumerate(part["genuine_index"]):
                if index not in seen_genuine:
                    seen_genuine.add(index)
                    merged.fpr_genuine.append(part["fpr_genuine"][row])
            cases.update({case[1]: case for case in part["cases"]})
        self.reset()
        return merged.compute(), select_cases(sorted(cases.values(), key=lambda c: c[1]), self.keep_cases)


def select_cases(cases: list[tuple], keep: int) -> list[tuple]:
    """The `keep` worst then the `keep` best cases by F1 (ties broken by index), without repeats."""
    ordered = sorted(cases, key=lambda case: (case[0], case[1]))
    if len(ordered) <= 2 * keep:
        return ordered
    return ordered[:keep] + ordered[-keep:]
