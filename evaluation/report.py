"""Write an evaluation to disk: ``metrics.json`` (machine-readable, the keys of docs/architecture.md), ``report.md``
(tables a person can read, with intervals) and PNG figures."""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .atomic import atomic_path
from .calibration import NO_SOURCE
from .records import NO_GROUP
from .summary import FLAGGED_BY_SOURCE_KEY, breakdown_title

GROUP_COLUMNS = ("n_pos", "n_neg", "auroc", "pauroc@0.1", "tpr@fpr=0.05", "tpr", "tnr", "balanced_accuracy", "f1")
# why a breakdown has no row, by its title (by_group shares the genuine images: groups are their fakes)
EMPTY_BREAKDOWN = {
    "by group": "None: each group is scored as its fakes against every genuine image, and no group here holds a fake."
}
log = logging.getLogger(__name__)
ROBUSTNESS_KEYS = ("auroc", "tpr@fpr=0.05", "balanced_accuracy", "pixel_f1", "pixel_iou", "pixel_auroc")


def to_jsonable(value: Any) -> Any:
    """Plain JSON types; NaN and infinities become null (undefined), which every parser reads."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, np.ndarray)):
        return [to_jsonable(v) for v in (sorted(value) if isinstance(value, set) else value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


def write_metrics_json(path, payload: Mapping) -> Path:
    """Atomic write (temp file in the same folder + os.replace): readers never see half a file."""
    text = json.dumps(to_jsonable(payload), indent=2, allow_nan=False) + "\n"
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return Path(path)


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return "–" if not math.isfinite(value) else f"{value:.4f}"
    return str(value)


# what Markdown gives meaning to anywhere in a line: emphasis, code, links, attributes, HTML, a
# heading's closing "#", a table cell's end ("(", "!" act only after an escaped "]": left as written)
_MARKDOWN_ANYWHERE = re.compile(r"([\\`*{}\[\]<>#|]|(?<!\w)_|_(?!\w))")  # "_" inside a word acts in neither
_ENTITY = re.compile(r"&(?=#?\w+;)")  # "&amp;" written in a name would be shown as "&"
_LINE_START = re.compile(r"^(\d*)([-+.)])(?=\s|$)")  # a list item ("- x", "1. x") where the text starts a line


def markdown_text(text: Any) -> str:
    """Text from the data (group, category and source names, paths) as report.md shows it: the
    characters Markdown gives meaning to backslash-escaped where they could act, so that a viewer
    shows the name as text (no emphasis, link or HTML) and a "|" does not split a table cell, while
    the raw file still reads as the name was written (HTML entities would show there as "&amp;")."""
    escaped = _MARKDOWN_ANYWHERE.sub(r"\\\1", " ".join(str(text).splitlines()))
    return _LINE_START.sub(r"\1\\\2", _ENTITY.sub(r"\\&", escaped))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table; text cells as given (names from the data arrive escaped, `markdown_text`:
    figures formatted here, "0.5000" or "[0.33, 0.65]", read as written), numbers formatted."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    cells = [[v if isinstance(v, str) else _fmt(v) for v in row] for row in rows]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return lines


def _overall_section(metrics: Mapping, intervals: Mapping | None, confidence_note: str) -> list[str]:
    scalars = [(k, v) for k, v in metrics.items() if not isinstance(v, Mapping)]
    rows = []
    for key, value in scalars:
        ci = (intervals or {}).get(key)
        ci_text = f"[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci is not None else ""
        name = f"{key} (oracle: best threshold per image)" if key == "pixel_f1_best" else key
        rows.append((name, _fmt(value), ci_text))
    header = ("metric", "value", confidence_note) if intervals else ("metric", "value")
    return _table(header, rows if intervals else [r[:2] for r in rows])


def _group_section(title: str, groups: Mapping[str, Mapping]) -> list[str]:
    if not groups:  # a header without rows reads as a bug: say why the breakdown is empty
        return [f"### {title}", "", EMPTY_BREAKDOWN.get(title, "No row names one."), ""]
    columns = [c for c in GROUP_COLUMNS if any(c in g for g in groups.values())]
    if not columns:  # not image metrics (e.g. MFC-Bench per type): show whatever scalars exist
        columns = sorted({k for g in groups.values() for k, v in g.items() if not isinstance(v, Mapping)})
    rows = [[markdown_text(name)] + [_fmt(g.get(c)) for c in columns] for name, g in groups.items()]
    return [f"### {title}", "", *_table([title.split(" ")[-1]] + list(columns), rows), ""]


def _flagged_by_source_section(flagged: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Which sources the flagged genuine images come from: one odd source moves all its crops."""
    lines = [f"### {breakdown_title(FLAGGED_BY_SOURCE_KEY)}", ""]
    if not flagged:
        return [*lines, "No genuine image at or over its threshold.", ""]
    total = sum(int(entry["flagged"]) for entry in flagged.values())
    lines += [
        f"{total} genuine image{'s' if total != 1 else ''} at or over the threshold, from {len(flagged)} "
        f"source{'s' if len(flagged) != 1 else ''}. Crops of one source are not independent: where a "
        "category misses its target through one source, it needs more genuine images like that source.",
        "",
    ]
    rows = [
        [
            markdown_text(name or NO_SOURCE),
            entry["flagged"],
            entry["genuine"],
            ", ".join(f"{markdown_text(category or NO_GROUP)} {n}" for category, n in entry["categories"].items()),
        ]
        for name, entry in flagged.items()
    ]
    return [*lines, *_table(["source", "flagged", "genuine images", "flagged by category"], rows), ""]


def _robustness_section(robustness: Mapping) -> list[str]:
    lines = ["## Robustness", ""]
    for name, curve in robustness.get("curves", {}).items():
        keys = [k for k in ROBUSTNESS_KEYS if k in curve["metrics"]] or list(curve["metrics"])
        rows = [
            [f"{level:g}"] + [_fmt(curve["metrics"][k][i]) for k in keys] for i, level in enumerate(curve["levels"])
        ]
        codec = [f"JPEG encoder: {curve['codec']}.", ""] if curve.get("codec") else []
        lines += [f"### {name}", "", *codec, *_table(["level"] + keys, rows), ""]
    return lines


def write_report(out_dir, metrics: Mapping[str, Any], **kwargs: Any) -> dict[str, Path]:
    """Write ``metrics.json``, ``report.md`` and whichever figures the inputs allow.

    ``metrics``: flat metric dict (image and/or pixel keys). ``groups``: breakdowns such as
    ``{"by_group": by_group(...), "by_category": by_category(...)}``, nested into metrics.json
    under their names (docs/architecture.md, "Metric keys"). ``intervals``: ``{key: (low, high)}``
    from ``evaluation.bootstrap``. ``labels`` + ``scores`` give the ROC and histogram figures;
    ``robustness`` is ``robustness_curves``' result; ``contact_sheet`` items are
    ``(image, true_mask, prob_map)``; ``extra`` holds more top-level keys for metrics.json (they win
    over computed ones). Returns the written paths by name. Undefined values are null in JSON and
    "–" in the report.
    """
    return write_report_payload(out_dir, metrics, **kwargs)[1]


def write_report_payload(
    out_dir,
    metrics: Mapping[str, Any],
    labels=None,
    scores=None,
    threshold: float | None = None,
    calibrated_threshold: float | None = None,
    intervals: Mapping[str, Sequence[float]] | None = None,
    groups: Mapping[str, Mapping[str, Mapping]] | None = None,
    robustness: Mapping | None = None,
    contact_sheet: Sequence | None = None,
    title: str = "Evaluation report",
    confidence: float = 0.95,
    extra: Mapping[str, Any] | None = None,
    category_thresholds: Mapping[str, float] | None = None,
    summary: str | None = None,
    flagged_by_source: Mapping[str, Mapping[str, Any]] | None = None,
    decision_thresholds: Sequence[float] | np.ndarray | None = None,
    score_name: str | None = None,
) -> tuple[dict[str, Any], dict[str, Path]]:
    """``write_report``, also returning what metrics.json holds (before JSON's NaN -> null), so
    callers keep the metrics in memory instead of reading their own file back.
    ``category_thresholds``: the per-category thresholds the rows were decided with;
    ``summary``: a sentence report.md shows first (a category that misses its target);
    ``flagged_by_source``: the flagged genuine images by source (`flagged_genuine_by_source`),
    shown after the breakdowns; ``decision_thresholds``: each row's threshold (one per label), so the
    figures mark the operating point the rows were decided at; ``score_name``: what the scores are when
    not the model's probability of fake, said under the thresholds and on the histogram's axis."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    op = threshold if threshold is not None else 0.5
    written, figures = _write_figures(
        out, labels, scores, (op, calibrated_threshold, decision_thresholds), robustness, contact_sheet, score_name
    )

    payload: dict[str, Any] = dict(metrics)
    for name, table in (groups or {}).items():
        payload[name] = table
    if intervals:
        payload["intervals"] = {k: list(v) for k, v in intervals.items()}
        payload["interval_confidence"] = confidence
    payload["threshold"] = threshold
    payload["calibrated_threshold"] = calibrated_threshold
    if category_thresholds:
        payload["category_thresholds"] = dict(category_thresholds)
    if robustness is not None:
        payload["robustness"] = robustness
    for key, value in (extra or {}).items():  # more keys; a figure measured here is not replaced by another's
        payload.setdefault(key, value)
    written["metrics"] = write_metrics_json(out / "metrics.json", payload)

    by_source = _flagged_by_source_section(flagged_by_source) if flagged_by_source is not None else []
    scale = (threshold, calibrated_threshold, score_name)
    lines = _report_lines(title, metrics, scale, intervals, groups, robustness, figures, confidence, by_source)
    lines = _with_headline(lines, category_thresholds, summary)
    written["report"] = _atomic_text(out / "report.md", "\n".join(lines) + "\n")
    return payload, written


def _write_figures(
    out: Path, labels, scores, thresholds: tuple, robustness, contact_sheet, score_name: str | None = None
) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    """The report's PNGs (ROC, score histograms, robustness curves, contact sheet) and their captions;
    `thresholds`: the operating, the calibrated and each row's threshold (None: the operating one).
    matplotlib is imported here, not with the module: an install without it (the torch-free one)
    still writes the tables (and calibrate.py its report), with one line saying the figures are left out."""
    written: dict[str, Path] = {}
    figures: list[tuple[str, str]] = []
    wanted = (labels is not None and scores is not None) or robustness is not None or bool(contact_sheet)
    if not wanted:
        return written, figures
    try:
        from . import plots
    except ModuleNotFoundError as missing:
        if (missing.name or "").split(".")[0] != "matplotlib":
            raise
        log.warning(
            "the report's figures are left out: matplotlib is not installed (pip install matplotlib); "
            "metrics.json and report.md are written without them"
        )
        return written, figures
    threshold = thresholds[0]
    if labels is not None and scores is not None:
        written["roc"] = plots.plot_roc(out / "roc.png", labels, scores, *thresholds)
        written["histogram"] = plots.plot_score_histograms(
            out / "score_histogram.png", labels, scores, *thresholds, **({"xlabel": score_name} if score_name else {})
        )
        figures += [("ROC curve", "roc.png"), ("Score distributions", "score_histogram.png")]
    if robustness is not None:
        written["robustness_plot"] = plots.plot_robustness(out / "robustness.png", robustness)
        figures.append(("Robustness curves", "robustness.png"))
    if contact_sheet:
        written["contact_sheet"] = plots.plot_contact_sheet(out / "contact_sheet.png", contact_sheet, threshold)
        figures.append(("Localization contact sheet (green: truth, red: prediction)", "contact_sheet.png"))
    return written, figures


def _with_headline(lines: list[str], category_thresholds: Mapping[str, float] | None, summary: str | None) -> list[str]:
    """report.md's lines with the summary sentence first and the per-category thresholds beside
    the operating threshold."""
    if category_thresholds:
        lines[3:3] = [
            "Per-category thresholds (other categories use the operating threshold): "
            + ", ".join(f"{markdown_text(k)} {_fmt(v)}" for k, v in sorted(category_thresholds.items()))
        ]
    if summary:
        lines[2:2] = [f"**{markdown_text(summary[0].upper() + summary[1:])}.**", ""]
    return lines


def _report_lines(
    title: str,
    metrics: Mapping[str, Any],
    scale: tuple[float | None, float | None, str | None],
    intervals: Mapping[str, Sequence[float]] | None,
    groups: Mapping[str, Mapping[str, Mapping]] | None,
    robustness: Mapping | None,
    figures: list[tuple[str, str]],
    confidence: float,
    after_breakdowns: Sequence[str] = (),
) -> list[str]:
    """The lines of report.md: thresholds (`scale`: the operating and the calibrated threshold, and
    the name of the scores' scale where it is not the model's probability), overall table,
    breakdowns (then `after_breakdowns`), robustness, figures."""
    threshold, calibrated_threshold, score_name = scale
    lines = [f"# {markdown_text(title)}", ""]
    lines += [f"Operating threshold: {_fmt(threshold)} (predicted fake = score >= threshold)"]
    if score_name:
        lines += [f"Scores: {markdown_text(score_name)}"]
    if calibrated_threshold is not None:
        lines += [f"Calibrated threshold (from genuine scores): {_fmt(calibrated_threshold)}"]
    lines += ["", "## Overall", "", *_overall_section(metrics, intervals, f"{confidence:.0%} bootstrap interval"), ""]
    if groups:
        lines += ["## Breakdowns", ""]
        for name, table in groups.items():
            lines += _group_section(breakdown_title(name), table)
    lines += after_breakdowns
    if robustness is not None:
        lines += _robustness_section(robustness)
    if figures:
        lines += ["## Figures", ""]
        lines += [f"### {caption}\n\n![{caption}]({file})\n" for caption, file in figures]
    lines += ["", '"–" marks a metric that is undefined for this data (for example one class only).']
    return lines


def _atomic_text(path: Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def pair_figures_markdown(title: str, figures: Mapping[str, Any]) -> list[str]:
    """A pair set's figures as report.md sections: the single figures in one table, then each set of
    figures of its own (THEMIS operations, per-operation recall, per-kind rates) in a table."""

    def cell(value: Any) -> str:
        return markdown_text(value) if isinstance(value, str) else _fmt(value)

    single = {k: v for k, v in figures.items() if not isinstance(v, (Mapping, list))}
    lines = [f"## {title}", "", "| figure | value |", "| --- | --- |"]
    lines += [f"| {key} | {cell(value)} |" for key, value in single.items()]
    for key, value in figures.items():
        if not isinstance(value, Mapping) or not value:
            continue
        rows = {k: v if isinstance(v, Mapping) else {"value": v} for k, v in value.items()}
        columns = list(dict.fromkeys(c for row in rows.values() for c, v in row.items() if not isinstance(v, Mapping)))
        lines += ["", f"### {key.replace('_', ' ')}", "", f"| | {' | '.join(columns)} |"]
        lines.append("| --- |" + " --- |" * len(columns))
        lines += [f"| {name} | {' | '.join(cell(row.get(c)) for c in columns)} |" for name, row in rows.items()]
    return [*lines, ""]
