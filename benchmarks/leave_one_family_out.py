"""Leave-one-family-out: for each generator family, train on all the others and test on it (a script).

    python benchmarks/leave_one_family_out.py --manifest data/generated_detector/manifest.csv
        [--families NAME=PATTERN[,PATTERN...] ...] [--detectors npr dct clip_freq_tiny]
        [--fused clip_freq_tiny] [--epochs 3] [--size 64] [--output-dir outputs/leave_one_family_out]
        [--override KEY=VALUE ...]

It extends `benchmarks/cross_generator.py`: each held-out family gets that script's split (train and
validation hold the other families' fakes and the genuine images of their photos; test holds the
held-out family's fakes and the genuine images of *other* photos, so neither the family nor any
test photo is seen in training), and every detector is trained on it by `train.py`. Groups are
renamed to their family in the split manifests, so breakdowns read per family. `--fused` also
trains that detector on every family (an ordinary split by photo) as the reference of what
training on everything gives. The table (AUROC, TPR at 1 % FPR, genuine TNR at the threshold
calibrated on validation genuines, per held-out family and detector) is printed and written to
`<output-dir>/leave_one_family_out.md` (and `results.json`).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import random
import sys
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cross_generator import SplitError, cross_generator_split, fmt, train_detector  # noqa: E402
from datamodules.records import Record, read_manifest, write_manifest  # noqa: E402

# the families `python generate.py preset=cpu_diverse` makes
DEFAULT_FAMILIES = {
    "autoencoder": ["ae_transposed", "ae_nearest_conv", "ae_bilinear_conv", "ae_pixel_shuffle"],
    "latent_ae": ["latent_ae"],
    "ddpm_pixel": ["ddpm_pixel_sdedit_*"],
    "ddpm_latent": ["ddpm_latent_sdedit_*"],
}  # region edits (ae_*_region, ddpm_*_inpaint) are a localization task; add them with --families
DEFAULT_DETECTORS = ["npr", "dct", "clip_freq_tiny"]


def parse_families(specs: list[str] | None) -> dict[str, list[str]]:
    if not specs:
        return dict(DEFAULT_FAMILIES)
    families = {}
    for spec in specs:
        name, _, patterns = spec.partition("=")
        if not name or not patterns:
            raise SplitError(f"--families takes NAME=PATTERN[,PATTERN...], got {spec!r}")
        families[name] = patterns.split(",")
    return families


def family_of(group: str | None, families: dict[str, list[str]]) -> str | None:
    for name, patterns in families.items():
        if any(fnmatch.fnmatchcase(group or "", p) for p in patterns):
            return name
    return None


def family_split(records: list[Record], families: dict[str, list[str]], held_out: str,
                 val_fraction: float = 0.15, seed: int = 0) -> tuple[list[Record], dict]:
    """The cross-generator split holding out `held_out`, with groups renamed to families."""
    if held_out not in families:
        raise SplitError(f"unknown family {held_out!r}; families: {', '.join(families)}")
    groups = {r.group for r in records if r.label == 1}
    if not any(family_of(g, families) == held_out for g in groups):
        raise SplitError(f"family {held_out!r} ({', '.join(families[held_out])}) matches no group of the manifest")
    train = [g for g in sorted(groups) if family_of(g, families) not in (None, held_out)]
    test = [g for g in sorted(groups) if family_of(g, families) == held_out]
    split, summary = cross_generator_split(records, train, test, val_fraction, seed)
    return [_as_family(r, families) for r in split], summary


def all_families_split(records: list[Record], families: dict[str, list[str]], fractions=(0.6, 0.15, 0.25),
                       seed: int = 0) -> list[Record]:
    """Every family in training: photos (sources) shuffled and cut by `fractions`."""
    kept = [r for r in records if r.label == 0 or family_of(r.group, families) is not None]
    sources = sorted({r.source or r.path for r in kept})
    random.Random(seed).shuffle(sources)
    cut1, cut2 = round(fractions[0] * len(sources)), round((fractions[0] + fractions[1]) * len(sources))
    where = {s: "train" if i < cut1 else "val" if i < cut2 else "test" for i, s in enumerate(sources)}
    return [_as_family(Record(**{**asdict(r), "split": where[r.source or r.path]}), families) for r in kept]


def _as_family(record: Record, families: dict[str, list[str]]) -> Record:
    if record.label != 1:
        return record
    return Record(**{**asdict(record), "group": family_of(record.group, families)})


def _cells(metrics: dict | None, family: str) -> str:
    if metrics is None:
        return "failed"
    m = metrics.get("by_group", {}).get(family, metrics)
    return f"{fmt(m.get('auroc'))} / {fmt(m.get('tpr@fpr=0.01'))} / {fmt(metrics.get('tnr'))}"


def table(results: dict, families: list[str]) -> str:
    head = ["detector (trained on)", *[f"held out: {f}" for f in families]]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for detector, per_family in results.items():
        lines.append("| " + " | ".join([detector, *[_cells(per_family.get(f), f) for f in families]]) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=ROOT / "data" / "generated_detector" / "manifest.csv")
    parser.add_argument("--families", nargs="*", help="NAME=PATTERN[,PATTERN...] (default: the cpu_diverse families)")
    parser.add_argument("--detectors", nargs="+", default=DEFAULT_DETECTORS)
    parser.add_argument("--fused", default="clip_freq_tiny", help="also train this detector on every family ('' = no)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--size", type=int, default=64, help="detector.net.preprocess.size (0: each detector's own)")
    parser.add_argument("--val-fraction", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, default=ROOT / "outputs" / "leave_one_family_out")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--split-only", action="store_true", help="write the split manifests and stop")
    parser.add_argument("--holdout", nargs="*", help="hold out only these families (default: each in turn)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse runs that already wrote metrics.json (an interrupted or split-up benchmark)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.manifest.is_file():
        parser.error(f"{args.manifest} does not exist (make one with `python generate.py preset=cpu_diverse`)")
    records = read_manifest(args.manifest)
    output = args.output_dir.resolve()
    try:
        families = parse_families(args.families)
        splits = {f: family_split(records, families, f, args.val_fraction, args.seed) for f in families}
    except SplitError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    manifests = {}
    for family, (split, summary) in splits.items():
        if args.holdout and family not in args.holdout:
            continue
        manifests[family] = output / f"holdout_{family}" / "manifest.csv"
        if not (args.resume and manifests[family].is_file()):  # split-up runs share the manifests
            write_manifest(split, manifests[family])
        print(f"held out {family}: {json.dumps(summary['counts'])}", flush=True)
    if args.fused:
        manifests["*"] = output / "all_families" / "manifest.csv"
        if not (args.resume and manifests["*"].is_file()):
            write_manifest(all_families_split(records, families, seed=args.seed), manifests["*"])
    if args.split_only:
        return 0

    results: dict[str, dict] = defaultdict(dict)
    failed = False
    for family, manifest in manifests.items():
        for detector in ([args.fused] if family == "*" else args.detectors):
            run = manifest.parent / detector
            if args.resume and (run / "metrics.json").is_file():
                metrics, seconds, error = json.loads((run / "metrics.json").read_text()), 0.0, None
            else:
                metrics, seconds, error = train_detector(detector, manifest, run, args.epochs, args.size, args.seed,
                                                         list(args.override))
            failed |= error is not None
            print(f"[{detector} / held out {family}] {error or 'done'} in {seconds:.0f} s", flush=True)
            if family == "*":
                results[f"{detector} (all families)"] = {f: metrics for f in families}
            else:
                results[f"{detector} (the other families)"][family] = metrics
    markdown = (f"Cells: test AUROC / TPR at 1 % FPR / genuine TNR at the threshold calibrated on validation "
                f"genuines; {args.epochs} epochs, {args.size or 'configured'} px, seed {args.seed}.\n\n"
                f"{table(results, list(families))}\n")
    (output / "leave_one_family_out.md").write_text(markdown)
    (output / "results.json").write_text(json.dumps({"families": families, "results": results}, indent=1, default=str))
    print("\n" + markdown)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
