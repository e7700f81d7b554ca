"""Pixel-level (localization) metrics, streamable batch by batch (definitions: docs/architecture.md, "Metric keys").

Only manipulated images (a mask with at least one positive pixel) get F1 / IoU / AUROC: a genuine
image has no positive pixel, so those are undefined there. Genuine images are scored instead by the
fraction of their pixels predicted positive (``pixel_fpr_genuine``). Probabilities are compared in
float32, the precision localizers emit; the label rule is ``positive = prob >= threshold``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from ._checks import UndefinedMetricWarning, to_numpy, warn_undefined

PIXEL_KEYS = (
    "pixel_f1",
    "pixel_iou",
    "pixel_auroc",
    "pixel_f1_best",
    "pixel_f1_pooled",
    "pixel_iou_pooled",
    "pixel_fpr_genuine",
    "n_masks",
)
# The share of genuine pixels a localizer may mark where it is chosen (a checkpoint, a threshold, the
# localization table's best entry): the bound the toolkit's localization targets are stated under.
GENUINE_PIXEL_FPR_LIMIT = 0.05
# Said next to every pixel figure the toolkit reports: which images count, which threshold.
PIXEL_PROTOCOL = (
    "pixel F1 / IoU / AUROC per manipulated image at probability 0.5, averaged over manipulated "
    "images; genuine images scored by the fraction of pixels predicted positive "
    "(pixel_fpr_genuine); _pooled sums pixel counts over the set; pixel_f1_best is a "
    "per-image oracle threshold"
)


def _squeeze_2d(x: np.ndarray, what: str) -> np.ndarray:
    while x.ndim > 2 and x.shape[0] == 1:
        x = x[0]
    if x.ndim == 3 and x.shape[-1] == 1:
        x = x[..., 0]
    if x.ndim != 2:
        raise ValueError(f"{what} must be H x W (or 1 x H x W), got shape {x.shape}")
    return x


def binarize_mask(mask) -> np.ndarray:
    """Boolean mask: bools as they are, floats >= 0.5, integers >= 128 when 0-255 else >= 1."""
    m = _squeeze_2d(to_numpy(mask), "mask")
    if m.dtype == bool:
        return m
    if np.issubdtype(m.dtype, np.floating):
        return m >= 0.5
    return m >= 128 if m.size and m.max() > 1 else m >= 1


def resize_mask_nearest(mask: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize sampling pixel centres, so a mask keeps only its own values."""
    h, w = mask.shape
    if (h, w) == tuple(shape):
        return mask
    rows = np.minimum(((np.arange(shape[0]) + 0.5) * h / shape[0]).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(shape[1]) + 0.5) * w / shape[1]).astype(np.int64), w - 1)
    return mask[rows[:, None], cols[None, :]]


def boundary_band(mask: np.ndarray, tolerance: int) -> np.ndarray:
    """Pixels within ``tolerance`` (Chebyshev distance) of the mask edge, on either side.

    Hand-drawn and machine-derived masks are uncertain at the edge; TruFor's evaluation ignores
    such a band so a localizer is not punished for a one-pixel disagreement.
    """
    if tolerance <= 0 or not mask.any() or mask.all():
        return np.zeros(mask.shape, dtype=bool)
    from scipy import ndimage  # only needed with a tolerance; keeps `import evaluation` light

    size = 2 * tolerance + 1
    m = mask.astype(np.uint8)
    dilated = ndimage.maximum_filter(m, size=size, mode="constant", cval=0)
    eroded = ndimage.minimum_filter(m, size=size, mode="nearest")
    return dilated.astype(bool) & ~eroded.astype(bool)


def _ordered_keys(values: np.ndarray) -> np.ndarray:
    """uint32 keys whose unsigned order is the float32 order (so a uint64 sort can carry labels)."""
    bits = (values.astype(np.float32) + np.float32(0.0)).view(np.uint32)  # -0.0 -> +0.0
    negative = (bits & np.uint32(0x80000000)) != 0
    return np.where(negative, ~bits, bits | np.uint32(0x80000000))


def _curve_metrics(truth: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """Exact per-image AUROC and best-threshold F1 from a single uint64 sort (no argsort)."""
    key = (_ordered_keys(probs).astype(np.uint64) << np.uint64(1)) | truth.astype(np.uint64)
    key = np.sort(key)[::-1]
    value = key >> np.uint64(1)
    label = (key & np.uint64(1)).astype(np.int64)
    last = np.flatnonzero(np.append(value[1:] != value[:-1], True))
    tps = np.cumsum(label)[last]
    fps = last + 1 - tps
    n_pos = int(tps[-1])
    n_neg = int(fps[-1])
    best_f1 = float(np.max(2.0 * tps / (tps + fps + n_pos)))
    if n_neg == 0:
        return float("nan"), best_f1
    fpr = np.concatenate([[0.0], fps / n_neg])
    tpr = np.concatenate([[0.0], tps / n_pos])
    auroc = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1])) / 2.0)
    return auroc, best_f1


@dataclass
class PixelMetricAccumulator:
    """Accumulate pixel metrics image by image; ``compute()`` once at the end.

    Keeps only a few numbers per image, so a whole test set never sits in memory.
    ``per_image_curves=False`` skips the per-image sort behind ``pixel_auroc`` and
    ``pixel_f1_best`` (reported NaN then) for fast validation loops. With ``boundary_tolerance``, an
    image whose whole true mask lies in the ignored band (no wider than twice the tolerance) has no
    positive pixel left to find: its F1 / IoU / AUROC are undefined, so it is left out of the
    manipulated-image figures, per-image means and pooled counts alike (the pooled sums stay those
    of the images averaged, as ``bootstrap_pixel_ci`` resamples them), and counted in a warning.
    """

    threshold: float = 0.5
    boundary_tolerance: int = 0
    per_image_curves: bool = True
    f1: list = field(default_factory=list, init=False, repr=False)
    iou: list = field(default_factory=list, init=False, repr=False)
    auroc: list = field(default_factory=list, init=False, repr=False)
    f1_best: list = field(default_factory=list, init=False, repr=False)
    counts: list = field(default_factory=list, init=False, repr=False)  # (tp, fp, fn) per image
    fpr_genuine: list = field(default_factory=list, init=False, repr=False)
    n_band_only: int = field(default=0, init=False, repr=False)  # true mask wholly in the ignored band

    def update(self, masks: Iterable, probs: Iterable) -> None:
        """Add a batch: ``masks`` and ``probs`` are N x H x W (or N x 1 x H x W) arrays/tensors or
        sequences of per-image maps. A mask that is None or empty marks a genuine image."""
        if not isinstance(masks, (list, tuple)):
            masks = to_numpy(masks) if masks is not None else [None] * len(probs)
        if not isinstance(probs, (list, tuple)):
            probs = to_numpy(probs)
        if len(masks) != len(probs):
            raise ValueError(f"got {len(masks)} masks for {len(probs)} probability maps")
        for mask, prob in zip(masks, probs):
            self.add(mask, prob)

    def add(self, mask, prob) -> None:
        """Add one image. The mask is resized (nearest) to the prediction's size when they differ."""
        p = _squeeze_2d(to_numpy(prob), "probability map").astype(np.float32, copy=False)
        if np.isnan(p).any():
            raise ValueError(f"probability map contains {int(np.isnan(p).sum())} NaN value(s)")
        if mask is None:
            m = np.zeros(p.shape, dtype=bool)
        else:
            m = resize_mask_nearest(binarize_mask(mask), p.shape)
        pred = p >= self.threshold
        if not m.any():
            self.fpr_genuine.append(float(np.count_nonzero(pred)) / max(p.size, 1))
            return
        keep = ~boundary_band(m, self.boundary_tolerance)
        m, p, pred = m[keep], p[keep], pred[keep]
        if not m.any():  # nothing to find outside the band: undefined, left out (class docstring)
            self.n_band_only += 1
            return
        tp = int(np.count_nonzero(pred & m))
        fp = int(np.count_nonzero(pred) - tp)
        fn = int(np.count_nonzero(m) - tp)
        self.counts.append((tp, fp, fn))
        self.f1.append(2 * tp / (2 * tp + fp + fn))
        self.iou.append(tp / (tp + fp + fn))
        if self.per_image_curves:
            auroc, best = _curve_metrics(m, p)
        else:
            auroc, best = float("nan"), float("nan")
        self.auroc.append(auroc)
        self.f1_best.append(best)

    def merge(self, other: "PixelMetricAccumulator") -> "PixelMetricAccumulator":
        """Combine accumulators filled on different workers / shards."""
        for name in ("f1", "iou", "auroc", "f1_best", "counts", "fpr_genuine"):
            getattr(self, name).extend(getattr(other, name))
        self.n_band_only += other.n_band_only
        return self

    def compute(self) -> dict[str, float]:
        """Per-image means over manipulated images, pooled counts, genuine FPR, ``n_masks``."""
        nan = float("nan")
        n = len(self.counts)
        out = dict.fromkeys(PIXEL_KEYS, nan)
        if n:
            tp, fp, fn = np.sum(np.asarray(self.counts, dtype=np.int64), axis=0)
            out["pixel_f1"] = float(np.mean(self.f1))
            out["pixel_iou"] = float(np.mean(self.iou))
            out["pixel_f1_pooled"] = float(2 * tp / (2 * tp + fp + fn))
            out["pixel_iou_pooled"] = float(tp / (tp + fp + fn))
            aurocs = np.asarray(self.auroc, dtype=float)
            if np.isfinite(aurocs).any():
                out["pixel_auroc"] = float(np.nanmean(aurocs))
            if self.per_image_curves:
                out["pixel_f1_best"] = float(np.mean(self.f1_best))
        if self.fpr_genuine:
            out["pixel_fpr_genuine"] = float(np.mean(self.fpr_genuine))
        out["n_masks"] = n
        if self.n_band_only:
            warnings.warn(
                f"{self.n_band_only} manipulated image(s) left out of the pixel figures: the whole true mask lies "
                f"within the {self.boundary_tolerance} px boundary band ignored, leaving no positive pixel to score",
                UndefinedMetricWarning,
                stacklevel=2,
            )
        skipped = () if self.per_image_curves else ("pixel_auroc", "pixel_f1_best")
        undefined = [k for k, v in out.items() if isinstance(v, float) and np.isnan(v) and k not in skipped]
        warn_undefined(undefined, f"{n} manipulated and {len(self.fpr_genuine)} genuine images")
        return out


def f1_within_genuine_fpr(metrics: dict[str, float], limit: float = GENUINE_PIXEL_FPR_LIMIT) -> float:
    """A selection score from `compute()`'s metrics: pixel F1 while the genuine images have at most
    `limit` of their pixels marked, else minus the share marked. Any candidate within the bound beats
    any beyond it, and beyond it the one marking fewest wins; pixel F1 alone is blind to genuine
    images, so it favours a map that marks everything. Without genuine images: pixel F1."""
    f1, marked = metrics.get("pixel_f1", float("nan")), metrics.get("pixel_fpr_genuine", float("nan"))
    if np.isnan(marked) or marked <= limit:
        return f1
    return -marked


def pixel_metrics(
    masks, probs, threshold: float = 0.5, boundary_tolerance: int = 0, per_image_curves: bool = True
) -> dict[str, float]:
    """One-shot pixel metrics; identical to feeding the same images to ``PixelMetricAccumulator``.

    ``pixel_f1_best`` is an oracle (best threshold chosen per image with the truth in hand) and
    must be reported as such, never as the operating performance.
    """
    acc = PixelMetricAccumulator(threshold, boundary_tolerance, per_image_curves)
    acc.update(masks, probs)
    return acc.compute()
