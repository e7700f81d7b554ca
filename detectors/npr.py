"""NPR (neighbouring pixel relationships): a residual network trained from scratch.

Reference facts (DESIGN.md section 5): residual x - up(down(x)) scaled by 2/3 -> conv 3x3 stride 2
-> layer1 -> layer2 of a ResNet -> global average pooling -> linear. Sizes come from config so a
tiny variant trains in tests.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

from datamodules.preprocess import Preprocess
from detectors.base import Detector
from detectors.blocks.residuals import neighboring_pixel_residual

BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


def truncated_resnet(in_channels: int, width: int, layers: Sequence[int], block: str = "bottleneck") -> tuple[nn.Sequential, int]:
    """Stem (conv 3x3 stride 2, BN, ReLU, max-pool) and the first len(layers) ResNet stages.

    Returns the network and its output channel count. Shallow on purpose: artifact detectors need
    local statistics, not deep semantics.
    """
    block_cls = BLOCKS[block]
    modules: list[nn.Module] = [
        nn.Conv2d(in_channels, width, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
    ]
    channels = width
    for stage, depth in enumerate(layers):
        planes = width * 2**stage
        stride = 1 if stage == 0 else 2
        downsample = None
        if stride != 1 or channels != planes * block_cls.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(channels, planes * block_cls.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block_cls.expansion),
            )
        stage_blocks = [block_cls(channels, planes, stride, downsample)]
        channels = planes * block_cls.expansion
        stage_blocks += [block_cls(channels, planes) for _ in range(depth - 1)]
        modules.append(nn.Sequential(*stage_blocks))
    return nn.Sequential(*modules), channels


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

    def forward_features(self, image: torch.Tensor) -> torch.Tensor:
        residual = neighboring_pixel_residual(self.normalize(image)) * self.residual_scale
        return self.pool(self.features(residual)).flatten(1)

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features).squeeze(1)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logit": self.forward_head(self.forward_features(image))}
