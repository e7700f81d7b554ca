"""The tables of `benchmarks.localization_table` as Markdown (results.json -> text)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from benchmarks.localization_table import CONDITIONS, MAX_GENUINE_FPR, OPERATIONS

OPERATION_NAMES = {
    "copy_move": "Copy-move",
    "splicing": "Splicing",
    "inpainting": "Inpainting",
    "region_edit": "AI region edit",
    "damage": "Damage",
}
CONDITION_NAMES = {"clean": "", "jpeg75": " JPEG 75", "rescale0.75": " x0.75"}


def cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def operation_table(op: str, localizers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Rows: localizer x kind group; columns: clean figures, F1 at the validation threshold, and
    pixel F1 / AUROC after each perturbation."""
    head = ["localizer", "kinds", "masks / genuine", "F1", "AUROC", "image AUROC", "genuine FPR", "F1 (val thr)"]
    for condition in CONDITIONS:
        if condition != "clean":
            head += [f"F1{CONDITION_NAMES[condition]}", f"AUROC{CONDITION_NAMES[condition]}"]
    lines = [f"#### {OPERATION_NAMES[op]}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, result in localizers.items():
        clean = result["test"]["clean"].get(op, {})
        chosen = result["test_at_chosen_threshold"].get(op, {})
        for kind, row in clean.items():
            cells = [
                name,
                kind,
                f"{row['n_masks']} / {row['n_genuine']}",
                cell(row["pixel_f1"]),
                cell(row["pixel_auroc"]),
                cell(row["image_auroc"]),
                cell(row["pixel_fpr_genuine"]),
                cell(chosen.get(kind, {}).get("pixel_f1")),
            ]
            for condition in CONDITIONS:
                if condition != "clean":
                    other = result["test"][condition].get(op, {}).get(kind, {})
                    cells += [cell(other.get("pixel_f1")), cell(other.get("pixel_auroc"))]
            lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def best_table(best: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Per operation: the localizer chosen on validation, its test F1 over all kinds and per kind
    group, genuine FPR, the target and whether it holds."""
    kinds = sorted({k for entry in best.values() for k in entry["test"] if k != "all"})
    head = ["operation", "best on validation", "val F1", "test F1", *(f"F1 {k}" for k in kinds)]
    head += ["genuine FPR", "target", "holds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op in OPERATIONS:
        if op not in best:
            continue
        entry = best[op]
        overall = entry["test"].get("all", {})
        cells = [
            OPERATION_NAMES[op],
            entry["localizer"],
            cell(entry["val_pixel_f1"]),
            cell(overall.get("pixel_f1")),
            *(cell(entry["test"].get(k, {}).get("pixel_f1")) for k in kinds),
            cell(overall.get("pixel_fpr_genuine")),
            "none set" if entry["target"] is None else f">= {entry['target']:.1f}, FPR <= {MAX_GENUINE_FPR:.2f}",
            "-" if entry["holds"] is None else "yes" if entry["holds"] else "**no**",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def thresholds_line(localizers: Mapping[str, Mapping[str, Any]]) -> str:
    parts = []
    for name, result in localizers.items():
        chosen = result["chosen_threshold"]
        parts.append(
            f"{name} {chosen['threshold']:.2f} (validation F1 {cell(chosen['val_pixel_f1'])}, "
            f"genuine FPR {cell(chosen['val_pixel_fpr_genuine'])})"
        )
    return "Pixel thresholds chosen on the validation split (F1 (val thr) column): " + "; ".join(parts) + "."


def budget_line(localizers: Mapping[str, Mapping[str, Any]]) -> str:
    parts = [f"{name} {r['seconds_per_image']:.3f} s" for name, r in localizers.items()]
    line = "Mean seconds per clean test image (one thread): " + "; ".join(parts) + "."
    learned = [
        f"{name} {r['budget']['steps']} steps / {r['budget']['epochs']} epochs in {r['budget']['seconds'] / 60:.1f} min"
        for name, r in localizers.items()
        if r.get("learned")
    ]
    if learned:
        line += " Learned localizers trained on the train split: " + "; ".join(learned) + "."
    return line


def markdown(summary: Mapping[str, Any]) -> str:
    localizers = summary["localizers"]
    lines = [
        f"Held-out test split: {summary['n_test']} images ({summary['n_val']} in validation), split by source photo.",
        "",
        "Best entry per operation (chosen on validation among the localizers that mark at most "
        f"{MAX_GENUINE_FPR:.0%} of genuine validation pixels, measured once on test, pixel F1 at 0.5):",
        "",
        *best_table(summary["best"]),
    ]
    for op in OPERATIONS:
        if any(op in result["test"]["clean"] for result in localizers.values()):
            lines += operation_table(op, localizers)
    lines += [thresholds_line(localizers), "", budget_line(localizers)]
    return "\n".join(lines)
