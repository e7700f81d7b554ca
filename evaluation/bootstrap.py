"""Bootstrap confidence intervals, so a report says how much a metric could move on another draw
of the same kind of test set. Seeded: the same call gives the same interval."""

from __future__ import annotations

import warnings
from typing import Callable, Sequence

import numpy as np

from ._checks import UndefinedMetricWarning, as_labels_scores, warn_undefined
from .image import image_metrics
from .pixel import PixelMetricAccumulator

DEFAULT_IMAGE_KEYS = ("auroc", "pauroc@0.1", "tpr@fpr=0.01", "tpr@fpr=0.05", "tpr@fpr=0.1")


def _percentile_interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    finite = samples[~np.isnan(samples)]
    if not finite.size:
        return float("nan"), float("nan")
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def bootstrap_image_ci(
    labels,
    scores,
    keys: Sequence[str] = DEFAULT_IMAGE_KEYS,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    stratified: bool = True,
    metric_fn: Callable[..., dict] = image_metrics,
    **metric_kwargs,
) -> dict[str, tuple[float, float]]:
    """Percentile intervals for image-level metrics.

    ``stratified`` resamples fakes and genuines separately, keeping the class counts of the test
    set, so every resample has both classes and AUROC is always defined. A ``threshold`` of one
    value per image is resampled with its images.
    """
    y, s = as_labels_scores(labels, scores)
    per_image = np.ndim(metric_kwargs.get("threshold", 0.5)) == 1
    thresholds = np.asarray(metric_kwargs["threshold"]) if per_image else None
    if per_image and thresholds.shape != s.shape:
        raise ValueError(f"threshold must be one value or one per score, got {thresholds.shape} for {s.shape}")
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    if not (pos.size and neg.size):
        warn_undefined([f"interval of {k}" for k in keys], "needs both classes")
        return {k: (float("nan"), float("nan")) for k in keys}
    rng = np.random.default_rng(seed)
    samples = np.full((n_resamples, len(keys)), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for b in range(n_resamples):
            if stratified:
                idx = np.concatenate([rng.choice(pos, pos.size), rng.choice(neg, neg.size)])
            else:
                idx = rng.integers(0, y.size, y.size)
            kwargs = {**metric_kwargs, "threshold": thresholds[idx]} if per_image else metric_kwargs
            m = metric_fn(y[idx], s[idx], **kwargs)
            samples[b] = [m[k] for k in keys]
    return {k: _percentile_interval(samples[:, i], confidence) for i, k in enumerate(keys)}


def bootstrap_pixel_ci(
    acc: PixelMetricAccumulator, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """Intervals for pixel F1 / IoU (per-image means) and pooled F1, resampling manipulated images."""
    n = len(acc.counts)
    keys = ("pixel_f1", "pixel_iou", "pixel_f1_pooled")
    if not n:
        warn_undefined([f"interval of {k}" for k in keys], "no manipulated images")
        return {k: (float("nan"), float("nan")) for k in keys}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    f1 = np.asarray(acc.f1)[idx].mean(axis=1)
    iou = np.asarray(acc.iou)[idx].mean(axis=1)
    counts = np.asarray(acc.counts, dtype=np.int64)[idx].sum(axis=1)  # (B, 3): tp, fp, fn
    tp, fp, fn = counts[:, 0], counts[:, 1], counts[:, 2]
    den = 2 * tp + fp + fn
    pooled = np.divide(2.0 * tp, den, out=np.full(n_resamples, np.nan), where=den > 0)
    return {
        "pixel_f1": _percentile_interval(f1, confidence),
        "pixel_iou": _percentile_interval(iou, confidence),
        "pixel_f1_pooled": _percentile_interval(pooled, confidence),
    }
