"""Cross-modal fusion of two SegFormer (MiT) streams, after CMX (Zhang et al., "CMX: Cross-Modal
Fusion for RGB-X Semantic Segmentation with Transformers", T-ITS 2023), as TruFor uses it for RGB and
the noise fingerprint.

At every encoder stage the two streams first *rectify* each other (each adds the other, weighted
per channel and per pixel), continue separately to the next stage, and are *fused* into the one
feature map the decoders read. The MiT stages come from segmentation-models-pytorch, so ImageNet
weights load by their usual names.
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

MIT_B2 = {
    "embed_dims": (64, 128, 320, 512),
    "depths": (3, 4, 6, 3),
    "num_heads": (1, 2, 5, 8),
    "sr_ratios": (8, 4, 2, 1),
}


def build_mit(
    embed_dims: Sequence[int],
    depths: Sequence[int],
    num_heads: Sequence[int],
    sr_ratios: Sequence[int],
    drop_path_rate: float = 0.1,
    stem_width: int | None = None,
) -> nn.Module:
    """A MiT encoder of segmentation-models-pytorch with the SegFormer settings of every MiT size
    (patch 7/3, MLP ratio 4, qkv bias, LayerNorm eps 1e-6); the widths and depths pick the size.

    `stem_width` puts a convolutional stem (`ConvStem`) in front of the first patch embedding, which
    then reads its `stem_width` channels; None (the published architecture) leaves MiT as it is.
    """
    from segmentation_models_pytorch.encoders.mix_transformer import LayerNorm, MixVisionTransformer

    mit = MixVisionTransformer(
        embed_dims=list(embed_dims),
        depths=list(depths),
        num_heads=list(num_heads),
        sr_ratios=list(sr_ratios),
        mlp_ratios=[4, 4, 4, 4],
        qkv_bias=True,
        norm_layer=partial(LayerNorm, eps=1e-6),
        drop_path_rate=drop_path_rate,
    )
    if stem_width:
        embed, width = mit.patch_embed1.proj, int(stem_width)
        mit.patch_embed1.proj = nn.Sequential(
            ConvStem(embed.in_channels, width),
            nn.Conv2d(width, embed.out_channels, embed.kernel_size, embed.stride, embed.padding),
        )
    return mit


class ConvStem(nn.Sequential):
    """Two 3x3 conv -> BatchNorm -> ReLU layers at full resolution.

    MiT's first step is a linear 7x7 convolution at stride 4 followed by a per-token LayerNorm: a
    pixel-level trace (the smoothing left by resampling a copied region, a donor's noise level) can
    reach the transformer only as an aliased linear mix whose amplitude the norm takes away. The
    published model starts from ImageNet weights; a small one trained for minutes from random
    weights does not get past this (docs/results/localization.md). Nonlinear layers before the
    stride let it measure local energy first, as early convolutions do for vision transformers
    (Xiao et al., NeurIPS 2021).
    """

    def __init__(self, in_channels: int, width: int) -> None:
        super().__init__(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        )


class Rectify(nn.Module):
    """CMX feature rectification: each stream gains the other stream times channel weights (from
    average- and max-pooled features of both, MLP, sigmoid) and times spatial weights (1x1 convs on
    both, sigmoid), each term scaled by 0.5."""

    def __init__(self, dim: int, reduction: int = 1, channel_scale: float = 0.5, spatial_scale: float = 0.5) -> None:
        super().__init__()
        self.channel_scale, self.spatial_scale = channel_scale, spatial_scale
        self.channel_mlp = nn.Sequential(
            nn.Linear(4 * dim, 4 * dim // reduction),
            nn.ReLU(inplace=True),
            nn.Linear(4 * dim // reduction, 2 * dim),
            nn.Sigmoid(),
        )
        self.spatial_mlp = nn.Sequential(
            nn.Conv2d(2 * dim, dim // reduction, 1),
            nn.ReLU(inplace=True),
            nn.Conv2d(dim // reduction, 2, 1),
            nn.Sigmoid(),
        )

    def forward(self, rgb: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        both = torch.cat((rgb, noise), dim=1)
        pooled = torch.cat((both.mean(dim=(2, 3)), both.amax(dim=(2, 3))), dim=1)
        channel = self.channel_mlp(pooled).reshape(rgb.shape[0], 2, rgb.shape[1], 1, 1)
        spatial = self.spatial_mlp(both).unsqueeze(2)
        # Index 1 weights are applied to the noise stream when it is added to RGB, index 0 the reverse.
        rgb_out = rgb + (self.channel_scale * channel[:, 1] + self.spatial_scale * spatial[:, 1]) * noise
        noise_out = noise + (self.channel_scale * channel[:, 0] + self.spatial_scale * spatial[:, 0]) * rgb
        return rgb_out, noise_out


class CrossAttention(nn.Module):
    """Efficient cross attention: each stream's queries read a (head_dim x head_dim) context built
    from the *other* stream's keys and values, so the cost is linear in the number of pixels."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"fusion width {dim} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.kv_rgb = nn.Linear(dim, 2 * dim, bias=False)
        self.kv_noise = nn.Linear(dim, 2 * dim, bias=False)

    def _heads(self, tokens: torch.Tensor) -> torch.Tensor:
        n, length, dim = tokens.shape
        return tokens.reshape(n, length, self.num_heads, dim // self.num_heads).transpose(1, 2)

    def _context(self, kv: torch.Tensor) -> torch.Tensor:
        key, value = (self._heads(part) for part in kv.chunk(2, dim=-1))
        return ((key.transpose(-2, -1) @ value) * self.scale).softmax(dim=-2)

    def forward(self, rgb: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, length, dim = rgb.shape
        context_rgb, context_noise = self._context(self.kv_rgb(rgb)), self._context(self.kv_noise(noise))
        rgb_read = (self._heads(rgb) @ context_noise).transpose(1, 2).reshape(n, length, dim)
        noise_read = (self._heads(noise) @ context_rgb).transpose(1, 2).reshape(n, length, dim)
        return rgb_read, noise_read


class Fuse(nn.Module):
    """CMX feature fusion: a cross-attention path per stream (half of a projection goes through
    cross attention, half passes; residual and LayerNorm), then a channel embedding of both
    (1x1 -> depthwise 3x3 -> ReLU -> 1x1 -> BN, plus a 1x1 residual, BN) into one map."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.proj_rgb, self.proj_noise = nn.Linear(dim, 2 * dim), nn.Linear(dim, 2 * dim)
        self.cross_attention = CrossAttention(dim, num_heads)
        self.out_rgb, self.out_noise = nn.Linear(2 * dim, dim), nn.Linear(2 * dim, dim)
        self.norm_rgb, self.norm_noise = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.embed_residual = nn.Conv2d(2 * dim, dim, 1, bias=False)
        self.embed = nn.Sequential(
            nn.Conv2d(2 * dim, dim, 1),
            nn.Conv2d(dim, dim, 3, padding=1, groups=dim),
            nn.ReLU(inplace=True),
            nn.Conv2d(dim, dim, 1),
            nn.BatchNorm2d(dim),
        )
        self.embed_norm = nn.BatchNorm2d(dim)

    def forward(self, rgb: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        n, dim, height, width = rgb.shape
        rgb, noise = rgb.flatten(2).transpose(1, 2), noise.flatten(2).transpose(1, 2)
        rgb_pass, rgb_cross = F.relu(self.proj_rgb(rgb)).chunk(2, dim=-1)
        noise_pass, noise_cross = F.relu(self.proj_noise(noise)).chunk(2, dim=-1)
        rgb_read, noise_read = self.cross_attention(rgb_cross, noise_cross)
        rgb = self.norm_rgb(rgb + self.out_rgb(torch.cat((rgb_pass, rgb_read), dim=-1)))
        noise = self.norm_noise(noise + self.out_noise(torch.cat((noise_pass, noise_read), dim=-1)))
        merged = torch.cat((rgb, noise), dim=-1).transpose(1, 2).reshape(n, 2 * dim, height, width)
        return self.embed_norm(self.embed_residual(merged) + self.embed(merged))


class DualMiTEncoder(nn.Module):
    """Two MiT encoders (RGB and fingerprint) stepped stage by stage: after each stage the streams
    rectify each other and continue, and their fusion is that stage's output (strides 4..32)."""

    def __init__(self, rgb: nn.Module, noise: nn.Module, embed_dims: Sequence[int], num_heads: Sequence[int]) -> None:
        super().__init__()
        self.rgb, self.noise = rgb, noise
        self.rectify = nn.ModuleList(Rectify(dim) for dim in embed_dims)
        self.fuse = nn.ModuleList(Fuse(dim, heads) for dim, heads in zip(embed_dims, num_heads))
        self.out_channels = tuple(embed_dims)

    @staticmethod
    def _stage(encoder: nn.Module, index: int, x: torch.Tensor) -> torch.Tensor:
        x = getattr(encoder, f"patch_embed{index}")(x)
        x = getattr(encoder, f"block{index}")(x)
        return getattr(encoder, f"norm{index}")(x)

    def forward(self, rgb: torch.Tensor, noise: torch.Tensor) -> list[torch.Tensor]:
        features = []
        for index, (rectify, fuse) in enumerate(zip(self.rectify, self.fuse), start=1):
            rgb, noise = self._stage(self.rgb, index, rgb), self._stage(self.noise, index, noise)
            rgb, noise = rectify(rgb, noise)
            features.append(fuse(rgb, noise))
        return features


class MLPDecoder(nn.Module):
    """SegFormer's all-MLP decoder: each stage projected to `embed_dim` (a 1x1 conv is the per-pixel
    linear layer), upsampled to stride 4, concatenated deepest first, fused (1x1, BN, ReLU),
    dropout, 1x1 prediction at stride 4."""

    def __init__(
        self,
        in_channels: Sequence[int],
        num_classes: int,
        embed_dim: int = 512,
        bn_eps: float = 1e-5,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.project = nn.ModuleList(nn.Conv2d(channels, embed_dim, 1) for channels in in_channels)
        self.fuse = nn.Sequential(
            nn.Conv2d(embed_dim * len(in_channels), embed_dim, 1),
            nn.BatchNorm2d(embed_dim, eps=bn_eps),
            nn.ReLU(inplace=True),
        )
        self.dropout = nn.Dropout2d(dropout)
        self.predict = nn.Conv2d(embed_dim, num_classes, 1)

    def forward(self, features: Sequence[torch.Tensor]) -> torch.Tensor:
        size = features[0].shape[-2:]
        projected = [
            F.interpolate(project(x), size=size, mode="bilinear", align_corners=False) if i else project(x)
            for i, (project, x) in enumerate(zip(self.project, features))
        ]
        return self.predict(self.dropout(self.fuse(torch.cat(projected[::-1], dim=1))))


def weighted_statistics(values: torch.Tensor, log_weight: torch.Tensor | None = None) -> torch.Tensor:
    """Soft-min, soft-max, mean and mean square of each map in `values` (N x C x H x W) under
    per-pixel weights `softmax(log_weight)` (uniform when None): N x 4C.

    The soft extremes are `-+ logsumexp(log w -+ x)`, so a single strong pixel moves the soft-max
    almost as much as a hard max would, while gradients reach every pixel.
    """
    n, channels = values.shape[:2]
    values = values.reshape(n, channels, -1)
    if log_weight is None:
        log_weight = torch.zeros_like(values[:, :1])
    log_weight = F.log_softmax(log_weight.reshape(n, 1, -1), dim=-1)
    weight = log_weight.exp()
    soft_min = -torch.logsumexp(log_weight - values, dim=-1)
    soft_max = torch.logsumexp(log_weight + values, dim=-1)
    mean = (weight * values).sum(dim=-1)
    mean_square = (weight * values * values).sum(dim=-1)
    return torch.cat((soft_min, soft_max, mean, mean_square), dim=1)
