"""MFC-Bench manipulation classification: accuracy and macro-F1 per manipulation type, and the
yes/no bias (FPR and FNR, App. E.9) that shows a detector leaning towards one answer."""

from __future__ import annotations

import numpy as np

from .._checks import as_labels, as_scores, safe_div
from ..records import Records, column, group_names, labelled_rows, numeric


def binary_verdict_metrics(labels, predictions) -> dict[str, float]:
    """Accuracy, macro-F1 over the two classes, FPR ("yes" bias) and FNR ("no" bias)."""
    y = as_labels(labels)
    p = as_labels(predictions, "predictions")
    tp = int(np.count_nonzero(p & y))
    tn = int(np.count_nonzero(~p & ~y))
    fp = int(np.count_nonzero(p & ~y))
    fn = int(np.count_nonzero(~p & y))
    f1_fake = safe_div(2 * tp, 2 * tp + fp + fn)
    f1_genuine = safe_div(2 * tn, 2 * tn + fp + fn)
    return {
        "accuracy": safe_div(tp + tn, y.size),
        "macro_f1": float(np.nanmean([f1_fake, f1_genuine])) if tp + tn + fp + fn else float("nan"),
        "fpr": safe_div(fp, fp + tn),
        "fnr": safe_div(fn, fn + tp),
        "n": int(y.size),
    }


def mfcbench_protocol(
    records: Records,
    threshold: float = 0.5,
    score: str = "score",
    label: str = "label",
    group: str = "group",
    shared_negatives: bool | None = None,
) -> dict:
    """Overall and per-manipulation-type accuracy / macro-F1 / FPR / FNR at ``threshold``.

    A class whose F1 is undefined in a subset (no such images and none predicted) is left out of
    that subset's macro-F1. Each type is scored on its own rows, fakes and genuine images, as
    MFC-Bench's Table 1 gives every manipulation subset real images of its own; with
    ``shared_negatives`` every type is scored with all genuine images instead, as when one pool of
    real images serves every subset. By default (None) each type keeps its own genuine images only
    where the genuine rows name fake types (every genuine row's non-empty group is one of them);
    genuine rows grouped otherwise (the toolkit's manifests name them "genuine") share one pool.
    """
    cols = labelled_rows(records, label, score)
    y = as_labels(numeric(cols, label))
    pred = as_scores(numeric(cols, score)) >= threshold
    out = binary_verdict_metrics(y, pred)
    if group in cols:
        names = group_names(column(cols, group))
        if shared_negatives is None:
            shared_negatives = not _genuine_name_types(names, y)
        by_type = {}
        for name in sorted(set(names[y].tolist())):
            rows = (names == name) & y
            rows = rows | ~y if shared_negatives else names == name
            by_type[name or "(none)"] = binary_verdict_metrics(y[rows], pred[rows])
        out["by_group"] = by_type
    return out


def _genuine_name_types(names: np.ndarray, fake: np.ndarray) -> bool:
    """Whether the genuine rows' groups are manipulation types (MFC-Bench's per-subset real images):
    some genuine row names one and none names anything but a fake type."""
    named = set(names[~fake].tolist()) - {""}
    return bool(named) and named <= set(names[fake].tolist())
