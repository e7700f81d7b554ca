"""Losses for localizers, on logits (numerically stable; no sigmoid-then-log).

Dice rewards overlap whatever the size of the region, which keeps a small manipulated area from
drowning in a sea of genuine pixels; BCE keeps per-pixel probabilities calibrated. MVSS-Net and
TruFor train with weighted sums of both (as in the authors' training code).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def dice_loss(
    logits: torch.Tensor, target: torch.Tensor, smooth: float = 1.0, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """1 - soft Dice of sigmoid(`logits`) against `target` {0, 1}, computed per image and averaged.

    `smooth` keeps the loss defined (and zero) on genuine images whose mask and prediction are
    both empty. `weight` (N,) weighs images, e.g. to skip ones whose mask is unknown.
    """
    probs = torch.sigmoid(logits.float()).flatten(1)
    target = target.float().flatten(1)
    intersection = (probs * target).sum(1)
    total = probs.sum(1) + target.sum(1)
    per_image = 1.0 - (2.0 * intersection + smooth) / (total + smooth)
    return _weighted_mean(per_image, weight)


def bce_loss(
    logits: torch.Tensor, target: torch.Tensor, pos_weight: float | None = None, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """Binary cross-entropy on logits, averaged over pixels of each image, then over images."""
    pos = None if pos_weight is None else torch.tensor(float(pos_weight), device=logits.device)
    per_pixel = F.binary_cross_entropy_with_logits(logits.float(), target.float(), reduction="none", pos_weight=pos)
    return _weighted_mean(per_pixel.flatten(1).mean(1) if per_pixel.dim() > 1 else per_pixel, weight)


def _weighted_mean(per_image: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    if weight is None:
        return per_image.mean()
    weight = weight.to(per_image)
    return (per_image * weight).sum() / weight.sum().clamp_min(1e-8)
