"""FraudBench App. D.2: per-generator TPR, genuine TNR, per-category balanced accuracy and F1
macro-averaged over categories, mean confidence on correct predictions, pooled threshold-free metrics."""

from __future__ import annotations

import warnings

import numpy as np

from .._checks import UndefinedMetricWarning, as_labels, as_scores, safe_div, warn_undefined
from ..image import image_metrics
from ..records import Records, as_columns, column, group_names, numeric


def _nanmean(values) -> float:
    arr = np.asarray(list(values), dtype=float)
    arr = arr[~np.isnan(arr)]
    return float(arr.mean()) if arr.size else float("nan")


def fraudbench_protocol(
    records: Records,
    threshold: float = 0.5,
    score: str = "score",
    label: str = "label",
    group: str = "group",
    category: str | None = "category",
    confidence: str | None = None,
) -> dict:
    """Score a detector the way FraudBench reports it.

    Per category: TPR on each generator's fakes, TPR on all its fakes, TNR on its genuines, balanced
    accuracy = mean(all-fakes TPR, TNR), F1 of the fake class. Overall values are means over
    categories (large categories must not dominate), per-generator TPR likewise over the categories
    where that generator occurs. Threshold-free metrics (AUROC, pAUROC, TPR@FPR) are pooled.
    ``confidence`` names a column of model-reported confidences; by default a detector's confidence
    in its own verdict is used (score if it says fake, 1 - score if it says genuine).
    Records without a category column (or ``category=None``) form one category.
    """
    cols = as_columns(records)
    y = as_labels(numeric(cols, label))
    s = as_scores(numeric(cols, score))
    pred = s >= threshold
    gen = group_names(column(cols, group)) if group in cols else np.full(y.size, "", object)
    gen[gen == ""] = "(none)"
    cat = (
        group_names(column(cols, category))
        if category is not None and category in cols
        else np.full(y.size, "all", dtype=object)
    )
    conf = (
        as_scores(numeric(cols, confidence), "confidence")
        if confidence
        else np.where(pred, s, 1.0 - s)
    )
    generators = sorted(set(gen[y].tolist()))
    per_category: dict[str, dict] = {}
    with warnings.catch_warnings():
        # Sparse category x generator cells are expected ("-" in the paper); warn once below.
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for c in sorted(set(cat.tolist())):
            in_c = cat == c
            fake, real = in_c & y, in_c & ~y
            tp = int(np.count_nonzero(pred & fake))
            fp = int(np.count_nonzero(pred & real))
            tpr = safe_div(tp, np.count_nonzero(fake))
            tnr = safe_div(np.count_nonzero(real) - fp, np.count_nonzero(real))
            per_category[c or "(none)"] = {
                "tpr": tpr,
                "tnr": tnr,
                "balanced_accuracy": (tpr + tnr) / 2.0,
                "f1": safe_div(2 * tp, 2 * tp + fp + (np.count_nonzero(fake) - tp)),
                "tpr_by_generator": {
                    g: safe_div(np.count_nonzero(pred & of_g), np.count_nonzero(of_g))
                    for g in generators
                    for of_g in [fake & (gen == g)]
                },
                "n_pos": int(np.count_nonzero(fake)),
                "n_neg": int(np.count_nonzero(real)),
            }
    cats = list(per_category.values())
    correct = pred == y
    out: dict = {
        "tpr_by_generator": {g: _nanmean(c["tpr_by_generator"][g] for c in cats) for g in generators},
        "tpr": _nanmean(c["tpr"] for c in cats),
        "tnr": _nanmean(c["tnr"] for c in cats),
        "balanced_accuracy": _nanmean(c["balanced_accuracy"] for c in cats),
        "f1": _nanmean(c["f1"] for c in cats),
        "confidence_correct_by_generator": {
            g: _nanmean(conf[correct & y & (gen == g)]) for g in generators
        },
        "confidence_correct_genuine": _nanmean(conf[correct & ~y]),
        "pooled": image_metrics(y, s, threshold=threshold),
        "by_category": per_category,
        "n_categories": len(cats),
    }
    undefined = [k for k in ("tpr", "tnr", "balanced_accuracy", "f1") if np.isnan(out[k])]
    warn_undefined(undefined, "no category has both fakes and genuines")
    return out
