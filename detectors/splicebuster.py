"""`splicebuster`: a training-free splicing localizer after Splicebuster (Cozzolino, Poggi &
Verdoliva, WIFS 2015).

Every camera and processing chain leaves its own statistics in the high-pass residual. Per block,
the features are co-occurrence histograms of four neighbouring quantized, truncated third-order
residuals (horizontal and vertical); an unsupervised two-class model is fitted to the blocks of
each image, and the map is the posterior of the minority class. Differences from the paper: a
two-component Gaussian mixture (scikit-learn) instead of the Gaussian-uniform model, the 81-bin
histograms are kept unreduced by symmetry, and when the Bayesian information criterion prefers one
class the map is uniformly low (the image is taken as genuine). The per-image model fit is not a
fixed computation graph, so this detector cannot be exported to ONNX.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from datamodules.preprocess import Preprocess
from detectors.localizer import Localizer
from imageops import LUMA

THIRD_ORDER = np.array([1.0, -3.0, 3.0, -1.0])  # the paper's residual filter
CODES = 81  # 3 ** 4 patterns of four residuals truncated to {-1, 0, 1}
MIN_BLOCKS = 16  # fewer blocks than this cannot support a two-class fit
PROBABILITY_FLOOR = 1e-4


def third_order_residual(gray: np.ndarray, axis: int) -> np.ndarray:
    """The paper's residual along `axis` (1 along rows, 0 along columns), 3 pixels shorter there."""
    if axis == 0:
        return third_order_residual(gray.T, 1).T
    width = gray.shape[1]
    return sum(weight * gray[:, k : width - 3 + k] for k, weight in enumerate(THIRD_ORDER))


def cooccurrence_codes(residual: np.ndarray, quantization: float, axis: int) -> np.ndarray:
    """Codes in [0, 81) of four consecutive truncated residuals along `axis` (1 rows, 0 columns)."""
    if axis == 0:
        return cooccurrence_codes(residual.T, quantization, 1).T
    symbol = np.clip(np.rint(residual / quantization), -1, 1).astype(np.int64) + 1
    span = symbol.shape[1] - 3
    return sum(symbol[:, k : k + span] * 3**k for k in range(4))


def cell_histograms(codes: np.ndarray, cell: int, rows: int, cols: int) -> np.ndarray:
    """(rows, cols, 81) counts of the codes per `cell` x `cell` cell from the top-left corner."""
    covered = codes[: rows * cell, : cols * cell]
    cell_index = (np.arange(rows * cell) // cell)[:, None] * cols + np.arange(cols * cell)[None, :] // cell
    flat = np.bincount((cell_index * CODES + covered).ravel(), minlength=rows * cols * CODES)
    return flat.reshape(rows, cols, CODES).astype(np.float64)


class SplicebusterLocalizer(Localizer):
    """Blocks whose residual co-occurrences form the minority of a two-class model score high.

    `block`: block side in pixels (blocks overlap by half); `quantization`: the residual step before
    truncation to {-1, 0, 1} (8-bit units), or None for the image's median absolute residual (the
    three symbols then about equally frequent whatever the image's noise level); `components`: PCA
    dimensions the two-class model is
    fitted in; `seed`: the mixture's initialization, so a map is reproducible.
    """

    fit_without_gradients = True  # no parameter to train: calibrated on genuine images only
    onnx_export_refusal = (
        "splicebuster fits a two-class model to each image's blocks (scikit-learn "
        "GaussianMixture), which is not a fixed graph ONNX can express; run it with "
        "infer.py from its checkpoint instead"
    )

    def __init__(
        self,
        block: int = 32,
        quantization: float | None = None,
        components: int = 8,
        seed: int = 0,
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
        if block < 8 or block % 2:
            raise ValueError(f"splicebuster block must be an even number of pixels >= 8, got {block}")
        if (quantization is not None and quantization <= 0) or components < 1:
            raise ValueError("splicebuster quantization (or null) and components must be positive")
        self.block = int(block)
        self.quantization = None if quantization is None else float(quantization)
        self.components, self.seed = int(components), int(seed)
        # alone, an image with too few blocks is refused; as one evidence map of several (training
        # crops of 64 px), its map is uniformly low there
        self.standalone = True

    @property
    def min_image_side(self) -> int:
        """Alone, the smallest square side with `MIN_BLOCKS` blocks (a strip may have them with a
        shorter side: blocks are counted); among evidence maps, any."""
        return (math.isqrt(MIN_BLOCKS - 1) + 2) * (self.block // 2) + 6 if self.standalone else 1

    @property
    def score_ceiling(self) -> float:
        """The highest image score it gives (its map is clipped): a threshold above it flags nothing."""
        return 1.0 - PROBABILITY_FLOOR

    def block_features(self, gray: np.ndarray) -> np.ndarray:
        """(rows, cols, 162) square-rooted normalized co-occurrence histograms per block."""
        cell = self.block // 2
        if min(gray.shape) < self.block + 6:  # under two cells of co-occurrences each way: no block
            return np.zeros((0, 0, 2 * CODES))
        residuals = [third_order_residual(gray, axis) for axis in (1, 0)]
        step = self.quantization
        if step is None:
            step = max(float(np.median(np.abs(np.concatenate([r.ravel() for r in residuals])))), 0.5)
        horizontal, vertical = (cooccurrence_codes(r, step, axis) for r, axis in zip(residuals, (1, 0)))
        rows = min(horizontal.shape[0], vertical.shape[0]) // cell
        cols = min(horizontal.shape[1], vertical.shape[1]) // cell
        if rows < 2 or cols < 2:
            return np.zeros((0, 0, 2 * CODES))
        cells = np.concatenate(
            [cell_histograms(horizontal, cell, rows, cols), cell_histograms(vertical, cell, rows, cols)], axis=2
        )
        blocks = cells[:-1, :-1] + cells[1:, :-1] + cells[:-1, 1:] + cells[1:, 1:]
        return np.sqrt(blocks / blocks.sum(axis=2, keepdims=True).clip(min=1.0))

    def minority_posterior(self, features: np.ndarray) -> np.ndarray:
        """(rows, cols) posterior of the smaller class; uniformly low when one class fits better."""
        from sklearn.decomposition import PCA
        from sklearn.mixture import GaussianMixture

        rows, cols = features.shape[:2]
        flat = features.reshape(rows * cols, -1)
        low = np.full((rows, cols), PROBABILITY_FLOOR)
        if rows * cols < MIN_BLOCKS or np.ptp(flat, axis=0).max() == 0:
            return low
        dims = min(self.components, rows * cols // 4, flat.shape[1])
        reduced = PCA(dims, random_state=self.seed).fit_transform(flat)
        one = GaussianMixture(1, covariance_type="full", reg_covar=1e-4, random_state=self.seed).fit(reduced)
        two = GaussianMixture(2, covariance_type="full", reg_covar=1e-4, random_state=self.seed, n_init=2).fit(reduced)
        if two.bic(reduced) >= one.bic(reduced):
            return low
        minority = int(np.argmin(two.weights_))
        return two.predict_proba(reduced)[:, minority].reshape(rows, cols)

    @torch.no_grad()
    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        height, width = image.shape[-2:]
        pixels = image.detach().to("cpu", torch.float64).numpy()
        maps = []
        for sample in pixels:
            gray = np.tensordot(np.asarray(LUMA), sample, axes=1) * 255.0
            features = self.block_features(gray)
            blocks = features.shape[0] * features.shape[1]
            if self.standalone and blocks < MIN_BLOCKS:  # its "no evidence" would read as a verdict
                raise ValueError(
                    f"splicebuster needs at least {MIN_BLOCKS} blocks of {self.block} px (overlapping by half) to "
                    f"fit its two classes; a {height} x {width} image has {blocks}"
                )
            if features.size == 0:
                posterior = np.full((1, 1), PROBABILITY_FLOOR)
                covered = (height, width)
            else:
                posterior = self.minority_posterior(features)
                cell = self.block // 2
                covered = ((posterior.shape[0] + 1) * cell, (posterior.shape[1] + 1) * cell)
            probability = torch.from_numpy(posterior).clip(PROBABILITY_FLOOR, 1 - PROBABILITY_FLOOR)
            logit = torch.logit(probability).float()[None, None]
            # block centres lie `cell` apart from `cell` in: resize over the covered part, then
            # replicate beyond it
            logit = F.interpolate(logit, size=covered, mode="bilinear", align_corners=False)
            logit = F.pad(logit, (0, width - covered[1], 0, height - covered[0]), mode="replicate")
            maps.append(logit[..., :height, :width])
        return {"mask_logit": torch.cat(maps).to(image.device, image.dtype)}
