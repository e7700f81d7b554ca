"""Dual attention (DANet, Fu et al. 2019): position attention and channel attention, fused.

Position attention lets every location borrow evidence from every other location that looks like
it (a copied region finds its source); channel attention re-weighs feature channels by their
mutual correlation. Both start as identities (`gamma` = 0) and learn how much to mix in.
"""

from __future__ import annotations

import torch
from torch import nn

from detectors.base import autocast_off


def conv_bn_relu(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class PositionAttention(nn.Module):
    """Self-attention over the H*W positions, with queries and keys reduced to C / `reduction`."""

    def __init__(self, channels: int, reduction: int = 8) -> None:
        super().__init__()
        self.query = nn.Conv2d(channels, channels // reduction, 1)
        self.key = nn.Conv2d(channels, channels // reduction, 1)
        self.value = nn.Conv2d(channels, channels, 1)
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        query = self.query(features).flatten(2).transpose(1, 2)  # N x HW x C'
        key = self.key(features).flatten(2)  # N x C' x HW
        attention = torch.softmax(torch.bmm(query, key), dim=-1)  # N x HW x HW
        value = self.value(features).flatten(2)  # N x C x HW
        attended = torch.bmm(value, attention.transpose(1, 2)).reshape(features.shape)
        return self.gamma * attended + features


class ChannelAttention(nn.Module):
    """Attention between channels; subtracting each row's energy from its maximum (as DANet does)
    makes dissimilar channels attend to each other and keeps the softmax well conditioned."""

    def __init__(self) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        device = features.device.type
        if torch.is_autocast_enabled(device):
            # The energies sum H*W products: in float16 they overflow on large images (NaN losses
            # under mixed precision), so this block always runs in float32.
            with autocast_off(features.device):
                return self.attend(features.float()).to(features.dtype)
        return self.attend(features)

    def attend(self, features: torch.Tensor) -> torch.Tensor:
        flat = features.flatten(2)  # N x C x HW
        energy = torch.bmm(flat, flat.transpose(1, 2))  # N x C x C
        attention = torch.softmax(energy.amax(-1, keepdim=True) - energy, dim=-1)
        attended = torch.bmm(attention, flat).reshape(features.shape)
        return self.gamma * attended + features


class DualAttentionHead(nn.Module):
    """Two branches (3x3 conv -> position or channel attention -> 3x3 conv) summed, dropout, 1x1
    conv to `out_channels` logits. `inner_channels` defaults to a quarter of the input's."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int = 1,
        inner_channels: int | None = None,
        dropout: float = 0.1,
        reduction: int = 8,
    ) -> None:
        super().__init__()
        inner = inner_channels or in_channels // 4
        self.position_in = conv_bn_relu(in_channels, inner)
        self.channel_in = conv_bn_relu(in_channels, inner)
        self.position = PositionAttention(inner, reduction)
        self.channel = ChannelAttention()
        self.position_out = conv_bn_relu(inner, inner)
        self.channel_out = conv_bn_relu(inner, inner)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Conv2d(inner, out_channels, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        position = self.position_out(self.position(self.position_in(features)))
        channel = self.channel_out(self.channel(self.channel_in(features)))
        return self.classifier(position + channel)
