"""THEMIS (App. B.3): block-based localization, set-based F1 / exact match / subset partial credit
for multi-label operation sets, and the Balanced Robustness Index across models."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from .._checks import to_numpy, warn_undefined
from ..pixel import _squeeze_2d, binarize_mask, resize_mask_nearest

# Conventions for empty sets: predicting nothing when nothing is there is exact agreement (1.0).


def set_f1(predicted: Iterable, truth: Iterable) -> float:
    """2|P & T| / (|P| + |T|); 1.0 when both sets are empty."""
    p, t = set(predicted), set(truth)
    return 1.0 if not p and not t else 2.0 * len(p & t) / (len(p) + len(t))


def set_iou(predicted: Iterable, truth: Iterable) -> float:
    """|P & T| / |P | T|; 1.0 when both sets are empty."""
    p, t = set(predicted), set(truth)
    return 1.0 if not p | t else len(p & t) / len(p | t)


def exact_match(predicted: Iterable, truth: Iterable) -> float:
    return float(set(predicted) == set(truth))


def subset_partial_credit(predicted: Iterable, truth: Iterable) -> float:
    """|P & T| / |T| if P has no wrong element, else 0 (one false positive forfeits the credit)."""
    p, t = set(predicted), set(truth)
    if not t:
        return float(not p)
    return len(p & t) / len(t) if p <= t else 0.0


def multilabel_set_metrics(predicted: Sequence[Iterable], truth: Sequence[Iterable]) -> dict[str, float]:
    """Mean set-F1, exact match and subset partial credit over samples (THEMIS Table 12)."""
    if len(predicted) != len(truth):
        raise ValueError(f"{len(predicted)} predictions for {len(truth)} truths")
    if len(truth) == 0:  # `not truth` is ambiguous for a numpy array of label sets
        warn_undefined(["set_f1", "exact_match", "spc"], "no samples")
        return {"set_f1": float("nan"), "exact_match": float("nan"), "spc": float("nan"), "n": 0}
    pairs = list(zip(predicted, truth))
    return {
        "set_f1": float(np.mean([set_f1(p, t) for p, t in pairs])),
        "exact_match": float(np.mean([exact_match(p, t) for p, t in pairs])),
        "spc": float(np.mean([subset_partial_credit(p, t) for p, t in pairs])),
        "n": len(pairs),
    }


def grid_partition(shape: tuple[int, int], rows: int, cols: int) -> np.ndarray:
    """Region ids 1..rows*cols, numbered row-major, as THEMIS numbers the blocks of a panel."""
    h, w = shape
    r = np.minimum(np.arange(h) * rows // h, rows - 1)
    c = np.minimum(np.arange(w) * cols // w, cols - 1)
    return (r[:, None] * cols + c[None, :] + 1).astype(np.int32)


def forged_regions(mask, partition: np.ndarray, min_coverage: float = 0.5) -> set[int]:
    """Ids of regions whose fraction of positive pixels is >= ``min_coverage`` (> 0 when 0).

    Region id 0 in ``partition`` means "not a numbered region" and is never reported.
    """
    m = binarize_mask(mask)
    part = _squeeze_2d(to_numpy(partition), "partition").astype(np.int64)
    m = resize_mask_nearest(m, part.shape)
    size = np.bincount(part.ravel(), minlength=1)
    hits = np.bincount(part.ravel(), weights=m.ravel().astype(float), minlength=size.size)
    frac = np.divide(hits, size, out=np.zeros(size.size), where=size > 0)
    chosen = frac > 0 if min_coverage <= 0 else frac >= min_coverage
    chosen[0] = False
    return {int(i) for i in np.flatnonzero(chosen & (size > 0))}


def block_localization(
    true_mask,
    prob_map,
    partition: np.ndarray,
    threshold: float = 0.5,
    pred_coverage: float = 0.5,
    true_coverage: float = 0.0,
) -> dict:
    """Turn a pixel map into the numbered regions it flags and score them against the truth.

    The prediction is thresholded at ``threshold``; a region is predicted forged when at least
    ``pred_coverage`` of it is positive. A region is truly forged when the true mask covers at least
    ``true_coverage`` of it (at 0, the default: any overlap). Returns set IoU, set F1, exact match
    and both region lists, so a detector is scored like an MLLM answering with region numbers. A
    true mask marking no pixel scores an empty answer 1 (the empty-set convention): leave such
    manipulated images out, as ``tools.themis_blocks`` and infer.py's pixel metrics do.
    """
    prob = _squeeze_2d(to_numpy(prob_map), "probability map")
    predicted = forged_regions(prob >= threshold, partition, pred_coverage)
    truth = forged_regions(true_mask, partition, true_coverage)
    return {
        "iou": set_iou(predicted, truth),
        "f1": set_f1(predicted, truth),
        "exact_match": exact_match(predicted, truth),
        "predicted": sorted(predicted),
        "true": sorted(truth),
    }


def balanced_robustness_index(results: Mapping[str, Sequence[float]], lam: float = 0.25) -> dict[str, float]:
    """BRI_i = mean_j(s_ij) - lam * (max_j s_ij - min_j s_ij), s min-max normalized per task over
    the models compared. Rewards models that are good on every task, not excellent on one.

    ``results`` maps model name -> one score per task (same task order for every model). The
    result is in [0, 1] units (the paper prints it x 100). A task on which every model scores the
    same cannot be normalized, nor one a model has no score for (NaN), so every BRI is NaN then
    (with a warning). Models scored on different numbers of tasks are refused.
    """
    names = list(results)
    lengths = {n: len(results[n]) for n in names}
    if len(set(lengths.values())) > 1:
        said = ", ".join(f"{n}: {k}" for n, k in lengths.items())
        raise ValueError(f"balanced_robustness_index needs one score per task for every model, got {said}")
    table = np.asarray([list(results[n]) for n in names], dtype=float)
    if np.isnan(table).any():
        row, task = np.argwhere(np.isnan(table))[0]
        warn_undefined(["BRI"], f"model {names[row]!r} has no score (NaN) for task {task}")
        return {n: float("nan") for n in names}
    if table.ndim != 2 or table.shape[0] < 2:
        warn_undefined(["BRI"], "needs at least two models with the same tasks")
        return {n: float("nan") for n in names}
    lo, hi = table.min(axis=0), table.max(axis=0)
    if np.any(hi == lo):
        warn_undefined(["BRI"], "a task has the same score for every model")
        return {n: float("nan") for n in names}
    s = (table - lo) / (hi - lo)
    bri = s.mean(axis=1) - lam * (s.max(axis=1) - s.min(axis=1))
    return {n: float(b) for n, b in zip(names, bri)}
