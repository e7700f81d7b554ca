"""Leave-one-category-out: for each kind of genuine image, train without it and measure how many of
its genuine images the calibrated threshold flags (a script).

    python -m benchmarks.leave_one_category_out --manifest data/generated_kinds/manifest.csv
        [--categories chart gel ...] [--experiment generated_kinds | --detector npr --epochs 3]
        [--size 64] [--output-dir outputs/leave_one_category_out] [--override KEY=VALUE ...]

A detector deployed on journal figures or refund photos meets kinds of genuine image it never saw
(a new stain, a new blot scanner). Make the manifest with `python generate.py preset=cpu_kinds`
(or any set with genuine kinds), whose `category` column names each image's kind. For each
held-out category, every image of it (genuine panels and the fakes made from them) is in test;
the photos of the other categories are cut into train / validation / test by photo
(`--fractions`), so the test split also shows unseen photos of seen categories. Each detector is
trained by `train.py` on that split (only the whole-image generator families of
`leave_one_family_out`, with the same groups renamed to families), its threshold calibrated on the
validation genuines, and the table gives, per held-out category: genuine TNR at that threshold on
the held-out category, TPR on its fakes and AUROC on it, and the genuine TNR on the seen
categories' test photos beside it. `--experiment generated_kinds` trains each detector with that
recipe (its detector, epochs, data levers and calibration rule) instead of naming them one by one.
Written to `<output-dir>/leave_one_category_out.md` and `results.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

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
from datamodules.io import split_keys_by_group
from datamodules.records import Record, read_manifest
from datamodules.splits import DEFAULT_FAMILIES, SplitError, _as_family, family_of

ROOT = Path(__file__).resolve().parents[1]


def category_split(
    records: list[Record],
    held_out: str,
    fractions=(0.6, 0.2, 0.2),
    seed: int = 0,
    families: dict[str, list[str]] = DEFAULT_FAMILIES,
) -> tuple[list[Record], dict]:
    """Every record of `held_out` in test; the other categories' photos (sources) shuffled and cut
    by `fractions`, so no photo straddles splits. Fakes outside `families` are left out."""
    kept = [r for r in records if r.category and (r.label == 0 or family_of(r.group, families) is not None)]
    categories = sorted({r.category for r in kept})
    if held_out not in categories:
        raise SplitError(f"category {held_out!r} is not in the manifest; categories: {', '.join(categories)}")
    if len(categories) < 2:
        raise SplitError("leave-one-category-out needs at least two categories")
    # a photo the held-out kind was made from (phone photos of a bundled photo) goes to test whole
    held_sources = {r.source or r.path for r in kept if r.category == held_out}
    kinds_of: dict[str, set[str]] = {}
    for r in kept:
        kinds_of.setdefault(r.source or r.path, set()).add(r.category)
    # the seen categories' sources are cut within each category, as generate.py cuts them
    groups = {s: "+".join(sorted(kinds)) for s, kinds in kinds_of.items() if s not in held_sources}
    where = split_keys_by_group(groups, fractions, seed)
    where.update({s: "test" for s in held_sources})
    out = [_as_family(Record(**{**asdict(r), "split": where[r.source or r.path]}), families) for r in kept]
    counts = {
        split: {
            "genuine": sum(r.split == split and r.label == 0 for r in out),
            "fake": sum(r.split == split and r.label == 1 for r in out),
        }
        for split in ("train", "val", "test")
    }
    if not counts["val"]["genuine"] or not any(r.split == "train" and r.label == 1 for r in out):
        raise SplitError(f"holding out {held_out!r} leaves no validation genuines or no training fakes")
    # categories whose every photo went to test with the held-out one's (photos and phone photos of them)
    trained_on = {r.category for r in out if r.split != "test"}
    held_with = sorted(set(categories) - trained_on - {held_out})
    return out, {"held_out": held_out, "counts": counts, "held_with": held_with}


# what the benchmark sets itself for every split: the data (each split's manifest) and one process
BENCHMARK_OWN_SETTINGS = frozenset({"data.root", "data.made_by", "data.num_workers"})  # the folder is replaced


def experiment_settings(name: str, size: int = 0) -> tuple[str, int, list[str], list[str]]:
    """The detector, epochs and `train.py` overrides that train like `experiment=<name>` on a split
    manifest: the detector settings the recipe changes (but the input size, when `size` is given),
    the data and calibration settings it changes that a manifest's data takes, but not the number
    of loader processes; and the settings it makes that a manifest's data does not take (its
    layout's own options, e.g. `data.exclude_groups`), other than its data folder, so the caller
    can say they were left out."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        asked = [f"experiment={name}", "data=manifest"]
        recipe = compose(config_name="train", overrides=asked, return_hydra_config=True)
        detector = recipe.hydra.runtime.choices["detector"]
        plain = compose(config_name="train", overrides=["data=manifest", f"detector={detector}"])
    changed, left_out = {}, []
    # the recipe's detector settings (network, optimizer, schedule) against the detector's own config
    own, theirs = (OmegaConf.to_container(c.detector, resolve=True) for c in (recipe, plain))
    detector_changes = [
        f"++detector.{key}={json.dumps(value)}"
        for key, value in leaf_changes(own, theirs)
        if not (size and key == "net.preprocess.size")  # `size` (--size) decides it, not the recipe
    ]
    for section in ("data", "calibration"):
        ours, theirs = (OmegaConf.to_container(c[section], resolve=False) for c in (recipe, plain))
        for key, value in ours.items():
            setting = f"{section}.{key}"
            if setting in BENCHMARK_OWN_SETTINGS:
                continue
            if key not in theirs:
                left_out.append(setting)
            elif theirs[key] != value:
                changed[setting] = value
    overrides = []
    for key, value in changed.items():
        if isinstance(value, dict):  # key by key: Hydra's grammar takes no quoted keys
            overrides += [f"++{key}.{k}={json.dumps(v)}" for k, v in value.items()]
        else:
            overrides.append(f"{key}={json.dumps(value)}")
    return detector, int(recipe.trainer.max_epochs), detector_changes + overrides, left_out


def leaf_changes(ours: Any, theirs: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of every leaf of `ours` that `theirs` lacks or holds otherwise."""
    if not isinstance(ours, dict):
        return [] if ours == theirs else [(prefix.rstrip("."), ours)]
    theirs = theirs if isinstance(theirs, dict) else {}
    return [change for key, value in ours.items() for change in leaf_changes(value, theirs.get(key), f"{prefix}{key}.")]


def row(held_out: str, metrics: dict | None, error: str | None, held_with: Sequence[str] = ()) -> list[str]:
    """A table row: the held-out category's figures, and the seen categories' (not those held out
    with it, whose photos went to test whole)."""
    name = f"{held_out} (with {', '.join(held_with)})" if held_with else held_out
    if metrics is None:
        return [name, f"failed: {error}", "", "", "", ""]
    own = metrics.get("by_category", {}).get(held_out, {})
    unseen = {held_out, *held_with}
    seen = [m for name, m in metrics.get("by_category", {}).items() if name not in unseen and m.get("n_neg")]
    seen_genuine = sum(m["n_neg"] for m in seen)
    seen_tnr = sum(m["tnr"] * m["n_neg"] for m in seen) / seen_genuine if seen_genuine else None
    worst = min(seen, key=lambda m: m["tnr"], default=None)
    worst_name = next((n for n, m in metrics.get("by_category", {}).items() if m is worst), "")
    return [
        name,
        f"{fmt(own.get('tnr'))} ({own.get('n_neg', 0)})",
        fmt(own.get("tpr")),
        fmt(own.get("auroc")),
        f"{fmt(seen_tnr)} ({seen_genuine})",
        f"{worst_name} {fmt(worst['tnr'])}" if worst else "n/a",
    ]


def table(rows: list[list[str]]) -> str:
    head = [
        "held-out category",
        "its genuine TNR (n)",
        "TPR on its fakes",
        "AUROC on it",
        "seen categories' genuine TNR (n)",
        "worst seen category",
    ]
    return "\n".join(
        ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=ROOT / "data" / "generated_kinds" / "manifest.csv")
    parser.add_argument("--categories", nargs="*", help="hold out only these (default: each category in turn)")
    parser.add_argument("--experiment", help="train with this recipe (configs/experiment/), e.g. generated_kinds")
    parser.add_argument("--detector", help="default: the experiment's, else npr")
    parser.add_argument("--epochs", type=positive, help="default: the experiment's, else 3")
    parser.add_argument(
        "--size", type=positive_or_zero, default=64, help="detector.net.preprocess.size (0: the detector's own)"
    )
    parser.add_argument("--fractions", type=float, nargs=3, default=(0.6, 0.2, 0.2), metavar=("TRAIN", "VAL", "TEST"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, default=ROOT / "outputs" / "leave_one_category_out")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--split-only", action="store_true", help="write the split manifests and stop")
    parser.add_argument("--resume", action="store_true", help="reuse runs that already wrote metrics.json")
    return parser


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The manifest, recipe and fractions, refused in one line before anything is split."""
    if not args.manifest.is_file():
        parser.error(
            f"{args.manifest} does not exist (make one with `python generate.py preset=cpu_kinds`, "
            "which writes data/generated_kinds)"
        )
    if args.experiment and not (ROOT / "configs" / "experiment" / f"{args.experiment}.yaml").is_file():
        known = sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml"))
        parser.error(f"--experiment {args.experiment}: no such recipe; recipes: {', '.join(known)}")
    if sum(args.fractions) <= 0 or min(args.fractions) < 0:
        parser.error(f"--fractions must be 0 or more each and add up to more than 0, got {args.fractions}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    detector, epochs, overrides, left_out = (
        experiment_settings(args.experiment, args.size) if args.experiment else ("npr", 3, [], [])
    )
    if left_out:
        print(
            f"experiment={args.experiment}: not passed to train.py, a manifest's data does not take "
            f"{', '.join(left_out)} (the splits keep the whole-image generator families only)",
            flush=True,
        )
    args.detector, args.epochs = args.detector or detector, args.epochs or epochs
    check_runs(parser, [args.detector], args.output_dir)
    args.override = overrides + list(args.override)
    records = read_manifest(args.manifest)
    output = args.output_dir.resolve()
    held = args.categories or sorted({r.category for r in records if r.category})
    try:
        splits = {c: category_split(records, c, tuple(args.fractions), args.seed) for c in held}
    except (SplitError, ValueError) as error:  # ValueError: fractions that cannot split
        print(f"error: {error}", file=sys.stderr)
        return 2
    drawn = split_options(args.manifest, fractions=list(args.fractions), seed=args.seed)
    manifests = {}
    for category, (split, summary) in splits.items():
        manifests[category] = output / f"holdout_{category}" / "manifest.csv"
        write_split(split, manifests[category], drawn, args.resume)
        with_it = f" (and with it {', '.join(summary['held_with'])})" if summary["held_with"] else ""
        print(f"held out {category}{with_it}: {json.dumps(summary['counts'])}", flush=True)
    if args.split_only:
        return 0
    rows, results, failed = [], {}, False
    for category, manifest in manifests.items():
        run = manifest.parent / args.detector
        settings = {"split": drawn, "epochs": args.epochs, "size": args.size, "override": list(args.override)}
        metrics = finished_run(run, settings) if args.resume else None
        if metrics is not None:
            seconds, error = 0.0, None
        else:
            metrics, seconds, error = train_detector(
                args.detector, manifest, run, args.epochs, args.size, args.seed, list(args.override), settings
            )
        failed |= error is not None
        print(f"[{args.detector} / held out {category}] {error or 'done'} in {seconds:.0f} s", flush=True)
        results[category] = metrics
        rows.append(row(category, metrics, error, splits[category][1]["held_with"]))
    markdown = (
        f"{args.detector}, {args.epochs} epochs, {args.size or 'configured'} px, seed {args.seed}"
        f"{f' (experiment={args.experiment})' if args.experiment else ''}; "
        "genuine TNR at the threshold calibrated on validation genuines of the seen categories.\n\n"
        f"{table(rows)}\n"
    )
    (output / "leave_one_category_out.md").write_text(markdown)
    (output / "results.json").write_text(
        json.dumps({"detector": args.detector, "results": results}, indent=1, default=str)
    )
    print("\n" + markdown)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
