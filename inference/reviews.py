"""Verdicts per review: a submission, a listing or a case made of several images (FraudBench's
multi-image setting), scored from its images' rows with `max`, `mean` or `noisy_or`.

The review file is recomputed from the whole results file at the end of every run and replaced
atomically, so a resumed run gives the same reviews as an uninterrupted one.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from datamodules.records import Record
from evaluation.protocols.review import AGGREGATIONS, aggregate_reviews
from evaluation.records import TRUTH_COLUMN
from inference.csv_cells import write_csv_rows

REVIEW_COLUMNS = ("review", "score", "label", "threshold", "n_images", "most_suspicious", "decision_score")
# the review report's axis where decision_score is not the score (a review decided at its own threshold)
DECISION_SCORE = "decision_score (score - the review's threshold + the global threshold)"
RECORD_FIELDS = {f.name for f in fields(Record)} - {"path"}

log = logging.getLogger(__name__)


def manifest_column(manifest: Path, column: str) -> dict[str, str]:
    """`path -> value` of any column of a CSV / JSONL manifest (paths resolved as the manifest's are)."""
    with manifest.open(newline="", encoding="utf-8-sig") as handle:
        rows = (
            [json.loads(line) for line in handle if line.strip()]
            if manifest.suffix.lower() in (".jsonl", ".ndjson")
            else list(csv.DictReader(handle))
        )
    if rows and column not in rows[0]:
        raise ValueError(
            f"group_by={column!r}: the manifest has no such column (columns: {', '.join(rows[0])}; "
            "or use group_by=parent for the image's folder)"
        )
    resolve = lambda p: p if os.path.isabs(p) else str(manifest.parent / p)  # noqa: E731
    return {resolve(str(row["path"]).strip()): str(row.get(column) or "").strip() for row in rows}


def review_ids(records: Sequence[Record], group_by: str, input: str | os.PathLike) -> dict[str, str]:
    """`path -> review id` from a record field (`review`, `source`, `group`...), `parent` (the
    image's folder) or any other column of a manifest input. An empty id makes a review of its own."""
    if group_by == "parent":
        return {r.path: str(Path(r.path).parent) for r in records}
    if group_by in RECORD_FIELDS:
        return {r.path: getattr(r, group_by) or "" for r in records}
    input = Path(input)
    if input.is_file() and input.suffix.lower() in (".csv", ".jsonl", ".ndjson"):
        return manifest_column(input, group_by)
    raise ValueError(
        f"group_by={group_by!r} needs a manifest with that column; without one use "
        f"group_by=parent or one of {sorted(RECORD_FIELDS)}"
    )


def page_groups(
    records: Sequence[Record], group_by: str | None, input: str | os.PathLike
) -> tuple[dict[str, str], str]:
    """Each image's group on the report page, and the name of its column: the `group_by` grouping
    whose verdicts the page shows; without `group_by`, the input's own `review` ids (else its
    `group` ids), named as such, so a reader can still filter by them. No ids: no column."""
    if group_by:
        return review_ids(records, group_by, input), "folder" if group_by == "parent" else group_by
    for field in ("review", "group"):
        ids = {r.path: getattr(r, field) or "" for r in records}
        if any(ids.values()):
            return ids, field
    return {}, "group"


def check_group_by(records: Sequence[Record], group_by: str, input: str | os.PathLike) -> None:
    """`group_by` read before anything is scored: a column the manifest lacks is refused then, not
    after the scoring run; a field no input has (`review` over a folder) is said, since each image
    then makes a review of its own."""
    if not any(review_ids(records, group_by, input).values()):
        log.warning("group_by=%s: no input has one, so each image is a review of its own", group_by)


def review_rows(
    results: Sequence[dict[str, Any]],
    ids: dict[str, str],
    method: str,
    threshold: float,
    labels: dict[str, int] | None = None,
    own_threshold: Callable[[str], float] | None = None,
) -> list[dict[str, Any]]:
    """One row per review with a scored image, in order of first appearance; with `labels` each
    row also gets `true_label` (a review is fake when any of its images is).

    `own_threshold` (a model calibrated by category): each image's threshold. A review whose images
    share one is decided at it; `max` over images of several takes the image furthest over its own
    (flagged when any image is); `mean` and `noisy_or` over several fall back to `threshold`. Each
    row says the threshold it was decided at, and its `decision_score`: its score read against
    `threshold` (score - its threshold + `threshold`), which ranks reviews decided at different
    thresholds on one scale (their raw scores are not comparable) and is the score itself where the
    review was decided at `threshold` (always, for a model without per-category thresholds)."""
    if method not in AGGREGATIONS:
        raise ValueError(f"review_aggregation must be one of {AGGREGATIONS}, got {method!r}")
    scored = [r for r in results if r.get("status") == "ok" and r.get("score") is not None]
    if not scored:
        return []
    names = [ids.get(r["path"]) or f"<no review> {r['path']}" for r in scored]
    scores = np.asarray([r["score"] for r in scored], dtype=np.float64)
    known = labels is not None and all(r["path"] in labels for r in scored)
    truth = [labels[r["path"]] for r in scored] if known else None
    unique, aggregated, review_labels = aggregate_reviews(np.asarray(names, dtype=object), scores, truth, method)
    position = {name: i for i, name in enumerate(unique)}
    members: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        members.setdefault(name, []).append(i)
    cuts = np.asarray([own_threshold(r["path"]) if own_threshold else threshold for r in scored], np.float64)
    rows, mixed = [], 0
    for name, indices in members.items():  # in order of first appearance
        top = max(indices, key=lambda i: scores[i])
        score, cut = float(aggregated[position[name]]), float(cuts[top])
        if len(set(cuts[indices])) > 1:  # images of categories with thresholds of their own
            if method == "max":
                top = max(indices, key=lambda i: scores[i] - cuts[i])
                score, cut = float(scores[top]), float(cuts[top])
            else:
                cut, mixed = float(threshold), mixed + 1
        row = {
            "review": name,
            "score": score,
            "label": int(score >= cut),
            "threshold": cut,
            "n_images": len(indices),
            "most_suspicious": scored[top]["path"],
            "decision_score": score if cut == threshold else score - cut + threshold,
        }
        if review_labels is not None:
            row[TRUTH_COLUMN] = int(review_labels[position[name]])
        rows.append(row)
    if mixed:
        _say_mixed(mixed, method, threshold)
    return rows


def _say_mixed(mixed: int, method: str, threshold: float) -> None:
    """Reviews whose images have different thresholds were decided at the global one: said once."""
    log.warning(
        "%d review(s) hold images of categories with thresholds of their own: %s over them is decided "
        "at the global threshold %g (review_aggregation=max decides each image at its own)",
        mixed,
        method,
        threshold,
    )


def write_reviews(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """The review rows as CSV, written to a temporary file and renamed (never half-written); a review
    id or path a spreadsheet would run as a formula is kept text (`inference.csv_cells`)."""
    tmp = path.with_name(f".{path.stem}.partial.csv")
    columns = list(REVIEW_COLUMNS) + ([TRUTH_COLUMN] if rows and TRUTH_COLUMN in rows[0] else [])
    with tmp.open("w", encoding="utf-8", newline="") as handle:
        csv.DictWriter(handle, fieldnames=columns, lineterminator="\n").writeheader()
        write_csv_rows(handle, columns, rows)
    os.replace(tmp, path)
    return path


def score_reviews(
    output: Path,
    records: Sequence[Record],
    results: Sequence[dict[str, Any]],
    group_by: str,
    method: str,
    threshold: float,
    input: str | os.PathLike,
    title: str,
    own_threshold: Callable[[str], float] | None = None,
) -> dict[str, Any]:
    """`<output>.reviews.csv` and, when every review's images are labelled, review-level metrics in
    `<output>.reviews.metrics.json` with a report in `<output stem>_reviews_report/`.

    The metrics are those of the CSV's `decision_score` column (`review_rows`), so they can be
    recomputed from it; where that differs from `score` (per-category thresholds) the report names it."""
    from evaluation import report_records, write_metrics_json

    labels = {r.path: r.label for r in records if r.label is not None}
    rows = review_rows(results, review_ids(records, group_by, input), method, threshold, labels or None, own_threshold)
    path = write_reviews(output.with_suffix(".reviews.csv"), rows)
    metrics = None
    if rows and TRUTH_COLUMN in rows[0]:
        labelled = [{"path": r["review"], "label": r[TRUTH_COLUMN], "score": r["decision_score"]} for r in rows]
        report = report_records(
            output.with_name(f"{output.stem}_reviews_report"),
            labelled,
            threshold=threshold,
            title=f"{title}: reviews by {group_by} ({method})",
            score_name=DECISION_SCORE if any(r["decision_score"] != r["score"] for r in rows) else None,
        )
        metrics = {**report.metrics, "group_by": group_by, "aggregation": method}
        write_metrics_json(output.with_suffix(".reviews.metrics.json"), metrics)
    return {"path": path, "reviews": len(rows), "metrics": metrics, "rows": rows}
