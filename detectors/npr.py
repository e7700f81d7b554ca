"""NPR (neighbouring pixel relationships): a residual network trained from scratch.

Reference facts (from the authors' public code): residual x - up(down(x)) scaled by 2/3 -> conv 3x3 stride 2
-> layer1 -> layer2 of a ResNet -> global average pooling -> linear. Sizes come from config so a
tiny variant trains in tests.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.base import Detector
from detectors.blocks.residuals import neighboring_pixel_residual
from detectors.blocks.resnet import BLOCKS, truncated_resnet


class NPR(Detector):
    """Binary AI-generated-image classifier on neighbouring-pixel residuals."""

    def __init__(
        self,
        width: int = 64,
        layers: Sequence[int] = (3, 4),
        block: str = "bottleneck",
        residual_scale: float = 2.0 / 3.0,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(preprocess or {"size": 224, "mode": "center_crop"})
        if block not in BLOCKS:
            raise ValueError(f"npr block must be one of {sorted(BLOCKS)}, got {block!r}")
        self.residual_scale = residual_scale
        self.features, channels = truncated_resnet(3, width, layers, block)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, 1)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        residual = neighboring_pixel_residual(self.normalize(image)) * self.residual_scale
        return {"logit": self.head(self.pool(self.features(residual)).flatten(1)).squeeze(1)}
