"""Review-level (multi-image) evidence: one verdict per review from its images' scores."""

from __future__ import annotations

import numpy as np

from .._checks import as_labels, as_scores
from ..image import image_metrics
from ..records import Records, column, group_names, labelled_rows

AGGREGATIONS = ("max", "mean", "noisy_or")


def aggregate_reviews(
    review_ids, scores, labels=None, method: str = "max"
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per-review ``(ids, scores, labels)``; a review is fake when any of its images is.

    ``max`` flags a review by its most suspicious image; ``mean`` is robust to one noisy image;
    ``noisy_or`` (1 - prod(1 - p)) treats images as independent evidence, so several weak signals
    add up. Scores must be probabilities in [0, 1] for ``noisy_or``.
    """
    if method not in AGGREGATIONS:
        raise ValueError(f"method must be one of {AGGREGATIONS}, got {method!r}")
    s = as_scores(scores)
    ids = group_names(np.asarray(review_ids).reshape(-1))
    # An image without a review id is a review of its own, not part of one big anonymous review.
    missing = np.flatnonzero(ids == "")
    ids[missing] = [f"<no review> row {i}" for i in missing]
    if ids.size != s.size:
        raise ValueError(f"{ids.size} review ids for {s.size} scores")
    uniq, inverse = np.unique(ids.astype(str), return_inverse=True)
    n = uniq.size
    if method == "max":
        agg = np.full(n, -np.inf)
        np.maximum.at(agg, inverse, s)
    elif method == "mean":
        agg = np.bincount(inverse, weights=s, minlength=n) / np.bincount(inverse, minlength=n)
    else:
        if s.size and (s.min() < 0 or s.max() > 1):
            raise ValueError("noisy_or needs probabilities in [0, 1]")
        with np.errstate(divide="ignore"):
            log_keep = np.bincount(inverse, weights=np.log1p(-s), minlength=n)
        agg = -np.expm1(log_keep)
    agg_labels = None
    if labels is not None:
        y = as_labels(labels)
        agg_labels = np.zeros(n, dtype=bool)
        np.logical_or.at(agg_labels, inverse, y)
    return uniq, agg, agg_labels


def review_metrics(
    records: Records,
    method: str = "max",
    threshold: float = 0.5,
    review: str = "review",
    score: str = "score",
    label: str = "label",
    **kwargs,
) -> dict:
    """Image-level metrics computed on review verdicts (``n_pos``/``n_neg`` count reviews).

    Images without a label or a score (infer.py's failed reads) are left out of their review, as
    ``labelled_rows`` leaves them out of every protocol; a review left with no image is no review.
    """
    cols = labelled_rows(records, label, score)
    _, agg, y = aggregate_reviews(column(cols, review), cols[score], cols[label], method)
    return image_metrics(y, agg, threshold=threshold, **kwargs)
