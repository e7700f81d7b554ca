"""What `python train.py detector=<a localizer>` with no data gives, end to end (a script).

    python -m benchmarks.localization_default [--detector evidence_tiny] [--data-dir DIR]
        [--output-dir outputs/localization_default] [--runs 1] [--split test] [TRAIN.PY OVERRIDES ...]

1. Runs `train.py detector=<detector>` with no data argument, as a user would on a fresh machine:
   the embedded localization set is generated under `--data-dir` on first use (delete the folder
   to time the generation too), trained on its train photos, calibrated on its validation photos
   and tested on its held-out test photos. Wall time, the CPU seconds of the run (user + system,
   which on a loaded machine says more than the wall time) and the load average before and after
   are recorded.
2. Scores the held-out test split again with the best checkpoint, each image whole as `infer.py`
   does, and writes pixel F1 (at probability 0.5), pixel AUROC, the genuine pixel false-positive
   rate and image AUROC, over all manipulated test images and per operation (each operation's
   forgeries with all genuine test images), to `results_<detector>.json` and
   `localization_default_<detector>.md` (`_seed<N>` added for a set drawn with
   `data.localizers.seed=N`, which gets its own data folder too; `_val` for `--split val` and a
   short hash of any other overrides, so runs of other settings keep their own runs and results).
   `--split val` scores the validation split instead: settings are chosen there, never on test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import warnings
import zlib
from pathlib import Path
from typing import Any, Sequence

import torch

from benchmarks.localization_table import score_split
from datamodules.layouts import read_layout
from detectors.registry import list_detectors
from evaluation import PixelMetricAccumulator, image_metrics
from inference.runtime import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("pixel_f1", "pixel_auroc", "pixel_fpr_genuine", "image_auroc", "n_masks", "n_genuine")


def run_train(detector: str, data_dir: Path, run_dir: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """`train.py detector=<detector>` in a subprocess; its timing and the test metrics it wrote."""
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        f"detector={detector}",
        f"paths.data_dir={data_dir}",
        f"hydra.run.dir={run_dir}",
        "trainer.enable_progress_bar=false",
        *overrides,
    ]
    generated = not (data_dir / "embedded_localization" / "manifest.csv").is_file()
    load_before = os.getloadavg()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    shutil.rmtree(run_dir, ignore_errors=True)  # the run it replaces: train.py refuses a used run directory
    run_dir.mkdir(parents=True)
    with open(run_dir / "stdout.log", "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    return {
        "command": " ".join(["python train.py", *command[2:]]),
        "data_generated": generated,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(
            (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime), 1
        ),
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in os.getloadavg()],
        **training_length(last),
        "train_py_metrics": json.loads((run_dir / "metrics.json").read_text()),
    }


def training_length(checkpoint: dict[str, Any]) -> dict[str, int]:
    """Epochs and steps a checkpoint was trained for: none for a training-free localizer, whose
    checkpoint holds its settings and threshold only."""
    return {"epochs": int(checkpoint.get("epoch", -1)) + 1, "steps": int(checkpoint.get("global_step", 0))}


def metrics_of(scored: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Pixel metrics at 0.5 and image AUROC of scored test images (`score_split`'s items)."""
    accumulator = PixelMetricAccumulator(0.5)
    for item in scored:
        accumulator.add(item["mask"], item["prob"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pixel = accumulator.compute()
        image = image_metrics([int(i["op"] is not None) for i in scored], [i["score"] for i in scored])
    forged = sum(i["op"] is not None for i in scored)
    return {
        "pixel_f1": pixel["pixel_f1"],
        "pixel_auroc": pixel["pixel_auroc"],
        "pixel_fpr_genuine": pixel["pixel_fpr_genuine"],
        "image_auroc": image["auroc"],
        "n_masks": forged,
        "n_genuine": len(scored) - forged,
    }


@torch.inference_mode()
def per_operation(checkpoint: Path, manifest: Path, split: str = "test") -> dict[str, dict[str, float]]:
    """One split's metrics over all manipulated images and per operation, each image scored whole."""
    net = load_checkpoint(checkpoint).net.eval()
    records = [r for r in read_layout(manifest.parent, "auto") if r.split == split and (r.label == 0 or r.mask)]
    scored, _ = score_split(net, records, "clean")
    operations = sorted({i["op"] for i in scored if i["op"] is not None})
    table = {"all": metrics_of(scored)}
    for op in operations:
        table[op] = metrics_of([i for i in scored if i["op"] in (None, op)])
    return table


def markdown(detector: str, runs: Sequence[dict[str, Any]]) -> str:
    lines = []
    for number, run in enumerate(runs, 1):
        lines += [
            f"Run {number}: `{run['command']}`; data generated in this run: {run['data_generated']}; "
            f"wall {run['wall_seconds'] / 60:.1f} min, CPU {run['cpu_seconds'] / 60:.1f} min (user + system), "
            f"{run['epochs']} epochs / {run['steps']} steps; load average before {run['load_before']}, "
            f"after {run['load_after']}.",
            "",
            f"| {detector}, {run['split']} split | " + " | ".join(COLUMNS) + " |",
            "|---" * (len(COLUMNS) + 1) + "|",
        ]
        for op, figures in run["per_operation"].items():
            cells = [f"{figures[c]:.3f}" if isinstance(figures[c], float) else str(figures[c]) for c in COLUMNS]
            lines.append(f"| {op} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--detector", default="evidence_tiny")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the embedded set is made (default: <output-dir>/data, data_seed<N> for data.localizers.seed=N)",
    )
    parser.add_argument("--output-dir", type=Path, default=ROOT / "outputs" / "localization_default")
    parser.add_argument("--runs", type=int, default=1, help="train.py runs one after the other (seeds 0, 1, ...)")
    parser.add_argument(
        "--split", default="test", choices=("val", "test"), help="the split scored (choose settings on val)"
    )
    parser.add_argument("overrides", nargs="*", help="more train.py overrides")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be 1 or more, got {args.runs}")
    if args.detector not in list_detectors():
        parser.error(f"unknown detector {args.detector!r}; known: {', '.join(list_detectors())}")
    # a set drawn with another seed is another set: its own folder, and runs named after it
    data_seed = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("data.localizers.seed=")), "0")
    drawn = "" if data_seed == "0" else f"_seed{data_seed}"
    data_dir = args.data_dir or args.output_dir / f"data{drawn}"
    # other settings (overrides, the split scored) are other runs: their own folders and results files
    others = sorted(o for o in args.overrides if not o.startswith("data.localizers.seed="))
    variant = ("" if args.split == "test" else f"_{args.split}") + (
        f"_{zlib.crc32(' '.join(others).encode()):08x}" if others else ""
    )
    runs = []
    for seed in range(args.runs):
        run_dir = args.output_dir / (f"{args.detector}_seed{seed}" + (f"_data{drawn}" if drawn else "") + variant)
        try:
            run = run_train(args.detector, data_dir, run_dir, [f"seed={seed}", *args.overrides])
        except subprocess.CalledProcessError as failed:
            parser.exit(1, f"train.py exited {failed.returncode}; its output: {run_dir / 'stdout.log'}\n")
        checkpoint = Path(run["train_py_metrics"]["checkpoint"])
        manifest = data_dir / "embedded_localization" / "manifest.csv"
        run["split"] = args.split
        run["per_operation"] = per_operation(checkpoint, manifest, args.split)
        runs.append(run)
        print(markdown(args.detector, runs[-1:]), flush=True)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{args.detector}{drawn}{variant}"  # one detector's runs on one set do not replace another's
    (args.output_dir / f"results_{stem}.json").write_text(json.dumps(runs, indent=1, default=float))
    (args.output_dir / f"localization_default_{stem}.md").write_text(markdown(args.detector, runs) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
