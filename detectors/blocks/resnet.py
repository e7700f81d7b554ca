"""Shallow ResNet trunks for artifact branches (NPR, DCT, the artifact half of clip_freq)."""

from __future__ import annotations

from typing import Sequence

from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


def truncated_resnet(
    in_channels: int, width: int, layers: Sequence[int], block: str = "bottleneck"
) -> tuple[nn.Sequential, int]:
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
