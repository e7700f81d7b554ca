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
import torch.nn.functional as F
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
                           temperature: float = 1.0, pool: int = 4, margin: int = 0) -> torch.Tensor:
    """Noiseprint's patch-level objective over processing chains.

    The fingerprint (N x C x H x W) is cut into `patch` x `patch` tiles; each tile is a point, its
    label the chain of its image. For every tile i the loss is
    `-log(sum_{j same chain} exp(-d_ij / T) / sum_j exp(-d_ij / T))` over the tiles j of the *other*
    images of the batch (Cozzolino and Verdoliva 2019, eq. 3, with the tiles of one batch as the
    candidate set), d the mean squared distance between the tiles' descriptors (`tile_vectors`).
    Tiles of the same chain are pulled together and tiles of different chains pushed apart
    whatever their content, so the extractor must suppress the scene and keep the traces of the
    chain (noise level, compression, resampling).
    """
    n, _, height, width = fingerprint.shape
    if min(height, width) - 2 * margin < patch:
        raise ValueError(f"fingerprint {height}x{width} less a {margin}px margin is smaller than one {patch}px patch")
    per_image = tile_vectors(fingerprint, patch, pool, margin)
    tiles = per_image.reshape(-1, per_image.shape[-1])
    rows_cols = per_image.shape[1]
    labels = chain.reshape(n, 1).expand(n, rows_cols).reshape(-1)
    image = torch.arange(n, device=tiles.device).repeat_interleave(rows_cols)
    logits = -(torch.cdist(tiles, tiles).pow(2) / tiles.shape[1]) / temperature
    # Tiles of one image are left out of each other's sums: they share the scene as well as the
    # chain, and matching scenes is the shortcut the extractor must not learn.
    same_image = image[:, None] == image[None, :]
    logits = logits.masked_fill(same_image, float("-inf"))
    same = (labels[:, None] == labels[None, :]) & ~same_image
    has_positive = same.any(dim=1)
    if not has_positive.any():
        raise ValueError("patch_contrastive_loss needs two images of one chain in the batch")
    log_all = torch.logsumexp(logits, dim=1)
    log_same = torch.logsumexp(logits.masked_fill(~same, float("-inf")), dim=1)
    return (log_all - log_same)[has_positive].mean()


def tile_vectors(fingerprint: torch.Tensor, patch: int, pool: int = 4, margin: int = 0) -> torch.Tensor:
    """Each `patch` x `patch` tile of the fingerprint as the log of its local energy (mean square)
    in `pool` x `pool` cells: (N, tiles per image, C * (patch / pool)^2).

    Noiseprint compares raw residual pixels, which works for sensor patterns aligned to the pixel
    grid of one camera. Our chains are applied to crops at random offsets, so what they leave is
    the residual's power and how it varies locally (blockiness, smoothing, resampling), not a
    pattern at fixed pixels; log-energies also keep the distance independent of the residual's
    overall scale. `margin` pixels are dropped on every side first: there the convolutions saw
    zero padding, which no processing chain explains.
    """
    if margin > 0:
        fingerprint = fingerprint[..., margin:-margin, margin:-margin]
    energy = F.avg_pool2d(fingerprint.float().pow(2), pool) if pool > 1 else fingerprint.float().pow(2)
    cells = patch // pool
    n, c, height, width = energy.shape
    rows, cols = height // cells, width // cells
    tiles = energy[..., : rows * cells, : cols * cells].reshape(n, c, rows, cells, cols, cells)
    return torch.log(tiles.permute(0, 2, 4, 1, 3, 5).reshape(n, rows * cols, -1) + 1e-6)


def chain_separation_auroc(fingerprint: torch.Tensor, chain: torch.Tensor, patch: int = 16, pool: int = 4,
                           margin: int = 0) -> float:
    """How well residual similarity tells same-chain from different-chain tile pairs: the AUROC of
    `-distance` between tiles of *different* images (so a shared scene cannot help), positives
    being pairs whose images went through the same chain. 0.5 is chance, 1.0 perfect."""
    from sklearn.metrics import roc_auc_score

    tiles = tile_vectors(fingerprint.float(), patch, pool, margin)
    n, per_image, dim = tiles.shape
    flat = tiles.reshape(n * per_image, dim)
    image = torch.arange(n).repeat_interleave(per_image)
    labels = chain.reshape(-1).repeat_interleave(per_image)
    similarity = -torch.cdist(flat, flat).pow(2) / dim
    pairs = torch.triu(image[:, None] != image[None, :], diagonal=1)
    same = (labels[:, None] == labels[None, :])[pairs]
    if same.all() or not same.any():
        return float("nan")
    return float(roc_auc_score(same.numpy(), similarity[pairs].numpy()))
