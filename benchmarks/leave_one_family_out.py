"""Leave-one-family-out: for each generator family, train on all the others and test on it (a script).

    python -m benchmarks.leave_one_family_out --manifest data/generated_detector/manifest.csv
        [--families NAME=PATTERN[,PATTERN...] ...] [--detectors npr dct clip_freq_tiny]
        [--fused clip_freq_tiny] [--epochs 3] [--size 64] [--output-dir outputs/leave_one_family_out]
        [--override KEY=VALUE ...]

It extends `benchmarks/cross_generator.py`: each held-out family gets the cross-generator split
(`datamodules.splits.family_split`: train and validation hold the other families' fakes and the
genuine images of their photos; test holds the held-out family's fakes and the genuine images of
*other* photos, so neither the family nor any test photo is seen in training), and every detector
is trained on it by `train.py`. Groups are renamed to their family in the split manifests, so
breakdowns read per family. `--fused` also trains that detector on every family (an ordinary split
by photo) as the reference of what training on everything gives. The table (AUROC, TPR at 1 % FPR,
genuine TNR at the threshold calibrated on validation genuines, per held-out family and detector)
is printed and written to `<output-dir>/leave_one_family_out.md` (and `results.json`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks.cross_generator import (
    check_runs,
    finished_run,
    fmt,
    positive,
    positive_or_zero,
    split_options,
    train_detector,
    write_split,
)
from datamodules.records import read_manifest
from datamodules.splits import SplitError, all_families_split, family_split, parse_families

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_DETECTORS = ["npr", "dct", "clip_freq_tiny"]


NOT_RUN = object()  # a family this invocation did not hold out (`--holdout`)


def _cells(metrics: dict | None, family: str) -> str:
    if metrics is NOT_RUN:
        return "not run"
    if metrics is None:
        return "failed"
    m = metrics.get("by_group", {}).get(family, metrics)
    return f"{fmt(m.get('auroc'))} / {fmt(m.get('tpr@fpr=0.01'))} / {fmt(metrics.get('tnr'))}"


def table(results: dict, families: list[str]) -> str:
    head = ["detector (trained on)", *[f"held out: {f}" for f in families]]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for detector, per_family in results.items():
        lines.append("| " + " | ".join([detector, *[_cells(per_family.get(f, NOT_RUN), f) for f in families]]) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=ROOT / "data" / "generated_detector" / "manifest.csv")
    parser.add_argument("--families", nargs="*", help="NAME=PATTERN[,PATTERN...] (default: the cpu_diverse families)")
    parser.add_argument("--detectors", nargs="+", default=DEFAULT_DETECTORS)
    parser.add_argument("--fused", default="clip_freq_tiny", help="also train this detector on every family ('' = no)")
    parser.add_argument("--epochs", type=positive, default=3)
    parser.add_argument(
        "--size", type=positive_or_zero, default=64, help="detector.net.preprocess.size (0: each detector's own)"
    )
    parser.add_argument("--val-fraction", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, default=ROOT / "outputs" / "leave_one_family_out")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--split-only", action="store_true", help="write the split manifests and stop")
    parser.add_argument("--holdout", nargs="*", help="hold out only these families (default: each in turn)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse runs that already wrote metrics.json (an interrupted or split-up benchmark)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.manifest.is_file():
        parser.error(f"{args.manifest} does not exist (make one with `python generate.py preset=cpu_diverse`)")
    check_runs(parser, [*args.detectors, *([args.fused] if args.fused else [])], args.output_dir)
    records = read_manifest(args.manifest)
    output = args.output_dir.resolve()
    try:
        families = parse_families(args.families)
        if unknown := sorted(set(args.holdout or ()) - set(families)):
            raise SplitError(f"--holdout {', '.join(unknown)}: not a family; families: {', '.join(families)}")
        splits = {f: family_split(records, families, f, args.val_fraction, args.seed) for f in families}
    except SplitError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    drawn = split_options(args.manifest, families=families, val_fraction=args.val_fraction, seed=args.seed)
    manifests = {}
    for family, (split, summary) in splits.items():
        if args.holdout and family not in args.holdout:
            continue
        manifests[family] = output / f"holdout_{family}" / "manifest.csv"
        write_split(split, manifests[family], drawn, args.resume)  # split-up runs share the manifests
        print(f"held out {family}: {json.dumps(summary['counts'])}", flush=True)
    if args.fused:
        manifests["*"] = output / "all_families" / "manifest.csv"
        write_split(all_families_split(records, families, seed=args.seed), manifests["*"], drawn, args.resume)
    if args.split_only:
        return 0

    results: dict[str, dict] = defaultdict(dict)
    failed = False
    for family, manifest in manifests.items():
        for detector in [args.fused] if family == "*" else args.detectors:
            run = manifest.parent / detector
            settings = {"split": drawn, "epochs": args.epochs, "size": args.size, "override": list(args.override)}
            metrics = finished_run(run, settings) if args.resume else None
            if metrics is not None:
                seconds, error = 0.0, None
            else:
                metrics, seconds, error = train_detector(
                    detector, manifest, run, args.epochs, args.size, args.seed, list(args.override), settings
                )
            failed |= error is not None
            print(f"[{detector} / held out {family}] {error or 'done'} in {seconds:.0f} s", flush=True)
            if family == "*":
                results[f"{detector} (all families)"] = {f: metrics for f in families}
            else:
                results[f"{detector} (the other families)"][family] = metrics
    markdown = (
        f"Cells: test AUROC / TPR at 1 % FPR / genuine TNR at the threshold calibrated on validation "
        f"genuines; {args.epochs} epochs, {args.size or 'configured'} px, seed {args.seed}.\n\n"
        f"{table(results, list(families))}\n"
    )
    output.mkdir(parents=True, exist_ok=True)
    (output / "leave_one_family_out.md").write_text(markdown)
    (output / "results.json").write_text(json.dumps({"families": families, "results": results}, indent=1, default=str))
    print("\n" + markdown)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
