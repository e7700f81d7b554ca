"""Score any localizer's maps the way THEMIS scores MLLMs: as numbered blocks (a command).

    python infer.py model=MODEL.ckpt input=data/manifest.csv output=runs/scores.csv save_masks=true
    python -m tools.themis_blocks runs/scores.csv --manifest data/manifest.csv [--grid 3x3]
        [--threshold 0.5] [--pred-coverage 0.5] [--true-coverage 0.0] [--partitions DIR]
        [--task splicing=SPL --task copy_move=CM --task region=AIG] [--output table.md]

THEMIS (Ma et al., 2026, arXiv 2603.25089, App. B.3) asks a model for the numbered regions of a
panel that are forged and scores the answer with block IoU and set-based F1. Here each image is cut
into a `rows x cols` grid numbered row-major (or into the regions of a label image named like the
image in `--partitions`: pixel value = region id, 0 = no region); a block is *predicted* forged when
at least `--pred-coverage` of its pixels reach `--threshold` in the saved map, and *truly* forged
when the true mask covers at least `--true-coverage` of it (at 0: any of it). Means are over the
manipulated images of each task (groups matched by substring, `--task GROUP=TASK`) whose true mask
marks a pixel: one marking none is left out and counted aloud, as infer.py's pixel metrics leave it
out (an empty answer to an empty truth would score 1). Genuine images report the fraction of them
with any block flagged. A row answering every block shows what a map that flags everything would
score (the reference any detector must beat). The table puts the MLLM figures of THEMIS Tables 9-11
beside ours: those were measured on THEMIS's academic panels, ours on whatever data you score, so
the rows are the same protocol on different images, not a head-to-head comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from datamodules.io import ImageReadError, read_mask
from datamodules.layouts import read_layout
from evaluation.protocols.themis import block_localization, forged_regions, grid_partition
from inference.writer import read_results

DEFAULT_TASKS = {"splicing": "SPL", "copy_move": "CM", "copy-move": "CM", "region": "AIG", "generated": "AIG"}
# THEMIS Tables 9-11 (synthetic academic panels): (IoU %, set-based F1 %) per task.
THEMIS_MLLM = {
    "GPT-5": {"SPL": (16.67, 20.27), "CM": (36.41, 46.11), "AIG": (19.33, 22.21)},
    "OpenAI o4-mini-high": {"SPL": (10.44, 12.81), "CM": (29.78, 39.32), "AIG": (19.79, 22.86)},
    "Qwen-VL-Max": {"SPL": (40.07, 52.84), "CM": (48.34, 60.94), "AIG": (35.85, 43.87)},
    "Gemini 2.5 Flash": {"SPL": (56.72, 65.08), "CM": (46.98, 57.90), "AIG": (38.87, 44.76)},
    "Doubao-Seed-1.6-thinking": {"SPL": (12.09, 16.24), "CM": (13.58, 18.47), "AIG": (15.19, 18.09)},
    "Doubao-Seed-1.6-vision": {"SPL": (31.42, 42.49), "CM": (26.97, 36.65), "AIG": (29.90, 35.11)},
    "Gemini 2.5 Pro": {"SPL": (46.65, 59.50), "CM": (46.61, 60.28), "AIG": (47.20, 54.66)},
    "GLM-4.5V": {"SPL": (8.54, 9.76), "CM": (22.23, 26.75), "AIG": (10.63, 12.41)},
    "Claude Sonnet 4.5": {"SPL": (14.95, 17.20), "CM": (44.12, 50.31), "AIG": (20.98, 25.00)},
    "Qwen2.5-VL-72B": {"SPL": (51.66, 57.60), "CM": (55.16, 64.58), "AIG": (35.57, 41.58)},
    "InternVL3.5-8B": {"SPL": (43.38, 46.37), "CM": (40.24, 47.75), "AIG": (33.19, 37.77)},
    "Llama 4 Maverick": {"SPL": (17.97, 20.51), "CM": (28.50, 35.47), "AIG": (19.71, 23.46)},
    "LLaVA-Interleave-7B": {"SPL": (35.97, 47.50), "CM": (25.22, 36.99), "AIG": (32.06, 41.56)},
    "LLaVA-NeXT-34B": {"SPL": (50.70, 52.82), "CM": (45.25, 53.35), "AIG": (34.01, 40.13)},
    "Qwen2.5-VL-32B": {"SPL": (5.91, 7.23), "CM": (18.93, 20.79), "AIG": (7.45, 9.17)},
    "Gemma 3 27B": {"SPL": (27.78, 34.62), "CM": (32.80, 41.58), "AIG": (26.44, 32.92)},
}


def task_of(group: str | None, tasks: Mapping[str, str]) -> str | None:
    """The THEMIS task of a record's group: the first `tasks` key contained in it, else None."""
    return next((task for key, task in tasks.items() if key in (group or "")), None)


def partition_for(shape: tuple[int, int], grid: tuple[int, int], partitions: Path | None, path: str) -> np.ndarray:
    """A given partition (a label image named like `path` in `partitions`) or the numbered grid."""
    if partitions is not None:
        candidate = partitions / Path(path).name
        if candidate.with_suffix(".png").is_file():
            candidate = candidate.with_suffix(".png")
        if candidate.is_file():
            from PIL import Image

            labels = np.asarray(Image.open(candidate))
            if labels.shape[:2] != shape:
                raise ValueError(f"partition {candidate} is {labels.shape[:2]}, the image {shape}")
            return labels.astype(np.int32)
    return grid_partition(shape, *grid)


def score_images(
    items: Iterable[Mapping[str, Any]],
    grid: tuple[int, int] = (3, 3),
    threshold: float = 0.5,
    pred_coverage: float = 0.5,
    true_coverage: float = 0.0,
    partitions: Path | None = None,
) -> list[dict[str, Any]]:
    """Block answers per image. Each item: `map` (H x W probabilities in [0, 1]), `truth` (H x W
    {0, 1}, None for genuine images), `task`, `path`. Returns one dict per image."""
    answers = []
    for item in items:
        probabilities = np.asarray(item["map"], dtype=np.float32)
        partition = partition_for(probabilities.shape, grid, partitions, item.get("path", ""))
        if item.get("truth") is None:
            flagged = forged_regions(probabilities >= threshold, partition, pred_coverage)
            answers.append({"path": item.get("path"), "task": "genuine", "predicted": sorted(flagged)})
            continue
        result = block_localization(item["truth"], probabilities, partition, threshold, pred_coverage, true_coverage)
        answers.append({"path": item.get("path"), "task": item["task"], **result})
    return answers


def summarize(answers: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean block IoU and set-based F1 (%) per task over manipulated images; for genuine images the
    percentage with at least one block flagged."""
    summary: dict[str, dict[str, float]] = {}
    for task in sorted({a["task"] for a in answers}):
        chosen = [a for a in answers if a["task"] == task]
        if task == "genuine":
            summary[task] = {
                "n": len(chosen),
                "flagged": 100.0 * float(np.mean([bool(a["predicted"]) for a in chosen])),
            }
        else:
            summary[task] = {
                "n": len(chosen),
                "iou": 100.0 * float(np.mean([a["iou"] for a in chosen])),
                "f1": 100.0 * float(np.mean([a["f1"] for a in chosen])),
            }
    return summary


def table(ours: Mapping[str, Mapping[str, Mapping[str, float]]], tasks: Sequence[str] = ("SPL", "CM", "AIG")) -> str:
    """Markdown: our detectors' block IoU / set-F1 per task, then THEMIS's MLLM rows (cited)."""
    header = "| model | images | " + " | ".join(f"{t} IoU | {t} set-F1" for t in tasks) + " | genuine flagged |"
    lines = [header, "|" + " --- |" * (3 + 2 * len(tasks))]
    for name, summary in ours.items():
        cells = []
        for task in tasks:
            value = summary.get(task)
            cells += [f"{value['iou']:.2f} (n={value['n']})", f"{value['f1']:.2f}"] if value else ["-", "-"]
        genuine = summary.get("genuine")
        flagged = f"{genuine['flagged']:.1f} % (n={genuine['n']})" if genuine else "-"
        lines.append(f"| {name} | ours | " + " | ".join(cells) + f" | {flagged} |")
    for model, values in THEMIS_MLLM.items():
        cells = [f"{values[t][i]:.2f}" for t in tasks for i in (0, 1)]
        lines.append(f"| {model} | THEMIS | " + " | ".join(cells) + " | - |")
    lines.append("")
    lines.append(
        "Rows marked THEMIS: Ma et al., THEMIS (arXiv 2603.25089), Tables 9-11, MLLMs answering with region "
        "numbers on THEMIS's synthetic academic panels. Rows marked ours: the same block protocol on "
        "different images (the data scored here); compare protocols, not images."
    )
    return "\n".join(lines)


SAID = {  # what is said of manipulated images not scored as they are, counted by group or task
    "no_task": "left out, their group matching no --task",
    "no_mask": "left out, no true mask",
    "blank": "left out, their mask marking no pixel",
    "resized": "scored with their mask resized to the image",
}


def load_items(
    results_path: Path, inputs: Path, tasks: Mapping[str, str], said: Counter | None = None
) -> list[dict[str, Any]]:
    """infer.py's rows (with saved maps) joined by path to the scored input's true masks and groups
    (a manifest or any layout infer.py reads). Manipulated images are left out, as from infer.py's
    pixel metrics, without a mask, with a mask marking no pixel (nothing to find, and finding
    nothing would score 1) or of a group that matches no task; `said` counts them per (`SAID` reason,
    group or task), and the masks of another size than the map, scored resized to it (blocks are
    fractions of the image), under ("resized", task)."""
    records = {str(Path(r.path).resolve()): r for r in read_layout(inputs)}
    said = said if said is not None else Counter()
    items = []
    for row in read_results(results_path):
        record = records.get(str(Path(row["path"]).resolve()))
        if row.get("status") != "ok" or record is None or record.label is None or not row.get("mask"):
            continue
        task = task_of(record.group, tasks) if record.label == 1 else "genuine"
        if task is None:
            said["no_task", record.group or "(none)"] += 1
            continue
        if record.label == 1 and not record.mask:
            said["no_mask", task] += 1
            continue
        try:
            probabilities = _read_map(row["mask"])
            truth = (read_mask(record.mask) > 0).astype(np.uint8) if record.mask else None
        except ImageReadError as error:
            print(f"skipping {row['path']}: {error.reason}", file=sys.stderr)
            continue
        if truth is not None and not truth.any():
            said["blank", task] += 1
            continue
        if truth is not None and truth.shape != probabilities.shape:
            said["resized", task] += 1
        items.append({"path": row["path"], "map": probabilities, "truth": truth, "task": task})
    return items


def say_left_out(results: Path, said: Counter) -> None:
    """One stderr line per reason, with its counts by group or task."""
    for reason, sentence in SAID.items():
        counts = {name: n for (kind, name), n in said.items() if kind == reason}
        if counts:
            print(f"{results}: {sentence}: {counts}", file=sys.stderr)


def _read_map(path: str) -> np.ndarray:
    """An 8-bit probability map written by infer.py (0..255 -> 0..1)."""
    from PIL import Image

    try:
        return np.asarray(Image.open(path).convert("L"), dtype=np.float32) / 255.0
    except (OSError, ValueError) as error:
        raise ImageReadError(path, f"cannot read the map: {error}") from None


def parse_grid(text: str) -> tuple[int, int]:
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--grid must look like 3x3, got {text!r}") from None
    if rows < 1 or cols < 1:
        raise argparse.ArgumentTypeError("--grid needs at least one row and one column")
    return rows, cols


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="infer.py outputs with a mask column (one per model)")
    parser.add_argument(
        "--manifest", type=Path, required=True, help="the scored input: a manifest or a layout (true masks, groups)"
    )
    parser.add_argument("--names", nargs="*", help="model names for the table (default: result file stems)")
    parser.add_argument("--grid", type=parse_grid, default=(3, 3))
    parser.add_argument("--partitions", type=Path, help="folder of region label images named like the images")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--pred-coverage", type=float, default=0.5)
    parser.add_argument("--true-coverage", type=float, default=0.0)
    parser.add_argument("--task", action="append", default=[], help="GROUP=TASK (substring of the group)")
    parser.add_argument("--output", type=Path, help="write the table (markdown) and a .json beside it")
    parser.add_argument("--no-baseline", action="store_true", help="leave out the every-block-flagged row")
    args = parser.parse_args(argv)
    if malformed := [item for item in args.task if "=" not in item]:
        parser.error(f"--task takes GROUP=TASK, got {malformed}")
    if not all(0.0 <= value <= 1.0 for value in (args.threshold, args.pred_coverage, args.true_coverage)):
        parser.error("--threshold, --pred-coverage and --true-coverage are fractions between 0 and 1")
    tasks = dict(item.split("=", 1) for item in args.task) if args.task else DEFAULT_TASKS
    unknown = sorted(set(tasks.values()) - set(DEFAULT_TASKS.values()))
    if unknown:
        parser.error(f"--task GROUP=TASK takes THEMIS's tasks {sorted(set(DEFAULT_TASKS.values()))}, got {unknown}")
    names = args.names or [path.stem for path in args.results]
    if len(names) != len(args.results):
        parser.error("--names needs one name per results file")
    ours = {}
    for name, results in zip(names, args.results):
        if not results.is_file():
            parser.error(f"{results} does not exist")
        said: Counter = Counter()
        items = load_items(results, args.manifest, tasks, said)
        say_left_out(results, said)
        if not items:
            parser.error(f"{results}: no scored image with a saved map matches the manifest (save_masks=true?)")
        ours[name] = summarize(
            score_images(items, args.grid, args.threshold, args.pred_coverage, args.true_coverage, args.partitions)
        )
    if not args.no_baseline:  # answering every block: what a map that flags everything would score
        items = [
            {**item, "map": np.ones_like(item["map"])} for item in load_items(args.results[0], args.manifest, tasks)
        ]
        ours["(every block flagged)"] = summarize(
            score_images(items, args.grid, args.threshold, args.pred_coverage, args.true_coverage, args.partitions)
        )
    text = table(ours)
    settings = (
        f"Grid {args.grid[0]}x{args.grid[1]}" if not args.partitions else "Given partitions"
    ) + f"; pixel threshold {args.threshold}; a block is flagged at {args.pred_coverage:.0%} coverage."
    text = f"{text}\n{settings}\n"
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        args.output.with_suffix(".json").write_text(json.dumps(ours, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
