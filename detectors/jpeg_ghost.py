"""`jpeg_ghost`: JPEG ghosts (Farid 2009), a training-free localizer of double JPEG compression.

A region pasted from a JPEG compressed at quality q1, then saved with the whole image at q2, keeps
the quantization of q1 in its DCT coefficients: re-quantizing it at q1 changes it little (a
"ghost"), while the rest of the image, quantized only at q2, changes more. Each 8 x 8 block of the
luma is re-quantized at qualities 50..95 (the IJG tables); a block's ghost strength is how far below
the image's median difference it falls at its best quality, less its mean dip over all qualities
(smooth content falls below at every quality, a ghost at one). The map is that strength in robust
spreads across the blocks. Differences from Farid: the difference is measured in the DCT domain
(orthonormal, so equal to the pixel-domain error before rounding) and the qualities are compared
by these robust statistics rather than shown one map per quality; the grid is the image's own
(top-left aligned), so a splice cropped off the 8 x 8 grid before the last save shows no ghost.
Fixed-weight torch throughout, so it exports to ONNX.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from datamodules.preprocess import Preprocess
from detectors.base import capturing_graph
from detectors.localizer import Localizer, pad_to_multiple
from detectors.noise_level import MAD_TO_STD, lower_median
from imageops import LUMA

# The JPEG standard's luminance quantization table (quality 50), row by row.
LUMINANCE_TABLE = (
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
)  # fmt: skip


def quantization_table(quality: int) -> torch.Tensor:
    """The IJG (libjpeg) luminance table at `quality` 1..100, as 64 steps."""
    scale = 5000.0 / quality if quality < 50 else 200.0 - 2.0 * quality
    steps = torch.floor((torch.tensor(LUMINANCE_TABLE, dtype=torch.float64) * scale + 50) / 100)
    return steps.clamp(1, 255).float()


def dct_basis() -> torch.Tensor:
    """(64, 1, 8, 8) orthonormal 2-D DCT-II basis, as convolution weights with stride 8."""
    u = torch.arange(8, dtype=torch.float64).view(8, 1)
    x = torch.arange(8, dtype=torch.float64).view(1, 8)
    one_d = torch.cos((2 * x + 1) * u * math.pi / 16) * math.sqrt(2 / 8)
    one_d[0] = math.sqrt(1 / 8)
    one_d = one_d.float()
    return torch.einsum("ux,vy->uvxy", one_d, one_d).reshape(64, 1, 8, 8)


class JpegGhostLocalizer(Localizer):
    """Blocks that re-quantize with unusually little change at some quality score high.

    `qualities`: the re-compression qualities searched; `window`: side (in 8 x 8 blocks) of the
    window the differences are averaged over; `min_spread`, `z_offset`, `z_scale`: the map is
    z_scale * (strength in robust spreads, at least `min_spread` - z_offset).
    """

    fit_without_gradients = True  # no parameter to train: calibrated on genuine images only
    # the JPEG block grid: dense_prediction pads bottom/right to it (keeping it top-left aligned)
    # itself, after checking the image's own size

    def __init__(self, qualities: tuple[int, ...] = tuple(range(50, 100, 5)), window: int = 3,
                 min_spread: float = 0.05, z_offset: float = 3.0, z_scale: float = 1.0,
                 image_score: str = "topk_mean", topk_fraction: float = 0.01,
                 loss_weights: Mapping[str, float] | None = None,
                 preprocess: Preprocess | Mapping[str, Any] | None = None) -> None:  # fmt: skip
        super().__init__(preprocess or {"size": None, "mode": "none"}, image_score=image_score,
                         loss_weights=loss_weights, topk_fraction=topk_fraction)  # fmt: skip
        qualities = tuple(int(q) for q in qualities)
        if len(qualities) < 2 or not all(1 <= q <= 100 for q in qualities):
            raise ValueError(f"jpeg_ghost needs two or more qualities in 1..100, got {qualities}")
        if window < 1 or window % 2 == 0 or min_spread <= 0 or z_scale <= 0:
            raise ValueError("jpeg_ghost window must be odd and >= 1; min_spread, z_scale positive")
        self.window, self.min_spread = int(window), float(min_spread)
        self.z_offset, self.z_scale = float(z_offset), float(z_scale)
        self.register_buffer("luma", torch.tensor(LUMA).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("basis", dct_basis(), persistent=False)
        tables = torch.stack([quantization_table(q) for q in qualities])
        self.register_buffer("tables", tables.view(1, len(qualities), 64, 1, 1), persistent=False)

    @property
    def min_image_side(self) -> int:
        """The smallest image side (px) it scores: one window of 8 x 8 blocks (the robust statistics
        of fewer blocks say nothing); an exported model's metadata carries it."""
        return 8 * self.window

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        height, width = image.shape[-2:]
        if not capturing_graph() and min(height, width) < self.min_image_side:
            raise ValueError(
                f"jpeg_ghost needs an image of at least {self.min_image_side} px on each side (a window of "
                f"{self.window} x {self.window} JPEG blocks); got {height} x {width}"
            )
        image = pad_to_multiple(image, 8)
        luma = (image * self.luma).sum(1, keepdim=True) * 255.0 - 128.0
        coefficients = F.conv2d(luma, self.basis, stride=8).unsqueeze(1)  # (N, 1, 64, h, w)
        requantized = torch.round(coefficients / self.tables) * self.tables
        difference = (coefficients - requantized).square().mean(2)  # (N, qualities, h, w)
        pad = self.window // 2
        difference = F.avg_pool2d(difference, self.window, 1, pad, count_include_pad=False)
        level = torch.log(difference + 1.0)
        median = lower_median(level.flatten(2)).unsqueeze(-1)  # per quality: (N, qualities, 1, 1)
        dip = median - level
        strength = (dip.amax(1, keepdim=True) - dip.mean(1, keepdim=True)).flatten(1)
        centre = lower_median(strength)
        spread = (MAD_TO_STD * lower_median((strength - centre).abs())).clamp_min(self.min_spread)
        z = ((strength - centre) / spread).view_as(dip[:, :1])
        logit = self.z_scale * (z - self.z_offset)
        logit = F.interpolate(logit, size=image.shape[-2:], mode="bilinear", align_corners=False)
        return {"mask_logit": logit[..., :height, :width]}
