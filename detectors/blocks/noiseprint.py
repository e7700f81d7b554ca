"""A learned camera/processing noise fingerprint (Noiseprint, Cozzolino and Verdoliva, TIFS 2019;
Noiseprint++ in TruFor, Guillaro et al., CVPR 2023).

A plain DnCNN: no pooling and no stride, so the output keeps the input's size and every output
pixel sees a `(2 * depth + 1)`-pixel square of the input. It is trained (phase 1 of `trufor`) so
that patches which went through the same capture and processing chain give similar residuals;
a region pasted from another chain then stands out in the fingerprint.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class NoiseFingerprint(nn.Module):
    """DnCNN: `depth` 3x3 convolutions of `width` channels, BatchNorm on all but the first and the
    last, ReLU after all but the last, `out_channels` outputs. Input RGB in [0, 1] (no
    normalization: the published extractor was trained on that range).

    The layers are one `nn.Sequential` in the order conv[, bn][, relu] so that the published
    Noiseprint++ weights map onto it index by index.
    """

    def __init__(self, depth: int = 17, width: int = 64, in_channels: int = 3, out_channels: int = 1,
                 bn_momentum: float = 0.1) -> None:
        super().__init__()
        if depth < 2:
            raise ValueError(f"the fingerprint extractor needs depth >= 2, got {depth}")
        layers: list[nn.Module] = []
        for index in range(depth):
            first, last = index == 0, index == depth - 1
            normalized = not first and not last
            conv = nn.Conv2d(in_channels if first else width, out_channels if last else width, 3,
                             padding=1, bias=not normalized)
            # DnCNN's initialization: He-normal over the output fan.
            nn.init.normal_(conv.weight, 0.0, math.sqrt(2.0 / (9 * conv.out_channels)))
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
            layers.append(conv)
            if normalized:
                layers.append(nn.BatchNorm2d(width, momentum=bn_momentum))
            if not last:
                layers.append(nn.ReLU(inplace=True))
        self.layers = nn.Sequential(*layers)
        self.depth = depth
        self.out_channels = out_channels

    @property
    def receptive_field(self) -> int:
        """Side of the input square that one output pixel depends on (3x3 convolutions, stride 1)."""
        return 2 * self.depth + 1

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.layers(image)


def patch_contrastive_loss(fingerprint: torch.Tensor, chain: torch.Tensor, patch: int = 16,
                           temperature: float = 1.0) -> torch.Tensor:
    """Noiseprint's patch-level objective over processing chains.

    The fingerprint (N x C x H x W) is cut into `patch` x `patch` tiles; each tile is a point, its
    label the chain of its image. For every tile i with at least one other tile of its chain the
    loss is `-log(sum_{j same chain} exp(-d_ij / T) / sum_{j != i} exp(-d_ij / T))`, d the mean
    squared distance between zero-mean tiles (Cozzolino and Verdoliva 2019, eq. 3, with tiles of
    one batch as the candidate set). Tiles of the same chain are pulled together and tiles of
    different chains pushed apart, whatever the scene: the scene cannot help, because tiles of
    one image see different content but share the chain.
    """
    n, c, height, width = fingerprint.shape
    rows, cols = height // patch, width // patch
    if rows * cols == 0:
        raise ValueError(f"fingerprint {height}x{width} is smaller than one {patch}px patch")
    tiles = fingerprint[..., : rows * patch, : cols * patch]
    tiles = tiles.reshape(n, c, rows, patch, cols, patch).permute(0, 2, 4, 1, 3, 5).reshape(n * rows * cols, -1)
    tiles = tiles - tiles.mean(dim=1, keepdim=True)
    labels = chain.reshape(n, 1).expand(n, rows * cols).reshape(-1)
    distance = torch.cdist(tiles, tiles).pow(2) / tiles.shape[1]
    logits = -distance / temperature
    eye = torch.eye(len(labels), dtype=torch.bool, device=tiles.device)
    logits = logits.masked_fill(eye, float("-inf"))
    same = (labels[:, None] == labels[None, :]) & ~eye
    has_positive = same.any(dim=1)
    if not has_positive.any():
        raise ValueError("patch_contrastive_loss needs at least two tiles of one chain in the batch")
    log_all = torch.logsumexp(logits, dim=1)
    log_same = torch.logsumexp(logits.masked_fill(~same, float("-inf")), dim=1)
    return (log_all - log_same)[has_positive].mean()
