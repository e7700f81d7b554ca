"""FraudBench's detector table from one command: score a tree with several detectors, write the table.

    python -m tools.fraudbench_table --data /data/FraudBench \
        --model cospy=cospy.onnx --model effort=effort.ckpt \
        --genuine /data/our_genuine_photos --target-fpr 0.05 --output results/fraudbench.md

`--data` is a FraudBench tree (`<Category>/{Negative,DeepFake/<generator>}/Review_*`) or any
labelled input `infer.py` reads (a manifest with `group` = generator and `category`, a GenImage
tree...). `--genuine` holds genuine images of the user's own (a folder, manifest or layout; labelled
inputs contribute their label-0 images): each detector's threshold is calibrated on them to flag at
most `--target-fpr` of them. The table puts FraudBench's fixed 0.5 threshold and the calibrated one
side by side: per-generator TPR, genuine TNR, balanced accuracy and F1 macro-averaged over
categories. Scores already computed by `infer.py` can be given instead of models
(`--scores NAME=data.csv` and `--genuine-scores NAME=genuine.csv`). Per-image scores are kept in
`<output>_scores/` (and reused when the command is run again); `<output>.json` and `.csv` hold the
same table as the Markdown file.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from datamodules.io import file_sha256
from datamodules.layouts import records_from_input
from datamodules.records import LayoutError, Record
from evaluation.atomic import atomic_path
from evaluation.calibration import genuine_needed
from evaluation.protocols.fraudbench import fraudbench_table, fraudbench_table_markdown
from inference.csv_cells import escape_cell
from inference.runtime import ModelLoadError, load_runtime
from inference.scoring import join_truth, score_records
from inference.writer import TRUTH_COLUMN, ResultWriter, read_results

log = logging.getLogger(__name__)


def _pairs(values: Sequence[str], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"{option} expects NAME=PATH, got {value!r}")
        if name in pairs:
            raise SystemExit(f"{option}: detector name {name!r} given twice")
        if "/" in name or "\\" in name or name.startswith("."):  # it names the file its scores are kept in
            raise SystemExit(f"{option}: detector name {name!r} must be a plain name (no / or \\, not starting with .)")
        pairs[name] = path
    return pairs


def genuine_records(path: str, layout: str = "auto") -> list[Record]:
    """The user's genuine images: unlabelled images all count; labelled inputs give their label 0."""
    records = records_from_input(path, layout)
    labelled = [r for r in records if r.label is not None]
    return [r for r in labelled if r.label == 0] if labelled else records


def score_to_file(
    model: str, records: list[Record], output: Path, batch_size: int, device: str, workers: int
) -> list[dict[str, Any]]:
    """Score records with one model into `output` (resuming the scores of the same model file: its
    SHA-256 is kept beside them, and scores of another file are made again; images that could not
    be read before are tried again), returning the rows."""
    runtime = load_runtime(model, device)
    output.parent.mkdir(parents=True, exist_ok=True)
    stamp, digest = output.with_suffix(".model_sha256"), file_sha256(model)
    if output.is_file() and (not stamp.is_file() or stamp.read_text().strip() != digest):
        log.warning("%s holds the scores of another model file than %s: scoring again", output, model)
        output.unlink()
    stamp.write_text(digest + "\n")
    with ResultWriter(output, resume=True, rescore=True) as writer:  # an image repaired since: scored
        counts = score_records(
            runtime, records, writer, batch_size=batch_size, num_workers=workers, threshold=0.5, progress=False
        )
    log.info("%s: %s", model, counts)
    return read_results(output)


def ok_scores(rows: list[dict[str, Any]], paths: set[str] | None = None) -> list[float]:
    return [
        float(r["score"])
        for r in rows
        if r.get("status") == "ok" and r.get("score") not in (None, "") and (paths is None or r["path"] in paths)
    ]


def rows_of(path: str) -> list[dict[str, Any]]:
    """The rows of an infer.py results file, their paths made absolute (from this directory) as the
    records' are: a file written with relative paths matches a tree given by its absolute path."""
    return [{**row, "path": os.path.abspath(row["path"])} for row in read_results(path)]


def genuine_rows(name: str, path: str) -> list[dict[str, Any]]:
    """`--genuine-scores`: the rows of genuine images; rows of an input labelled fake are left out
    (a results file of a labelled input holds both), as `--genuine` keeps only the label-0 images."""
    rows = rows_of(path)
    fakes = sum(row.get(TRUTH_COLUMN) == 1 for row in rows)
    if fakes:
        log.warning("--genuine-scores %s: %d rows of images labelled fake are left out of the calibration", name, fakes)
    return [row for row in rows if row.get(TRUTH_COLUMN) != 1]


def check_scored(name: str, scored: list[dict[str, Any]], records: list[Record]) -> None:
    """No image of `--data` scored (results written for other paths) is said before the table."""
    if not scored:
        raise SystemExit(
            f"{name}: none of the {len(records)} images of --data has a score (results written for other paths, "
            "or every image unreadable): give --scores of infer.py run on this --data"
        )
    if len(scored) < len(records):
        log.warning(
            "%s: %d of %d images have no score (unreadable or missing) and are left out",
            name,
            len(records) - len(scored),
            len(records),
        )


def check_genuine(name: str, values: list[float]) -> None:
    if not values:
        raise SystemExit(f"{name}: none of the genuine images has a score (every one unreadable): no threshold to set")


def build_table(args: argparse.Namespace) -> dict:
    """Score (or read) every detector's data and genuine images; the table as `fraudbench_table`."""
    models, scores = _pairs(args.model, "--model"), _pairs(args.scores, "--scores")
    genuine_files = _pairs(args.genuine_scores, "--genuine-scores")
    if not models and not scores:
        raise SystemExit("give at least one --model NAME=PATH or --scores NAME=CSV")
    if set(models) & set(scores):
        raise SystemExit(f"detectors given both as --model and --scores: {sorted(set(models) & set(scores))}")
    records = [
        replace(r, path=os.path.abspath(r.path))
        for r in records_from_input(args.data, args.layout)
        if r.label is not None
    ]
    if not records:
        raise SystemExit(f"{args.data}: no labelled images (a FraudBench tree or a labelled layout is needed)")
    genuine = genuine_records(args.genuine, args.genuine_layout) if args.genuine else []
    if args.genuine and not genuine:
        raise SystemExit(f"--genuine {args.genuine}: no genuine images there to calibrate on")
    score_dir = args.output.with_name(f"{args.output.stem}_scores")
    scored, genuine_scores = {}, {}
    for name, model in models.items():
        if genuine:  # first: a set no image of which is readable is said before the data is scored
            rows = score_to_file(
                model, genuine, score_dir / f"{name}_genuine.csv", args.batch_size, args.device, args.workers
            )
            genuine_scores[name] = ok_scores(rows, {r.path for r in genuine})
            check_genuine(name, genuine_scores[name])
        rows = score_to_file(model, records, score_dir / f"{name}.csv", args.batch_size, args.device, args.workers)
        scored[name] = join_truth(records, rows)
    for name, path in scores.items():
        scored[name] = join_truth(records, rows_of(path))
        if name in genuine_files:
            genuine_scores[name] = ok_scores(genuine_rows(name, genuine_files[name]))
            check_genuine(name, genuine_scores[name])
        elif genuine:
            raise SystemExit(f"--scores {name}: give its genuine images' scores with --genuine-scores {name}=CSV")
    for name, rows in scored.items():
        check_scored(name, rows, records)
    needed = genuine_needed(args.target_fpr)
    for name, values in genuine_scores.items():
        if len(values) < needed:
            log.warning(
                "%s: its threshold is calibrated on %d genuine images; a target FPR of %g needs at least %d "
                "for the calibrated row's genuine TNR to mean what it says",
                name,
                len(values),
                args.target_fpr,
                needed,
            )
    return fraudbench_table(scored, genuine_scores or None, target_fpr=args.target_fpr, threshold=args.threshold)


def write_table(table: dict, output: Path) -> None:
    """The Markdown table at `output`, its JSON and CSV beside it, each written whole or not at all."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(output) as markdown:
        markdown.write_text(fraudbench_table_markdown(table))
    with atomic_path(output.with_suffix(".json")) as data:
        data.write_text(json.dumps(table, indent=2, allow_nan=True))
    with atomic_path(output.with_suffix(".csv")) as flat, flat.open("w", newline="") as handle:
        columns = [
            "detector",
            "threshold_kind",
            "threshold",
            *[f"tpr_{g}" for g in table["generators"]],
            "tnr",
            "balanced_accuracy",
            "f1",
            "n_categories",
            "n_calibration_genuine",
            "target_fpr",
        ]
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in table["rows"]:
            flat = {k: v for k, v in row.items() if k != "tpr_by_generator"}
            flat.update({f"tpr_{g}": row["tpr_by_generator"].get(g) for g in table["generators"]})
            writer.writerow({key: escape_cell(value) for key, value in flat.items()})  # a detector named =...


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="FraudBench tree or any labelled input")
    parser.add_argument("--layout", default="auto", help="layout of --data (default: detected)")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH", help=".ckpt or .onnx")
    parser.add_argument("--scores", action="append", default=[], metavar="NAME=CSV", help="infer.py results on --data")
    parser.add_argument("--genuine", default=None, help="the user's genuine images, for the calibrated threshold")
    parser.add_argument("--genuine-layout", default="auto")
    parser.add_argument("--genuine-scores", action="append", default=[], metavar="NAME=CSV")
    parser.add_argument("--target-fpr", type=float, default=0.05, help="genuine images flagged at most (0.05)")
    parser.add_argument("--threshold", type=float, default=0.5, help="the fixed threshold (FraudBench: 0.5)")
    parser.add_argument("--output", type=Path, required=True, help="Markdown table (.json, .csv written next to it)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    if not (0.0 < args.target_fpr < 1.0 and 0.0 <= args.threshold <= 1.0):  # after every model was scored before
        given = f"{args.target_fpr}, {args.threshold}"
        raise SystemExit(f"--target-fpr must lie in (0, 1) and --threshold in [0, 1], got {given}")
    if args.output.is_dir():  # the table's three files and its scores folder are named after it
        raise SystemExit(f"--output {args.output} is a folder: give the table's file, e.g. {args.output / 'table.md'}")
    if args.output.suffix.lower() != ".md":  # the .json and .csv written beside it would replace it
        raise SystemExit(f"--output is the Markdown table and must end in .md, got {args.output}")
    try:
        table = build_table(args)
    except (LayoutError, ModelLoadError) as error:  # a missing --data or --model: one line, not a traceback
        raise SystemExit(f"fraudbench_table: {error}") from None
    write_table(table, args.output)
    print(fraudbench_table_markdown(table))
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
