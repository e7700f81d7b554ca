"""Cross-generator generalization: train on some generators, test on held-out ones (a script).

    python -m benchmarks.cross_generator [--manifest data/embedded/manifest.csv]
        [--train-groups rerender_nearest rerender_bilinear] [--test-groups rerender_bicubic rerender_lanczos]
        [--detectors npr dct_tiny clip_linear_tiny clip_freq_tiny] [--epochs 8]
        [--size CROP] [--output-dir outputs/cross_generator] [--override KEY=VALUE ...]

From a generated manifest (`python generate.py output=DIR` writes one; a missing
`data/embedded/manifest.csv` is generated first), it builds one cross-generator split
(`datamodules.splits.cross_generator_split`):

- train + val: the fakes of `--train-groups` and the genuine images they were made from
  (their `source`), split by source (`--val-fraction` of the sources go to val, where the
  threshold is calibrated on the genuine images to `target_fpr`);
- test: the fakes of `--test-groups` and *their* genuine sources, none of which is seen in
  training. No source is in two splits: a source with fakes on both sides is given to one side
  (seeded), and its fakes of the other side's groups are left out. Fakes of groups named in
  neither option are left out; genuine images with no fake in either are shared out between the
  sides in proportion.

Group names may be shell patterns (`--test-groups 'autoencoder_*'`); held-out groups win over
`--train-groups` (so `--train-groups '*'` trains on everything not held out); a name that matches no
group of the manifest is an error listing the groups there are. The split is written as
`<output-dir>/manifest.csv`, then every detector is trained on it by `train.py` (one subprocess
each, run directory `<output-dir>/<detector>`, log in `train.log` there) with
`data=manifest trainer=cpu trainer.max_epochs=<epochs> detector.net.preprocess.size=<--size>`
(default: the shortest image side of the split, so no image is padded; on the quickstart set that is
its 96 px crop size, as `python train.py` uses; `--size 0` keeps each detector's configured size) and any
`--override`. The table (test AUROC, standardized partial AUROC at FPR <= 0.1, TPR at 1 %
FPR, TPR and genuine TNR at the threshold calibrated on validation genuines, per held-out generator AUROC,
validation AUROC on the seen generators, training time) is printed and written to
`<output-dir>/cross_generator.md` (and `results.json`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from datamodules.io import file_in_the_way
from datamodules.records import Record, read_manifest, write_manifest
from datamodules.splits import SplitError, cross_generator_split

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_TRAIN = ["rerender_nearest", "rerender_bilinear"]
DEFAULT_TEST = ["rerender_bicubic", "rerender_lanczos"]
DEFAULT_DETECTORS = ["npr", "dct_tiny", "clip_linear_tiny", "clip_freq_tiny"]


def crop_size(records: list[Record]) -> int:
    """The shortest image side in the split: every image holds a crop of that size (no padding)."""
    from PIL import Image

    sides = []
    for record in records:
        with Image.open(record.path) as image:  # reads the header only
            sides.append(min(image.size))
    return min(sides)


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (epochs, sizes)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text}")
    return value


def positive_or_zero(text: str) -> int:
    """An argparse type: 0 (the configured value) or a whole number of at least 1."""
    return 0 if int(text) == 0 else positive(text)


def check_runs(parser: argparse.ArgumentParser, detectors: list[str], output_dir: Path) -> None:
    """Refuse, in one line before anything is split or trained, an unknown detector (it failed only
    after the others had trained) and an output folder that is a file or under one."""
    from detectors.registry import list_detectors

    if unknown := [name for name in detectors if name not in list_detectors()]:
        parser.error(f"unknown detector {', '.join(unknown)}; known: {', '.join(list_detectors())}")
    if blocking := file_in_the_way(output_dir):
        parser.error(f"--output-dir {output_dir.absolute()}: {blocking} is a file, not a folder")


def split_options(manifest: Path, **options) -> dict:
    """What a split is drawn from, for `write_split` and `finished_run` to compare on a resume: the
    manifest's path and contents (the same path edited in place draws another split) and `options`."""
    contents = hashlib.sha256(manifest.read_bytes()).hexdigest()
    return {"manifest": str(manifest.resolve()), "contents": contents, **options}


def write_split(split: list, manifest: Path, options: dict, resume: bool) -> None:
    """A split's manifest, with the options that drew it beside it (`split.json`); `resume` keeps one
    drawn with the same options (split-up runs share the manifests) and draws anew otherwise."""
    drawn = manifest.with_name("split.json")
    if resume and manifest.is_file() and drawn.is_file() and json.loads(drawn.read_text()) == options:
        return
    write_manifest(split, manifest)
    drawn.write_text(json.dumps(options, indent=1))


def finished_run(run_dir: Path, settings: dict) -> dict | None:
    """The metrics of a run `train_detector` finished in `run_dir` with these very `settings` (the
    split's options included), or None: a resume never reuses a run of other settings."""
    done, recorded = run_dir / "metrics.json", run_dir / "benchmark_settings.json"
    if done.is_file() and recorded.is_file() and json.loads(recorded.read_text()) == settings:
        return json.loads(done.read_text())
    return None


def train_detector(
    detector: str,
    manifest: Path,
    run_dir: Path,
    epochs: int,
    size: int,
    seed: int,
    overrides: list[str],
    settings: dict | None = None,
) -> tuple[dict | None, float, str | None]:
    """`python train.py ...` for one detector; (metrics.json or None, seconds, error or None). A
    finished run records `settings` (what `finished_run` compares on a resume)."""
    shutil.rmtree(run_dir, ignore_errors=True)  # the run it replaces: train.py refuses a used run directory
    run_dir.mkdir(parents=True)
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        f"detector={detector}",
        "data=manifest",
        f"data.manifest={manifest}",
        "data.num_workers=0",
        "trainer=cpu",
        f"trainer.max_epochs={epochs}",
        "trainer.enable_progress_bar=false",
        f"seed={seed}",
        f"hydra.run.dir={run_dir}",
        *([f"detector.net.preprocess.size={size}"] if size else []),
        *overrides,
    ]
    print(f"[{detector}] {' '.join(command[1:])}", flush=True)
    start = time.perf_counter()
    with (run_dir / "train.log").open("w") as log:
        done = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    metrics_file = run_dir / "metrics.json"
    if done.returncode != 0 or not metrics_file.is_file():
        return None, seconds, f"train.py exited {done.returncode}; see {run_dir / 'train.log'}"
    if settings is not None:
        (run_dir / "benchmark_settings.json").write_text(json.dumps(settings, indent=1))
    return json.loads(metrics_file.read_text()), seconds, None


def fmt(value) -> str:
    return "n/a" if value is None or value != value else f"{value:.3f}"


def table(results: list[dict], test_groups: list[str]) -> str:
    head = [
        "detector",
        "AUROC [95 % CI]",
        "pAUROC@0.1",
        "TPR@1% FPR",
        "TPR / genuine TNR at threshold",
        "threshold",
        *[f"AUROC {g}" for g in test_groups],
        "val AUROC (seen)",
        "train s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in results:
        m = row["metrics"]
        if m is None:
            cells = [row["detector"], f"failed: {row['error']}", *[""] * (len(head) - 2)]
            lines.append("| " + " | ".join(cells) + " |")
            continue
        groups = m.get("by_group", {})
        low, high = (m.get("intervals") or {}).get("auroc", (None, None))
        interval = f" [{fmt(low)}, {fmt(high)}]" if low is not None else ""
        cells = [
            row["detector"],
            fmt(m.get("auroc")) + interval,
            fmt(m.get("pauroc@0.1")),
            fmt(m.get("tpr@fpr=0.01")),
            f"{fmt(m.get('tpr'))} / {fmt(m.get('tnr'))}",
            fmt(m.get("threshold")),
            *[fmt(groups.get(g, {}).get("auroc")) for g in test_groups],
            fmt(m.get("val", {}).get("auroc")),
            f"{row['seconds']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def argument_parser() -> argparse.ArgumentParser:
    """The benchmark's options: the data, the groups on each side, the detectors and the training."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--manifest",
        type=Path,
        default=ROOT / "data" / "embedded" / "manifest.csv",
        help="a generated manifest (default: the embedded dataset, generated if missing)",
    )
    parser.add_argument("--train-groups", nargs="+", default=DEFAULT_TRAIN, help="fake groups to train on")
    parser.add_argument("--test-groups", nargs="+", default=DEFAULT_TEST, help="held-out fake groups to test on")
    parser.add_argument("--detectors", nargs="+", default=DEFAULT_DETECTORS, help="configs/detector names")
    parser.add_argument("--epochs", type=positive, default=8, help="trainer.max_epochs of every run")
    parser.add_argument(
        "--size",
        type=positive_or_zero,
        default=None,
        help="detector.net.preprocess.size (default: the shortest image side; 0: each detector's own)",
    )
    parser.add_argument("--val-fraction", type=float, default=0.15, help="share of training sources used for val")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, default=ROOT / "outputs" / "cross_generator")
    parser.add_argument(
        "--override",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="more train.py overrides for every run (e.g. data.batch_size=64)",
    )
    parser.add_argument("--split-only", action="store_true", help="write the split manifest and stop")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Split, train every detector on the training groups, test on the held-out ones, write the report."""
    parser = argument_parser()
    args = parser.parse_args(argv)
    check_runs(parser, args.detectors, args.output_dir)
    manifest = args.manifest.resolve()
    if not manifest.is_file():
        if manifest != (ROOT / "data" / "embedded" / "manifest.csv").resolve():
            parser.error(f"{manifest} does not exist (make one with `python generate.py output=DIR`)")
        from synthesis.embedded import make_embedded_manifest

        make_embedded_manifest(manifest.parent, seed=args.seed)
    try:
        records, summary = cross_generator_split(
            read_manifest(manifest), args.train_groups, args.test_groups, args.val_fraction, args.seed
        )
    except SplitError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    output_dir = args.output_dir.resolve()
    split_manifest = output_dir / "manifest.csv"
    write_manifest(records, split_manifest)
    print(f"split of {manifest} -> {split_manifest}\n{json.dumps(summary, indent=1)}", flush=True)
    if args.split_only:
        return 0

    size = crop_size(records) if args.size is None else args.size
    results = []
    for detector in args.detectors:
        metrics, seconds, error = train_detector(
            detector, split_manifest, output_dir / detector, args.epochs, size, args.seed, list(args.override)
        )
        results.append({"detector": detector, "metrics": metrics, "seconds": seconds, "error": error})
        print(
            f"[{detector}] {error or 'done'} in {seconds:.0f} s: test auroc {fmt((metrics or {}).get('auroc'))}",
            flush=True,
        )

    command = "python -m benchmarks.cross_generator " + " ".join(sys.argv[1:] if argv is None else argv)
    markdown = (
        f"Train on {', '.join(summary['train_groups'])}; test on {', '.join(summary['test_groups'])} "
        f"(held out), {args.epochs} epochs each, detector input {f'{size} px' if size else 'as configured'}.\n"
        f"Images (genuine + fake): "
        + ", ".join(f"{s} {c['genuine']} + {c['fake']}" for s, c in summary["counts"].items())
        + f".\n\n{table(results, summary['test_groups'])}\n\n`{command.strip()}`\n"
    )
    (output_dir / "cross_generator.md").write_text(markdown)
    (output_dir / "results.json").write_text(
        json.dumps({"summary": summary, "epochs": args.epochs, "results": results}, indent=2, default=str)
    )
    print("\n" + markdown)
    return 1 if any(r["error"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
