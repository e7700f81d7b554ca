"""FraudBench App. D.2: per-generator TPR, genuine TNR, per-category balanced accuracy and F1
macro-averaged over categories, mean confidence on correct predictions, pooled threshold-free metrics."""

from __future__ import annotations

import warnings

import numpy as np

from .._checks import UndefinedMetricWarning, as_labels, as_scores, safe_div, warn_undefined
from ..image import image_metrics
from ..records import Records, column, group_names, labelled_rows, numeric


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

    Kept in one piece: it follows the benchmark's reporting recipe step by step, so it can be checked
    against the paper line by line.
    """
    cols = labelled_rows(records, label, score)
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
    conf = as_scores(numeric(cols, confidence), "confidence") if confidence else np.where(pred, s, 1.0 - s)
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
        "confidence_correct_by_generator": {g: _nanmean(conf[correct & y & (gen == g)]) for g in generators},
        "confidence_correct_genuine": _nanmean(conf[correct & ~y]),
        "pooled": image_metrics(y, s, threshold=threshold),
        "by_category": per_category,
        "n_categories": len(cats),
    }
    undefined = [k for k in ("tpr", "tnr", "balanced_accuracy", "f1") if np.isnan(out[k])]
    warn_undefined(undefined, "no category has both fakes and genuines")
    return out


def fraudbench_table(
    scored: dict[str, Records],
    genuine_scores: dict[str, object] | None = None,
    target_fpr: float = 0.05,
    threshold: float = 0.5,
) -> dict:
    """FraudBench's detector table for several detectors, at the authors' fixed threshold and at a
    threshold calibrated on genuine images the user provides, side by side.

    ``scored`` maps a detector name to its scored records (``score``, ``label``, ``group`` =
    generator, ``category``); ``genuine_scores`` maps the same names to scores of the user's own
    genuine images. The calibrated threshold flags at most ``target_fpr`` of those genuine images
    (``evaluation.calibration.calibrate_threshold``), which is how the over-rejection FraudBench
    reports for specialised detectors is remedied. Returns ``{"generators", "rows"}``; each row
    holds the detector, the threshold kind and value, per-generator TPR, genuine TNR, balanced
    accuracy and F1 (macro-averaged over categories, as ``fraudbench_protocol``).
    """
    from ..calibration import calibrate_threshold

    rows, generators = [], set()
    for name, records in scored.items():
        thresholds = [("fixed", float(threshold), None)]
        genuine = (genuine_scores or {}).get(name)
        if genuine is not None:
            genuine = as_scores(genuine, "genuine_scores")
            thresholds.append(("calibrated", calibrate_threshold(genuine, target_fpr), int(genuine.size)))
        for kind, value, n_genuine in thresholds:
            result = fraudbench_protocol(records, threshold=value)
            generators.update(result["tpr_by_generator"])
            rows.append(
                {
                    "detector": name,
                    "threshold_kind": kind,
                    "threshold": value,
                    "n_calibration_genuine": n_genuine,
                    "target_fpr": target_fpr if n_genuine else None,
                    "tpr_by_generator": result["tpr_by_generator"],
                    "tnr": result["tnr"],
                    "balanced_accuracy": result["balanced_accuracy"],
                    "f1": result["f1"],
                    "n_categories": result["n_categories"],
                }
            )
    return {"generators": sorted(generators), "rows": rows}


def fraudbench_table_markdown(table: dict) -> str:
    """The table as Markdown: one line per detector and threshold, generators as columns."""
    generators = table["generators"]

    def cell(value) -> str:
        return "-" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.3f}"

    header = ["Detector", "Threshold", *[f"TPR {g}" for g in generators], "Genuine TNR", "Balanced acc.", "F1"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table["rows"]:
        if row["threshold_kind"] == "fixed":
            threshold = f"{row['threshold']:g} (fixed)"
        else:  # over 1: above every score, nothing flagged (it would read "1", which 1.0 scores reach)
            value = "above 1" if row["threshold"] > 1.0 else f"{row['threshold']:.4g}"
            threshold = f"{value} (FPR <= {row['target_fpr']:g} on {row['n_calibration_genuine']} genuine)"
        values = [row["tpr_by_generator"].get(g) for g in generators]
        lines.append(
            "| "
            + " | ".join(
                [
                    row["detector"],
                    threshold,
                    *map(cell, values),
                    cell(row["tnr"]),
                    cell(row["balanced_accuracy"]),
                    cell(row["f1"]),
                ]
            )
            + " |"
        )
    note = (
        "TPR per generator and genuine TNR are averaged over the categories where they occur; "
        "balanced accuracy (mean of TPR and TNR) and F1 are computed per category, then averaged."
    )
    return "\n".join(lines) + "\n\n" + note + "\n"
