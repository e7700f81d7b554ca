"""Image-level metrics (definitions: docs/architecture.md, "Metric keys") from sorted scores: 10 M scores in seconds.

Label rule everywhere: predicted fake  <=>  score >= threshold.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ._checks import as_labels_scores, safe_div, to_numpy, warn_undefined

PAUROC_MAX_FPR = 0.1
DEFAULT_FPR_LEVELS = (0.001, 0.01, 0.05, 0.1)


def roc_points(labels, scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Full ROC (no points dropped): ``fpr, tpr, thresholds`` with thresholds decreasing.

    The first point is (0, 0) at threshold +inf; point i counts every score >= thresholds[i] as
    fake, matching the label rule. Same points as ``sklearn.metrics.roc_curve(...,
    drop_intermediate=False)``. FPR (TPR) is NaN when there are no negatives (positives).
    """
    y, s = as_labels_scores(labels, scores)
    fps, tps, thr = _cumulative_counts(y, s)
    n_pos, n_neg = int(y.sum()), int(y.size - y.sum())
    fpr = fps / n_neg if n_neg else np.full(fps.shape, np.nan)
    tpr = tps / n_pos if n_pos else np.full(tps.shape, np.nan)
    return fpr, tpr, thr


def _cumulative_counts(y: np.ndarray, s: np.ndarray):
    """False/true positive counts at each distinct threshold, highest threshold first.

    Three plain sorts plus binary searches: about 3x faster than one argsort and a gather at 10 M.
    """
    pos = np.sort(s[y])
    neg = np.sort(s[~y])
    both = np.sort(s)
    # Distinct thresholds, ascending; ties must enter the ROC together.
    distinct = both[np.append(both[1:] != both[:-1], True)] if both.size else both
    tps = pos.size - np.searchsorted(pos, distinct, side="left")
    fps = neg.size - np.searchsorted(neg, distinct, side="left")
    zero = np.zeros(1, dtype=np.int64)
    return (
        np.concatenate([zero, fps[::-1]]),
        np.concatenate([zero, tps[::-1]]),
        np.concatenate([[np.inf], distinct[::-1]]),
    )


def _trapezoid(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2.0))


def _standardized_partial_auc(fpr: np.ndarray, tpr: np.ndarray, max_fpr: float) -> float:
    """McClish-corrected partial AUROC over FPR <= max_fpr: 0.5 is chance, 1 is perfect."""
    stop = int(np.searchsorted(fpr, max_fpr, side="right"))
    x = np.append(fpr[:stop], max_fpr)
    y = np.append(tpr[:stop], np.interp(max_fpr, fpr[stop - 1 : stop + 1], tpr[stop - 1 : stop + 1]))
    partial = _trapezoid(x, y)
    min_area = 0.5 * max_fpr**2
    return 0.5 * (1.0 + (partial - min_area) / (max_fpr - min_area))


def _tpr_at_fpr(fps: np.ndarray, tpr: np.ndarray, n_neg: int, level: float) -> float:
    """Largest TPR among ROC points with FPR <= level (counts compared with a float guard)."""
    allowed = level * n_neg * (1.0 + 1e-12)
    idx = int(np.searchsorted(fps, allowed, side="right")) - 1
    return float(tpr[idx])


def _level_key(level: float) -> str:
    return f"tpr@fpr={level:g}"


def image_metrics(
    labels, scores, threshold: float | np.ndarray = 0.5, fpr_levels: Sequence[float] = DEFAULT_FPR_LEVELS
) -> dict[str, float]:
    """Every image-level metric key (docs/architecture.md) as plain floats/ints (JSON-ready).

    ``threshold`` may also be one value per image (per-category thresholds: see
    ``evaluation.calibration.row_thresholds``).

    Threshold-free metrics (``auroc``, ``pauroc@0.1``, ``ap``, ``tpr@fpr=k``) are NaN with an
    ``UndefinedMetricWarning`` unless both classes are present. At the threshold, ``tpr`` needs
    positives, ``tnr`` negatives, ``balanced_accuracy`` both, and ``f1`` a non-zero
    ``2TP + FP + FN``; all four are NaN with a warning at a NaN threshold (none was calibrated).
    NaN scores and a ``threshold`` of None raise ``ValueError``.
    """
    y, s = as_labels_scores(labels, scores)
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    nan = float("nan")
    out: dict[str, float] = {}

    free_keys = ["auroc", f"pauroc@{PAUROC_MAX_FPR:g}", "ap"] + [_level_key(k) for k in fpr_levels]
    if n_pos and n_neg:
        fps, tps, _ = _cumulative_counts(y, s)
        fpr = fps / n_neg
        tpr = tps / n_pos
        out["auroc"] = _trapezoid(fpr, tpr)
        out[free_keys[1]] = _standardized_partial_auc(fpr, tpr, PAUROC_MAX_FPR)
        # AP as sum over thresholds of (recall step) x precision, no interpolation (= sklearn).
        precision = tps[1:] / (tps[1:] + fps[1:])
        out["ap"] = float(np.sum(np.diff(tpr) * precision))
        for level in fpr_levels:
            out[_level_key(level)] = _tpr_at_fpr(fps, tpr, n_neg, level)
    else:
        for key in free_keys:
            out[key] = nan
        warn_undefined(free_keys, f"needs both classes, got n_pos={n_pos}, n_neg={n_neg}")

    at, reason = _at_threshold(y, s, threshold)
    out.update(at)
    warn_undefined([k for k, v in at.items() if np.isnan(v)], reason)  # here, so it points at the caller
    out = {k: float(v) for k, v in out.items()}
    out["n_pos"] = n_pos
    out["n_neg"] = n_neg
    return out


def _at_threshold(y: np.ndarray, s: np.ndarray, threshold: float | np.ndarray) -> tuple[dict[str, float], str]:
    """TPR, TNR, balanced accuracy and F1 deciding fake where score >= threshold, and why any is NaN."""
    if threshold is None:
        raise ValueError(
            "threshold is None: tpr, tnr, balanced_accuracy and f1 need a decision threshold (one value, "
            "or one per image); pass float('nan') to report them as undefined"
        )
    threshold = np.asarray(threshold, dtype=np.float64)
    if threshold.ndim and threshold.shape != s.shape:
        raise ValueError(f"threshold must be one value or one per score, got {threshold.shape} for {s.shape}")
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if np.isnan(threshold).any():  # no decision was made: nothing is flagged, nothing is kept
        return dict.fromkeys(("tpr", "tnr", "balanced_accuracy", "f1"), float("nan")), "the threshold is NaN"
    pred = s >= threshold
    tp = int(np.count_nonzero(pred & y))
    fp = int(np.count_nonzero(pred) - tp)
    fn = n_pos - tp
    tn = n_neg - fp
    out = {"tpr": safe_div(tp, n_pos), "tnr": safe_div(tn, n_neg)}
    out["balanced_accuracy"] = (out["tpr"] + out["tnr"]) / 2.0
    out["f1"] = safe_div(2 * tp, 2 * tp + fp + fn)
    at = f"{float(threshold):g}" if threshold.ndim == 0 else "per image"
    return out, f"at threshold {at} with n_pos={n_pos}, n_neg={n_neg}"


class ImageScoreAccumulator:
    """Collect labels and scores batch by batch (numpy or torch), then ``compute()`` once.

    Image-level metrics need the whole ranking, so scores are kept (8 bytes each); keeping them
    as flat float arrays rather than tensors keeps 10 M images at about 90 MB.
    """

    def __init__(self) -> None:
        self._labels: list[np.ndarray] = []
        self._scores: list[np.ndarray] = []

    def update(self, labels, scores) -> None:
        labels, scores = to_numpy(labels), to_numpy(scores)
        y, s = as_labels_scores(labels, scores)
        self._labels.append(y)
        self._scores.append(s)

    def reset(self) -> None:
        self._labels.clear()
        self._scores.clear()

    @property
    def labels(self) -> np.ndarray:
        return np.concatenate(self._labels) if self._labels else np.zeros(0, dtype=bool)

    @property
    def scores(self) -> np.ndarray:
        return np.concatenate(self._scores) if self._scores else np.zeros(0)

    def compute(self, threshold: float = 0.5, fpr_levels: Sequence[float] = DEFAULT_FPR_LEVELS) -> dict:
        return image_metrics(self.labels, self.scores, threshold=threshold, fpr_levels=fpr_levels)
