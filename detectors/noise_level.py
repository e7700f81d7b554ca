"""`noise_level`: local noise-level inconsistency, a training-free manipulation localizer.

Every photo carries sensor and compression noise at a level set by its camera, ISO and processing.
An inpainted or smoothed region has less of it, a splice from another photo has its source's. The
map is how far each block's noise level lies from the image's dominant (median) level, in robust
standard deviations of the block levels, so it needs no training and no labelled data.

Noise per block follows Immerkaer (1996, "Fast noise variance estimation"): the residual of a fixed
3 x 3 Laplacian-difference kernel, which cancels locally planar image content, gives
sigma = sqrt(pi / 2) / 6 * mean |residual|. As in the block-wise noise estimators of the splicing
literature (Mahdian & Saic 2009; Lyu, Pan & Zhang 2014), edges and texture would read as noise:
pixels whose smoothed gradient exceeds `edge_factor` times the image's mean gradient are left out of
the mean. Everything is fixed-weight torch (convolutions, pooling, top-k), so it exports to ONNX.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from datamodules.preprocess import Preprocess
from detectors.base import capturing_graph
from detectors.localizer import Localizer
from imageops import IMMERKAER_KERNEL, LUMA, SIGMA_PER_MEAN_ABS

MAD_TO_STD = 1.4826  # the median absolute deviation of a Gaussian, in standard deviations


def lower_median(values: torch.Tensor) -> torch.Tensor:
    """Median along the last dimension (the lower one for an even count), by top-k (ONNX has it)."""
    k = values.shape[-1] // 2 + 1
    return values.topk(k, dim=-1, largest=False).values[..., -1:]


def window_mean(values: torch.Tensor, block: int, step: int) -> torch.Tensor:
    """Mean of `block` x `block` windows every `step` px. With `step` 1 (a window on every pixel) it
    is two 1-D means: one 2-D mean took 1.05 s instead of 0.40 for a 1024 px image's detector."""
    if step == 1:
        return F.avg_pool2d(F.avg_pool2d(values, (block, 1), 1), (1, block), 1)
    return F.avg_pool2d(values, block, step, ceil_mode=True)


class NoiseLevelLocalizer(Localizer):
    """Blocks whose noise level departs from the image's median level score high.

    `block`: side of the square blocks (pixels) the noise is averaged over; blocks overlap by half.
    `edge_factor`: pixels with a smoothed gradient above this multiple of the image's mean gradient
    are structure, not noise, and left out. `min_spread`: the smallest spread of the blocks' log
    noise levels that deviations are measured in (keeps a very uniform image from amplifying tiny
    differences). `z_offset` and `z_scale`: logit = z_scale * (deviation in spreads - z_offset), so
    the pixel probability is 0.5 at `z_offset` spreads; the image threshold is calibrated on
    genuine images like any detector's.

    `fine_block` > 0: blocks of `block` px place a region only to within half a block. Around the
    blocks that deviate (and their neighbours), each pixel takes instead the deviation of the noise
    level in a `fine_block` window centred on it, with probability 0.5 at `fine_z_offset` spreads
    (fewer pixels are averaged, so the level is noisier and the bar higher); elsewhere a pixel
    scores the lower of the two.
    """

    fit_without_gradients = True  # no parameter to train: calibrated on genuine images only

    def __init__(
        self,
        block: int = 32,
        edge_factor: float = 2.0,
        min_spread: float = 0.1,
        z_offset: float = 3.0,
        z_scale: float = 1.0,
        fine_block: int = 16,
        fine_z_offset: float = 3.5,
        image_score: str = "topk_mean",
        topk_fraction: float = 0.01,
        loss_weights: Mapping[str, float] | None = None,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            preprocess or {"size": None, "mode": "none"},
            image_score=image_score,
            loss_weights=loss_weights,
            topk_fraction=topk_fraction,
        )
        if block < 4 or block % 2:
            raise ValueError(f"noise_level block must be an even number of pixels >= 4, got {block}")
        if fine_block and (fine_block < 4 or fine_block % 2):
            raise ValueError(f"noise_level fine_block must be 0 or an even number of pixels >= 4, got {fine_block}")
        if edge_factor <= 0 or min_spread <= 0 or z_scale <= 0:
            raise ValueError("noise_level edge_factor, min_spread and z_scale must be positive")
        self.block, self.edge_factor, self.min_spread = (int(block), float(edge_factor), float(min_spread))
        self.z_offset, self.z_scale = float(z_offset), float(z_scale)
        self.fine_block, self.fine_z_offset = int(fine_block), float(fine_z_offset)
        self.register_buffer("luma", torch.tensor(LUMA).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("high_pass", torch.tensor(IMMERKAER_KERNEL).view(1, 1, 3, 3), persistent=False)
        binomial = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
        smooth = torch.outer(binomial, binomial)
        self.register_buffer("smooth", (smooth / smooth.sum()).view(1, 1, 5, 5), persistent=False)
        sobel = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])
        self.register_buffer("sobel", torch.stack([sobel, sobel.t()]).unsqueeze(1), persistent=False)

    def residual_and_noise_pixels(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, 3, H, W) in [0, 1] -> (|Immerkaer residual| in 8-bit units, 1 where a pixel is noise,
        0 on edges and texture), each (N, 1, H, W)."""
        gray = (image * self.luma).sum(1, keepdim=True) * 255.0
        residual = F.conv2d(F.pad(gray, (1, 1, 1, 1), mode="reflect"), self.high_pass).abs()
        smoothed = F.conv2d(F.pad(gray, (2, 2, 2, 2), mode="reflect"), self.smooth)
        gradient = F.conv2d(F.pad(smoothed, (1, 1, 1, 1), mode="reflect"), self.sobel).square().sum(1, True).sqrt()
        mean_gradient = gradient.mean(dim=(2, 3), keepdim=True)
        return residual, (gradient <= self.edge_factor * mean_gradient).to(gray.dtype)

    @staticmethod
    def pooled_noise(residual: torch.Tensor, keep: torch.Tensor, block: int, step: int) -> torch.Tensor:
        """Noise sigma (8-bit units) of `block` px windows every `step` px; with `step` 1 one window
        centred on every pixel (the image padded by reflection), so the map keeps the image's size."""
        if step == 1:
            pad = (block // 2, block // 2 - 1, block // 2, block // 2 - 1)
            residual, keep = F.pad(residual, pad, mode="reflect"), F.pad(keep, pad, mode="reflect")
        kept_residual, kept_share = window_mean(residual * keep, block, step), window_mean(keep, block, step)
        # a window that is all structure falls back to its plain mean (an overestimate, never a NaN)
        plain = window_mean(residual, block, step)
        mean_abs = torch.where(kept_share > 0.05, kept_residual / kept_share.clamp_min(1e-6), plain)
        return SIGMA_PER_MEAN_ABS * mean_abs

    @property
    def min_image_side(self) -> int:
        """The smallest image side (px) it scores: more than half a block (an exported model's
        metadata carries it, so the ONNX path refuses a smaller image with the same reason)."""
        return self.block // 2 + 1

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        if not capturing_graph() and min(image.shape[-2:]) < self.min_image_side:
            height, width = image.shape[-2:]
            raise ValueError(
                f"noise_level needs an image of at least {self.min_image_side} px on each side (more than half "
                f"its {self.block} px block); got {height} x {width}"
            )
        residual, keep = self.residual_and_noise_pixels(image)
        level = torch.log(self.pooled_noise(residual, keep, self.block, self.block // 2) + 0.1)  # 0.1: flat is not -inf
        flat = level.flatten(1)
        median = lower_median(flat)
        spread = (MAD_TO_STD * lower_median((flat - median).abs())).clamp_min(self.min_spread)
        median, spread = median.view(-1, 1, 1, 1), spread.view(-1, 1, 1, 1)
        logit = self.z_scale * ((level - median).abs() / spread - self.z_offset)
        mask_logit = F.interpolate(logit, size=image.shape[-2:], mode="bilinear", align_corners=False)
        if self.fine_block:
            fine_level = torch.log(self.pooled_noise(residual, keep, self.fine_block, 1) + 0.1)
            fine_logit = self.z_scale * ((fine_level - median).abs() / spread - self.fine_z_offset)
            deviating = F.max_pool2d((logit > 0).to(logit.dtype), 3, 1, 1)  # the blocks and their neighbours
            near = F.interpolate(deviating, size=image.shape[-2:], mode="nearest") > 0
            mask_logit = torch.where(near, fine_logit, torch.minimum(mask_logit, fine_logit))
        return {"mask_logit": mask_logit}
