"""What a generation run made: counts per group and split, items made and reused, re-render fidelity,
and the few readable lines `generate.py` prints."""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

from datamodules.io import SPLITS


def dataset_summary(
    rows: list[dict[str, Any]],
    pairs: list[dict[str, Any]],
    fragments: list[dict[str, Any]],
    counts: Counter,
    skipped: Counter,
) -> dict[str, Any]:
    """Counts per group and split, items made and reused, and the mean re-render PSNR per group."""
    fidelity: dict[str, list[float]] = {}
    for f in fragments:
        for group, value in (f.get("psnr") or {}).items():
            fidelity.setdefault(group, []).append(value)
    return {
        "images": len(rows),
        "made": counts["made"],
        "reused": counts["reused"],
        "skipped": dict(sorted(skipped.items())),
        "by_group": dict(sorted(Counter(r["group"] for r in rows).items())),
        "by_split": {
            s: {
                "genuine": sum(r["split"] == s and r["label"] == 0 for r in rows),
                "fake": sum(r["split"] == s and r["label"] == 1 for r in rows),
            }
            for s in SPLITS
        },
        "pairs": len(pairs),
        "psnr_db": {
            g: round(sum(v) / len(v), 2) for g, v in sorted(fidelity.items()) if all(x != float("inf") for x in v)
        },
    }


def format_summary(summary: Mapping[str, Any]) -> str:
    """A few readable lines: what was made, per group and split, and what was skipped."""
    lines = [
        f"{summary['images']} images from {summary['photos']} photos ({summary['panels']} genuine panels) "
        f"in {summary['output']}; {summary['made']} items made, {summary['reused']} reused from an "
        f"earlier run, {summary['seconds']} s",
        "by group: " + ", ".join(f"{g} {n}" for g, n in summary["by_group"].items()),
        "by split: "
        + ", ".join(f"{s} {v['genuine']} genuine + {v['fake']} fake" for s, v in summary["by_split"].items()),
        f"duplication pairs: {summary['pairs']}",
    ]
    if summary["skipped"]:
        lines.append(
            "skipped (operation did not apply to the panel): "
            + ", ".join(f"{op} {n}" for op, n in summary["skipped"].items())
        )
    for variant, status in summary["generators"].items():
        lines.append(f"generator {variant}: {status}")
    if summary.get("psnr_db"):
        lines.append(
            "mean PSNR of the fakes to their source panel, per group (dB): "
            + ", ".join(f"{g} {v}" for g, v in summary["psnr_db"].items())
        )
    if summary.get("contact_sheet"):
        lines.append(f"examples of every operation: {summary['contact_sheet']}")
    return "\n".join(lines)
