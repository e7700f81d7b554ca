"""Two pair detectors side by side on the same held-out pairs, from their train.py runs (a script).

    python train.py detector=dup_sift data=duplication_pairs hydra.run.dir=runs/dup_sift
    python train.py detector=pairnet_tiny data=duplication_pair_images trainer=cpu hydra.run.dir=runs/pairnet_tiny
    python -m benchmarks.pair_detector_comparison runs/dup_sift/metrics.json runs/pairnet_tiny/metrics.json

Both data configs make the very same pairs (same photos, split and seed), so the two `metrics.json`
files describe the same test pairs (the script compares their counts, says when they differ and
exits 1; runs of other photos, splits or seeds do not compare): the training-free detectors keep the pair protocol under
`test`, the learned ones under `duplication` (`evaluation.protocols.duplication`). The table shows
the overall figures at each run's own threshold (calibrated to 1 % FPR on the validation negatives)
and, per kind of pair, the share flagged: the TPR of a kind of duplication, the FPR of a kind of
negative.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

OVERALL = (
    ("pairs (duplicated / not)", lambda m: f"{m['pair_n_pos']} / {m['pair_n_neg']}"),
    (
        "THEMIS set-F1 / EM / SPC (duplicated pairs, at the decision)",
        lambda m: "{set_f1:.4f} / {exact_match:.4f} / {spc:.4f}".format(**m["operations"]),
    ),
    ("pair AUROC", lambda m: f"{m['pair_auroc']:.4f}"),
    ("pair TPR at 1 % FPR (threshold-free)", lambda m: f"{m['pair_tpr@fpr=0.01']:.4f}"),
    ("pair TPR at 5 % FPR (threshold-free)", lambda m: f"{m['pair_tpr@fpr=0.05']:.4f}"),
    ("TPR / TNR at the threshold calibrated on val", lambda m: f"{m['pair_tpr']:.4f} / {m['pair_tnr']:.4f}"),
    ("mask pixel F1 (duplicated pairs, at the decision)", lambda m: f"{m['pixel_f1']:.4f}"),
    (
        "set-F1 / EM, operation head alone (`given_duplicated`)",
        lambda m: (
            "{set_f1:.4f} / {exact_match:.4f}".format(**m["given_duplicated"]["operations"])
            if "given_duplicated" in m
            else "-"
        ),
    ),
    (
        "mask pixel F1, mask heads alone (`given_duplicated`)",
        lambda m: f"{m['given_duplicated']['pixel_f1']:.4f}" if "given_duplicated" in m else "-",
    ),
)


def pair_metrics(path: Path) -> tuple[str, dict[str, Any]]:
    """(detector name, pair protocol figures on the test pairs) of one train.py `metrics.json`."""
    try:
        found = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as unreadable:
        raise ValueError(f"{path}: not a readable metrics.json ({unreadable})") from None
    metrics = found.get("duplication") or found.get("test") if isinstance(found, dict) else None
    if not isinstance(metrics, dict) or "by_kind" not in metrics:
        raise ValueError(f"{path}: no pair protocol figures (expected `duplication` or `test` with `by_kind`)")
    return str(found.get("detector", Path(path).parent.name)), metrics


def markdown(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """The overall rows, then one row per kind of pair: `n` and the share flagged per detector."""
    header = "| held-out pairs | " + " | ".join(name for name, _ in runs) + " |"
    rule = "| --- |" + " --- |" * len(runs)
    lines = [header, rule]
    lines += [f"| {label} | " + " | ".join(cell(m) for _, m in runs) + " |" for label, cell in OVERALL]
    lines += ["", "| kind of pair | n | " + " | ".join(f"{name} flagged" for name, _ in runs) + " |"]
    lines.append("| --- | --- |" + " --- |" * len(runs))
    kinds = sorted({kind for _, m in runs for kind in m["by_kind"]})
    for kind in kinds:
        entries = [m["by_kind"].get(kind) for _, m in runs]
        known = next(e for e in entries if e)
        what = "TPR" if known["label"] else "FPR"
        cells = [f"{e['tpr' if e['label'] else 'fpr']:.3f}" if e else "-" for e in entries]
        counts = " / ".join(dict.fromkeys(str(e["n"]) if e else "-" for e in entries))  # one n where they agree
        lines.append(
            f"| {kind} ({'duplicated' if known['label'] else 'not duplicated'}: {what}) | {counts} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", nargs="+", type=Path, help="metrics.json of train.py runs")
    args = parser.parse_args(argv)
    try:
        runs = [pair_metrics(path) for path in args.metrics]
    except ValueError as error:
        parser.error(str(error))
    names = [name for name, _ in runs]
    # two runs of one detector: told apart by their run folders
    runs = [
        (f"{name} ({path.parent.name})" if names.count(name) > 1 else name, metrics)
        for (name, metrics), path in zip(runs, args.metrics)
    ]
    print(markdown(runs))
    if len({pair_counts(metrics) for _, metrics in runs}) > 1:
        print(
            "\nThese runs were not measured on the same held-out pairs (their counts differ): "
            "compare runs of the same photos, split and seed.",
            flush=True,
        )
        return 1
    return 0


def pair_counts(metrics: dict[str, Any]) -> tuple:
    """What two runs on the same test pairs share: the counts overall and per kind of pair."""
    kinds = tuple(sorted((kind, entry["n"]) for kind, entry in metrics["by_kind"].items()))
    return metrics.get("pair_n_pos"), metrics.get("pair_n_neg"), kinds


if __name__ == "__main__":
    raise SystemExit(main())
