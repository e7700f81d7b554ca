"""A calibration as people read it: `<output stem>.calibration.md` beside a calibrated model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluation.calibration import rule_phrase


def calibration_report(summary: dict[str, Any], model: str, output: Path) -> str:
    """The calibration as Markdown: threshold, genuine TNR with its interval, TPR when fakes were given.
    Names from the data (categories, paths) are Markdown-escaped (`markdown_text`): a `|` would split a
    cell, markup render."""
    from evaluation.report import markdown_text

    low, high = summary["tnr_interval"]
    level = f"{summary['confidence']:.0%}"
    lines = [
        f"# Calibration of {markdown_text(model)}",
        "",
        f"Threshold {summary['threshold']:.6g} (was {summary['previous_threshold']:.6g}) for a target FPR of "
        f"{summary['target_fpr']:g}{rule_phrase(summary.get('rule'), summary['confidence'])} on "
        f"{summary['n_genuine']} genuine images from {markdown_text(summary['input'])} "
        f"({summary['date']}); written to {markdown_text(output)}.",
        "",
        f"- Genuine TNR: {summary['tnr']:.4f} ({summary['n_genuine'] - summary['false_positives']}/"
        f"{summary['n_genuine']}), {level} Clopper-Pearson interval [{low:.4f}, {high:.4f}]",
    ]
    if "tpr" in summary:
        tlow, thigh = summary["tpr_interval"]
        lines.append(
            f"- TPR on {summary['n_fake']} fakes: {summary['tpr']:.4f}, {level} Clopper-Pearson interval "
            f"[{tlow:.4f}, {thigh:.4f}]"
        )
    else:
        lines.append("- TPR: no fakes were given (a labelled manifest with label 1 rows adds it)")
    if summary.get("by_category"):
        lines += [
            "",
            "## Per category",
            "",
            "| category | threshold | genuine | TNR | TNR interval | fakes | TPR |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, own in summary["by_category"].items():
            tlow, thigh = own["tnr_interval"]
            lines.append(
                f"| {markdown_text(name)} | {own['threshold']:.6g} | {own['n_genuine']} | {own['tnr']:.4f} | "
                f"[{tlow:.4f}, {thigh:.4f}] | {own.get('n_fake', 0)} | "
                + (f"{own['tpr']:.4f} |" if "tpr" in own else "– |")
            )
        lines += ["", "Inputs whose category is not listed are decided with the global threshold."]
    lines += [
        "",
        "These figures hold for images like the calibration set; recalibrate when the images change "
        "(new cameras, compression, platforms or editing tools).",
    ]
    return "\n".join(lines) + "\n"
