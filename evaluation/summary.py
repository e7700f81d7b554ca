"""One call from a table of predictions to metrics, breakdowns, intervals and a written report,
so train.py and infer.py wire evaluation in two lines and cannot drift apart."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .bootstrap import bootstrap_image_ci
from .calibration import below_target_in, below_target_sentence, categories_below_target, row_thresholds
from .image import image_metrics
from .records import Records, by_group, group_names, labelled_rows

FLAGGED_BY_SOURCE_KEY = "flagged_genuine_by_source"


def breakdown_title(key: str) -> str:
    """The heading of a metrics key's table, in report.md and report.html alike ("by category")."""
    return "flagged genuine images by source" if key == FLAGGED_BY_SOURCE_KEY else key.replace("_", " ")


def figure_text(value: float | None) -> str:
    """A figure for a log line: four places, or n/a where it is undefined (None or NaN)."""
    return "n/a" if value is None or value != value else f"{value:.4f}"


def flagged_genuine_by_source(
    cols: Mapping[str, np.ndarray], label: str = "label", score: str = "score", threshold: float | np.ndarray = 0.5
) -> dict[str, dict[str, Any]] | None:
    """The genuine images at or over their threshold, by the `source` they were cut from, most first:
    ``{source: {"flagged": k, "genuine": n, "categories": {category: k}}}`` (sources with none
    flagged left out; rows without a source under ``""``); None when no row names a source (records
    carry an empty one when none is known).

    Crops of one source are not independent draws: a category under its target because of one
    source unlike the rest calls for other genuine images of that kind, one that misses on many
    sources for another threshold or model, and the per-category TNR alone cannot tell them apart.
    """
    sources = group_names(cols["source"]) if "source" in cols else np.asarray([""])
    if not (sources != "").any():
        return None
    y, s = cols[label], cols[score]
    categories = group_names(cols["category"]) if "category" in cols else np.full(y.shape, "", dtype=object)
    genuine = y == 0
    flagged = genuine & (s >= threshold)
    found = {}
    for name in set(sources[flagged].tolist()):
        hit = flagged & (sources == name)
        found[name] = {
            "flagged": int(hit.sum()),
            "genuine": int((genuine & (sources == name)).sum()),
            "categories": dict(sorted(Counter(categories[hit].tolist()).items())),
        }
    return dict(sorted(found.items(), key=lambda item: (-item[1]["flagged"], item[0])))


def evaluate_records(
    records: Records,
    threshold: float = 0.5,
    group_columns: Sequence[str] = ("group", "category"),
    n_resamples: int = 1000,
    seed: int = 0,
    label: str = "label",
    score: str = "score",
    category_thresholds: Mapping[str, float] | None = None,
    target_tnr: float | None = None,
) -> dict:
    """``{"metrics", "groups", "intervals", "n_used"}`` for a table with label and score columns,
    and ``flagged_by_source`` (`flagged_genuine_by_source`) when its rows name their ``source``.

    ``group`` breakdowns share the genuine images across generators; any other column
    (``category``, ``split``, ...) is scored on its own rows. ``n_resamples=0`` skips the bootstrap.
    ``category_thresholds`` (per-category calibration) decide each row with its category's
    threshold, ``threshold`` the rows of other categories. With ``target_tnr``, metrics gain
    ``genuine_tnr_below_target``: every category whose genuine TNR misses it, by name.
    """
    cols = labelled_rows(records, label, score)
    y, s = cols[label], cols[score]
    cut: float | np.ndarray = threshold
    if category_thresholds and "category" in cols:
        cut = row_thresholds(cols["category"], dict(category_thresholds), threshold)
    groups = {
        f"by_{name}": by_group(cols, name, shared_negatives=(name == "group"), label=label, score=score, threshold=cut)
        for name in group_columns
        if name in cols and any(group_names(cols[name]))  # a column naming no group breaks nothing down
    }
    metrics = image_metrics(y, s, threshold=cut)
    if target_tnr is not None and "by_category" in groups:
        metrics["genuine_tnr_below_target"] = categories_below_target(groups["by_category"], target_tnr)
        metrics["target_tnr"] = float(target_tnr)
    result = {
        "metrics": metrics,
        "groups": groups,
        "intervals": bootstrap_image_ci(y, s, n_resamples=n_resamples, seed=seed) if n_resamples else None,
        "n_used": int(y.size),
    }
    by_source = flagged_genuine_by_source(cols, label, score, cut)
    if by_source is not None:
        result["flagged_by_source"] = by_source
    return result


@dataclass
class Report:
    """What ``report_records`` wrote: ``metrics`` (the contents of metrics.json) and ``files``
    (written paths by name: ``metrics``, ``report``, ``roc``, ...)."""

    metrics: dict[str, Any]
    files: dict[str, Path]


def report_records(
    out_dir,
    records: Records,
    threshold: float = 0.5,
    calibrated_threshold: float | None = None,
    robustness: dict | None = None,
    contact_sheet: Sequence | None = None,
    title: str = "Evaluation report",
    label: str = "label",
    score: str = "score",
    pixel: dict | None = None,
    extra: Mapping[str, Any] | None = None,
    score_name: str | None = None,
    **evaluate_kwargs,
) -> Report:
    """``evaluate_records`` then ``write_report`` into ``out_dir`` (metrics.json, report.md, PNGs);
    returns the metrics written and the files.

    ``pixel``: a localizer's pixel metrics (``PixelMetricAccumulator.compute()``), reported beside
    the image metrics. ``calibrated_threshold`` should come from the model (calibrated on validation genuines), not
    from this test set, which would leak the answer into the operating point. ``extra``: more
    top-level keys for metrics.json. ``score_name``: what the scores are when not the model's
    probability (a review's decision score), named in report.md and on the histogram's axis.
    """
    from .report import write_report_payload  # matplotlib only when a report is written

    cols = labelled_rows(records, label, score)
    result = evaluate_records(cols, threshold=threshold, label=label, score=score, **evaluate_kwargs)
    own = evaluate_kwargs.get("category_thresholds")
    cuts = row_thresholds(cols["category"], dict(own), threshold) if own and "category" in cols else None
    metrics = dict(result["metrics"])
    below = metrics.pop("genuine_tnr_below_target", None)
    target = metrics.pop("target_tnr", None)
    payload, files = write_report_payload(
        out_dir,
        {**metrics, **(pixel or {})},
        labels=cols[label],
        scores=cols[score],
        threshold=threshold,
        calibrated_threshold=calibrated_threshold,
        intervals=result["intervals"],
        groups=result["groups"],
        robustness=robustness,
        contact_sheet=contact_sheet,
        title=title,
        extra={
            **({"genuine_tnr_below_target": below, "target_tnr": target} if below is not None else {}),
            **({FLAGGED_BY_SOURCE_KEY: result["flagged_by_source"]} if "flagged_by_source" in result else {}),
            **(extra or {}),
        },
        flagged_by_source=result.get("flagged_by_source"),
        category_thresholds=own,
        decision_thresholds=cuts,
        score_name=score_name,
        summary=below_target_sentence(below, target, result.get("flagged_by_source")) if below else None,
    )
    return Report(metrics=payload, files=files)


def run_summary(metrics: dict[str, Any], output_dir: Path) -> str:
    """The lines train.py closes with: the detector, its validation AUROC, its held-out figures (n/a
    where undefined, a pair detector's over its pairs) and the run directory."""
    keys = (
        "auroc",
        "pauroc@0.1",
        "tpr@fpr=0.01",
        "tpr",
        "tnr",
        "balanced_accuracy",
        "threshold",
        "pixel_f1",
        "pixel_iou",
        "pixel_auroc",
        "pixel_fpr_genuine",
        "chain_auroc",
        "pair_auroc",
        "pair_tpr@fpr=0.01",
        "pair_f1",
        "pair_mcc",
    )
    # a pair detector fitted without gradients keeps its held-out pair figures under "test"
    figures = metrics["test"] if isinstance(metrics.get("test"), dict) else metrics
    # a learned pair detector: its pair figures at full size, measured as dup_sift's (`duplication`)
    figures = {**figures, **{k: v for k, v in metrics.get("duplication", {}).items() if k.startswith("pair_")}}
    test = "  ".join(f"{k}={figure_text(figures[k])}" for k in keys if k in figures)
    val = metrics.get("val", {})
    val_auroc = val.get("auroc", val.get("pair_auroc"))  # a pair detector's is over its validation pairs
    val_chain = f"  chain_auroc={figure_text(val['chain_auroc'])}" if "chain_auroc" in val else ""
    below = below_target_in(metrics)
    named = f"\n  {below}" if below else ""
    return (
        f"\n  detector {metrics.get('detector')}\n  val auroc={figure_text(val_auroc)}{val_chain}"
        f"\n  test {test or '(not run)'}{named}\n  run directory {output_dir}\n"
    )
