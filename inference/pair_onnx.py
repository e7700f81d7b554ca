"""A `pairnet` ONNX export (`exporting.pair_export`) scoring panel pairs in infer.py, without torch.

It offers what `inference.pairs` asks of a pair detector (`describe`, `predict_pair`), with the
checkpoint's decoding: panels resized to the graph's square input as the network was trained, the
score against the threshold, the operations at probability 0.5 (`direct` when none), and the masks
resized back to each panel's own size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from evaluation.protocols.duplication import operations_from_probabilities


@dataclass
class OnnxPairPanel:
    array: np.ndarray  # 3 x S x S float32 in [0, 1]
    shape: tuple[int, int]


@dataclass
class OnnxPairPrediction:
    """The fields `inference.pairs.score_pair` writes (as `detectors.duplication.PairPrediction`)."""

    score: float
    duplicated: bool
    operations: list[str]
    mask_a: np.ndarray
    mask_b: np.ndarray
    geometric: list[str] = field(default_factory=list)
    transform: dict[str, Any] = field(default_factory=dict)
    method: str = "pairnet"
    reason: str = ""


class OnnxPairNet:
    is_pair_detector = True

    def __init__(self, session: Any, size: int) -> None:
        self.session, self.size = session, int(size)

    def describe(self, image: np.ndarray) -> OnnxPairPanel:
        resized = cv2.resize(image, (self.size, self.size), interpolation=cv2.INTER_AREA)
        return OnnxPairPanel(np.ascontiguousarray(resized.transpose(2, 0, 1), np.float32) / 255.0, image.shape[:2])

    def predict_pair(self, panel_a: OnnxPairPanel, panel_b: OnnxPairPanel, threshold: float) -> OnnxPairPrediction:
        score, operations, mask_a, mask_b = self.session.run(
            ["score", "operations", "mask_a", "mask_b"],
            {"image_a": panel_a.array[None], "image_b": panel_b.array[None]},
        )
        duplicated = float(score[0]) >= threshold
        masks = [
            (cv2.resize(m[0, 0], (p.shape[1], p.shape[0]), interpolation=cv2.INTER_LINEAR) >= 0.5) & duplicated
            for m, p in ((mask_a, panel_a), (mask_b, panel_b))
        ]
        return OnnxPairPrediction(
            float(score[0]),
            duplicated,
            operations_from_probabilities(operations[0]) if duplicated else [],
            masks[0],
            masks[1],
            reason="" if duplicated else "score below threshold",
        )
