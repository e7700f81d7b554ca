"""`jpeg_grid`: block-grid alignment, a training-free localizer of regions with another JPEG grid.

JPEG quantizes the DCT of every 8 x 8 block of its grid, and most high-frequency coefficients become
zero. Read back on that grid, a block's high-frequency coefficients are still near zero (within the
8-bit rounding); read on any other grid, each block straddles four of the original ones, whose seams
give it high-frequency energy. So the share of near-zero high-frequency coefficients, computed on
each of the 64 grid offsets, peaks at the offset a region was compressed on. A region pasted from a
JPEG into an image that never was one, or pasted off the grid of a JPEG image, peaks at an offset the
rest of the image does not share. This reads the grid that Li, Yuan & Yu (2009) extract from
blocking artifacts in the pixel domain, from the coefficients instead, as the non-aligned double
JPEG detectors do (Bianchi & Piva 2012, who model the coefficient statistics where this counts
near-zero ones). The map, per window of blocks: the highest share at an offset other than the
image's own grid (and the eight beside it), above the mean of its row or column of offsets,
whichever is higher (a grid lifts the offsets in line with it; lines and text lift a whole row or
column). A later save as JPEG quantizes every block on the image's grid again and wipes the earlier
grid: the map finds a pasted JPEG region in a PNG or TIFF (a figure assembled from JPEG sources, a
screenshot, an editor's lossless export). Fixed-weight torch; exports to ONNX.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from datamodules.preprocess import Preprocess
from detectors.jpeg_ghost import dct_basis
from detectors.localizer import Localizer
from detectors.noise_level import lower_median
from imageops import LUMA

OFFSETS = 64  # the 8 x 8 grid offsets, row-major: offset index = 8 * dy + dx


def high_frequency_basis(min_order: int) -> torch.Tensor:
    """The DCT basis images with u + v >= `min_order` (the ones JPEG zeroes most), as conv weights."""
    order = torch.arange(8).view(8, 1) + torch.arange(8).view(1, 8)
    return dct_basis()[(order >= min_order).flatten()]


def offsets_beside() -> torch.Tensor:
    """(64, 64) 1 where two grid offsets differ by at most one pixel on each axis (cyclic): a block
    one pixel off a grid straddles only thin strips of its neighbours and still reads mostly zeros."""
    dy, dx = torch.arange(OFFSETS) // 8, torch.arange(OFFSETS) % 8

    def near(a: torch.Tensor) -> torch.Tensor:
        distance = (a.view(-1, 1) - a.view(1, -1)).abs()
        return torch.minimum(distance, 8 - distance) <= 1

    return (near(dy) & near(dx)).float()


class JpegGridLocalizer(Localizer):
    """Windows whose sharpest JPEG grid is not the image's own score high.

    `near_zero`: a coefficient (orthonormal DCT, 8-bit units) counts as zero below this; `min_order`:
    the coefficients used (u + v at least this); `window`: side, in 8 x 8 blocks, of the window the
    shares are averaged over (odd); `min_grid`: the height (share above its row's or column's mean)
    at which a window clearly shows a grid; `own_share`: the share of the image's texture in windows
    that show a grid, its own or another, above which the grid most windows show is the image's;
    `peak`: the height at which a pixel's probability is 0.5; `peak_scale`: the height per logit unit.
    """

    fit_without_gradients = True  # no parameter to train: calibrated on genuine images only
    stride = 8  # the base class pads bottom/right, keeping the grid top-left aligned

    def __init__(self, near_zero: float = 0.5, min_order: int = 4, window: int = 5, min_grid: float = 0.05,
                 own_share: float = 0.9, peak: float = 0.1, peak_scale: float = 0.03, image_score: str = "topk_mean",
                 topk_fraction: float = 0.01, loss_weights: Mapping[str, float] | None = None,
                 preprocess: Preprocess | Mapping[str, Any] | None = None) -> None:  # fmt: skip
        super().__init__(preprocess or {"size": None, "mode": "none"}, image_score=image_score,
                         loss_weights=loss_weights, topk_fraction=topk_fraction)  # fmt: skip
        if near_zero <= 0 or not 1 <= min_order <= 14 or window < 1 or window % 2 == 0 or peak_scale <= 0:
            raise ValueError("jpeg_grid needs near_zero > 0, min_order in 1..14, an odd window >= 1 and peak_scale > 0")
        self.near_zero, self.window = float(near_zero), int(window)
        self.min_grid, self.own_share = float(min_grid), float(own_share)
        self.peak, self.peak_scale = float(peak), float(peak_scale)
        self.register_buffer("luma", torch.tensor(LUMA).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("basis", high_frequency_basis(int(min_order)), persistent=False)
        self.register_buffer("beside", offsets_beside(), persistent=False)

    def near_zero_shares(self, luma: torch.Tensor) -> torch.Tensor:
        """(N, 64, H / 8 - 1, W / 8 - 1): per grid offset and block, the share of near-zero coefficients.

        One convolution per row offset, stepping 8 rows and 1 column, reads the blocks of all eight
        column offsets at once (every 8th column is one of them)."""
        blocks_down, blocks_across = luma.shape[-2] // 8 - 1, luma.shape[-1] // 8 - 1
        shares = []
        for dy in range(8):
            rows = luma[..., dy:, :]
            count = sum(  # a third of the coefficients at a time: a 12-megapixel image stays under 1.5 GB
                (F.conv2d(rows, basis, stride=(8, 1))[..., :blocks_down, :].abs() < self.near_zero).sum(1)
                for basis in self.basis.chunk(3)
            )
            near_zero = count / self.basis.shape[0]  # (N, blocks_down, W - 7)
            shares += [near_zero[..., dx : dx + 8 * blocks_across : 8] for dx in range(8)]
        return torch.stack(shares, 1)

    @staticmethod
    def above_rows_and_columns(local: torch.Tensor) -> torch.Tensor:
        """Each offset's share above the mean of its row or of its column of offsets, the higher.

        A grid lifts the offsets in line with it too (a block aligned on one axis straddles only
        two of the grid's blocks), and lines or text along one axis lift a whole row or column of
        offsets; a JPEG grid stands above both at its own offset alone."""
        shares = local.unflatten(1, (8, 8))  # (N, dy, dx, h, w)
        baseline = torch.maximum(shares.mean(2, keepdim=True), shares.mean(1, keepdim=True))
        return (shares - baseline).flatten(1, 2)

    @property
    def min_image_side(self) -> int:
        """Two blocks: PyTorch pads a smaller image up to them, an exported graph keeps the padding it
        was traced with (none), so its metadata carries this and the ONNX path refuses with the reason."""
        return 16

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        luma = (image * self.luma).sum(1, keepdim=True) * 255.0 - 128.0
        # two blocks a side at least (an image of one block has no offsets to compare: mapped all the same)
        side = self.min_image_side
        luma = F.pad(luma, (0, max(0, side - luma.shape[-1]), 0, max(0, side - luma.shape[-2])), mode="replicate")
        shares = self.near_zero_shares(luma)
        local = F.avg_pool2d(shares, self.window, 1, self.window // 2, count_include_pad=False)
        height = self.above_rows_and_columns(local)
        # the image's own grid: the offset most textured windows peak at (flat windows peak nowhere)
        texture = 1.0 - lower_median(local.movedim(1, -1)).movedim(-1, 1)  # (N, 1, h, w)
        weight = texture / texture.sum((2, 3), keepdim=True).clamp_min(1e-6)
        best = height.amax(1, keepdim=True)
        own = ((height >= best).float() * weight).sum((2, 3)).argmax(1)  # (N,)
        own_height = height.gather(1, own.view(-1, 1, 1, 1).expand(-1, 1, *height.shape[-2:]))
        # it is the image's when it ranks near the top in most textured windows, and nearly all the
        # others show another grid clearly: never compressed, a pasted JPEG region (even a large
        # one) leaves the rest of the image with no grid at all
        shows_own = ((height > own_height).float().sum(1, keepdim=True) < 4).float()
        shows_other = (1.0 - shows_own) * (best > self.min_grid).float()
        agree, other = (shows_own * weight).sum((2, 3)), (shows_other * weight).sum((2, 3))
        own_grid = ((agree > 0.5) & (agree + other > self.own_share)).float()  # (N, 1)
        excluded = self.beside[own] * own_grid  # (N, 64): the image's grid and the offsets beside it
        # heights lie within -1..1, so subtracting 2 takes an excluded offset out of the running
        peak = (height - 2.0 * excluded[..., None, None]).amax(1, keepdim=True)
        logit = (peak - self.peak) / self.peak_scale
        logit = F.interpolate(logit, size=luma.shape[-2:], mode="bilinear", align_corners=False)
        return {"mask_logit": logit[..., : image.shape[-2], : image.shape[-1]]}
