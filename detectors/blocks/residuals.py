"""Low-level residuals that expose generator up-sampling traces."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def neighboring_pixel_residual(image: torch.Tensor, factor: int = 2) -> torch.Tensor:
    """NPR: the image minus its nearest-neighbour down-then-up resampling.

    Up-sampling layers copy or interpolate neighbouring pixels, so generated images carry local
    correlations that this residual isolates. The up-sampling targets the input's own size, so odd
    heights and widths work (the last row/column reuses its nearest sample).
    """
    height, width = image.shape[-2:]
    down = F.interpolate(image, size=(max(1, height // factor), max(1, width // factor)), mode="nearest")
    return image - F.interpolate(down, size=(height, width), mode="nearest")
