"""Localization quality per operation on generated data, within a stated CPU budget (a script).

    python -m benchmarks.localization_quality [--detectors seg_tiny mvss_tiny trufor_tiny
        trufor_tiny:noise_input=rgb] [--minutes 10] [--epochs 30] [--output-dir outputs/localization_quality]
        [--readme docs/results/localization.md] [--robustness] [--robustness-max-images 200]

A detector is a config name or a variant `NAME:KEY=VALUE[,KEY=VALUE...]`, each KEY a field of the
config's `net` (`trufor_tiny:noise_input=rgb` is TruFor without its fingerprint branch); the row is
labelled with the variant as written.

1. Generates (once) a localization set from the bundled photographs with `synthesis.dataset`:
   splicing, copy-move, inpainting, AI region edit (a small autoencoder regenerates a region) and
   damage (scratches, cracks, stains, tears), with masks; splits are drawn by source photo, so no
   photo's genuine or forged images straddle train and test.
2. Trains every detector with `train.py` (`data=localization trainer=cpu`) for at most `--epochs`
   epochs or `--minutes` of wall time (Lightning's `max_time`), whichever comes first; the best
   checkpoint by validation pixel F1 within the genuine pixels' bound (`train.py`'s monitor) is kept.
3. Scores the held-out test photos whole (padded to the network's stride, as `infer.py` does) and
   writes per operation: pixel F1 per image at 0.5 (averaged over manipulated images) and at the best
   threshold per image (an oracle), pixel IoU, pixel AUROC, image AUROC (that operation's forgeries
   against all genuine test images) and the genuine pixel false-positive rate (fraction of genuine
   pixels above 0.5). The table goes to `<output-dir>/localization_quality.md` and `results.json`,
   and, with `--readme`, between the `localization-quality` markers of that file, with each run's
   optimizer steps, epochs, minutes and the machine's load average.
4. With `--robustness`, scores the same held-out images again with `infer.py robustness=true`
   (JPEG quality 95 -> 30, rescaling 0.5 -> 1.5; the product's scoring path, maps compared with the
   masks at the original size) and writes pixel F1 and pixel AUROC vs strength over every manipulated
   test image to `localization_robustness.md` (and between the `localization-robustness` markers).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from datamodules.io import read_image, read_mask
from datamodules.layouts import read_layout
from detectors.registry import list_detectors
from evaluation import PixelMetricAccumulator, image_metrics
from inference.runtime import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]

OPERATIONS = ("splicing", "copy_move", "inpainting", "region_edit", "damage")
SPEC = {
    "kind": "forgery",
    "ops": {"splicing": 0.5, "copy_move": 0.75, "inpainting": 0.5, "region_edit": 0.5, "damage": 0.5},
    "max_side": 160,
    "crops_per_photo": 3,
    "crop_size": 96,
    "crop_scales": (0.4, 0.8),
    "min_panel_side": 96,
    "generator": {"variants": ("nearest_conv", "bilinear_conv"), "steps": 150},
}
COLUMNS = (
    "pixel_f1",
    "pixel_f1_best",
    "pixel_iou",
    "pixel_auroc",
    "image_auroc",
    "pixel_fpr_genuine",
    "whole_image_f1",
    "n_masks",
)
MARKERS = ("<!-- localization-quality:start -->", "<!-- localization-quality:end -->")
ROBUSTNESS_MARKERS = ("<!-- localization-robustness:start -->", "<!-- localization-robustness:end -->")
ROBUSTNESS_PERTURBATIONS = ("jpeg", "rescale")


def parse_variant(spec: str) -> tuple[str, list[str]]:
    """`NAME[:KEY=VALUE[,KEY=VALUE...]]` -> (detector config name, `detector.net.KEY=VALUE` overrides).
    A value may hold commas when the next item does not look like `KEY=` (`embed_dims=[8,16]`)."""
    name, _, rest = spec.partition(":")
    if name not in list_detectors():
        raise ValueError(f"unknown detector {name!r} in {spec!r}; known: {', '.join(list_detectors())}")
    overrides = []
    for item in re.split(r",(?=[A-Za-z_][\w.]*=)", rest) if rest else []:
        key, equals, value = item.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][\w.]*", key):
            raise ValueError(f"bad variant {spec!r}: expected NAME:KEY=VALUE[,KEY=VALUE...], got {item!r}")
        overrides.append(f"detector.net.{key}={value}")
    return name, overrides


def run_name(spec: str) -> str:
    """A folder name for a variant (`trufor_tiny:noise_input=rgb` -> `trufor_tiny-noise_input-rgb`):
    no `=`, which Hydra would read as an override in `hydra.run.dir`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", spec)


def make_data(folder: Path, spec: dict | None = None) -> Path:
    """The generated set of `spec` (`synthesis.spec.DatasetSpec` fields; default `SPEC`) under
    `folder`, made once and reused while it was made with the same settings (`dataset_spec.json`):
    a set made with others (an earlier version of the benchmark) is refused, not scored as this one."""
    from synthesis.dataset import DatasetSpec, make_generated_manifest

    wanted = json.loads(json.dumps(SPEC if spec is None else spec))
    recorded = folder / "dataset_spec.json"
    if (folder / "manifest.csv").is_file():
        made = json.loads(recorded.read_text()) if recorded.is_file() else None
        if made != wanted:
            raise ValueError(
                f"{folder} holds a generated set made with other settings than this benchmark's "
                f"({'none recorded' if made is None else made}); delete it or choose another --output-dir"
            )
        return folder / "manifest.csv"
    make_generated_manifest(folder, DatasetSpec(**wanted), progress=False)
    recorded.write_text(json.dumps(wanted, indent=1))
    return folder / "manifest.csv"


def operation(group: str | None) -> str | None:
    """The operation of a generated group (region edits are named after their generator)."""
    return "region_edit" if group and group.endswith("_region") else group


def train(spec: str, data: Path, run: Path, epochs: int, minutes: float, reuse: bool) -> tuple[Path, dict]:
    """Train a detector or variant in a subprocess (`train.py`); return (best checkpoint, budget:
    seconds, optimizer steps, epochs, load average before and after). `reuse` keeps a finished run
    of the same spec, data, epochs and minutes; a run of other settings in `run` is trained again."""
    detector, overrides = parse_variant(spec)
    timing = run / "budget.json"
    settings = {"spec": spec, "data": str(Path(data).absolute()), "max_epochs": int(epochs), "minutes": float(minutes)}
    if reuse and timing.is_file() and (run / "checkpoints" / "best.ckpt").is_file():
        finished = json.loads(timing.read_text())
        if finished.get("settings") == settings:
            return run / "checkpoints" / "best.ckpt", finished
        print(f"{spec}: the run in {run} was trained with other settings; training again", flush=True)
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        f"detector={detector}",
        *overrides,
        "data=localization",
        f"data.root={data}",
        "data.num_workers=0",
        "trainer=cpu",
        f"trainer.max_epochs={epochs}",
        f"+trainer.max_time='00:00:{int(minutes):02d}:{round(minutes % 1 * 60):02d}'",
        "trainer.enable_progress_bar=false",
        "test=false",
        f"hydra.run.dir={run}",
    ]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    shutil.rmtree(run, ignore_errors=True)  # the run it replaces: train.py refuses a used run directory
    run.mkdir(parents=True)
    with open(run / "train.log", "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    budget = {
        "seconds": round(time.perf_counter() - started, 1),
        "steps": int(last["global_step"]),
        "epochs": int(last["epoch"]) + 1,
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "settings": settings,
    }
    timing.write_text(json.dumps(budget))
    return run / "checkpoints" / "best.ckpt", budget


@torch.inference_mode()
def evaluate(checkpoint: Path, manifest: Path) -> dict[str, dict[str, float]]:
    """Per operation metrics on the test split, each image scored whole."""
    net = load_checkpoint(checkpoint).net.eval()
    test = [r for r in read_layout(manifest.parent, "auto") if r.split == "test"]
    genuine_probs, genuine_scores = [], []
    by_op: dict[str, list[tuple[np.ndarray, np.ndarray, float]]] = {op: [] for op in OPERATIONS}
    for record in test:
        image = torch.from_numpy(read_image(record.path)).permute(2, 0, 1)[None].float() / 255
        outputs = net(image)
        prob = torch.sigmoid(outputs["mask_logit"])[0, 0].numpy()
        score = float(torch.sigmoid(outputs["logit"])[0])
        if record.label == 0:
            genuine_probs.append(prob)
            genuine_scores.append(score)
        elif operation(record.group) in by_op and record.mask:
            by_op[operation(record.group)].append((read_mask(record.mask), prob, score))
    table = {}
    for op, items in by_op.items():
        if not items:
            continue
        accumulator = PixelMetricAccumulator()
        for mask, prob, _ in items:
            accumulator.add(mask, prob)
        for prob in genuine_probs:
            accumulator.add(None, prob)
        pixel = accumulator.compute()
        whole = PixelMetricAccumulator()  # the trivial map that marks every pixel, for reference
        for mask, prob, _ in items:
            whole.add(mask, np.ones_like(prob))
        with warnings.catch_warnings():  # no genuine images here: its genuine FPR is undefined, unused
            warnings.simplefilter("ignore")
            whole_f1 = whole.compute()["pixel_f1"]
        labels = np.r_[np.ones(len(items)), np.zeros(len(genuine_scores))]
        scores = np.r_[[s for *_, s in items], genuine_scores]
        table[op] = {**pixel, "image_auroc": image_metrics(labels, scores)["auroc"], "whole_image_f1": whole_f1}
    return table


def test_manifest(manifest: Path, path: Path) -> Path:
    """The held-out images `evaluate` scores (genuine ones, and forgeries of `OPERATIONS` with a
    mask) as a manifest `infer.py` reads."""
    from datamodules.io import write_manifest

    rows = [
        r
        for r in read_layout(manifest.parent, "auto")
        if r.split == "test" and (r.label == 0 or (operation(r.group) in OPERATIONS and r.mask))
    ]
    write_manifest(rows, path)
    return path


def robustness(checkpoint: Path, manifest: Path, out: Path, max_images: int) -> dict:
    """`infer.py robustness=true` on the held-out images: the curves of its metrics.json."""
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        str(ROOT / "infer.py"),
        f"model={checkpoint}",
        f"input={manifest}",
        f"output={out / 'scores.csv'}",
        "robustness=true",
        f"robustness_max_images={max_images}",
        f"robustness_perturbations=[{','.join(ROBUSTNESS_PERTURBATIONS)}]",
        "num_workers=0",
        "progress=false",
        "batch_size=1",
    ]
    (out / "scores.csv").unlink(missing_ok=True)
    with open(out / "infer.log", "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    return json.loads((out / "scores.metrics.json").read_text())["robustness"]


def budget_line(results: list[dict]) -> str:
    parts = []
    for result in results:
        budget = result["budget"]
        parts.append(
            f"{result['detector']} {budget['steps']} steps / {budget['epochs']} epochs in "
            f"{budget['seconds'] / 60:.1f} min (load {budget['load'][0]:.1f} -> {budget['load'][1]:.1f})"
        )
    return (
        "Training budget on this machine's CPU (1-minute load average at start -> end of each run): "
        + "; ".join(parts)
        + "."
    )


def markdown(results: list[dict]) -> str:
    head = ["detector", "operation", *COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for result in results:
        for op, row in result["operations"].items():
            cells = [f"{row[k]:.3f}" if k != "n_masks" else str(int(row[k])) for k in COLUMNS]
            lines.append(f"| {result['detector']} | {op} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", budget_line(results)])


def robustness_markdown(results: list[dict]) -> str:
    """Pixel F1 and pixel AUROC against strength, one row per detector (the identity levels are `clean`)."""
    first = results[0]["robustness"]
    levels = [
        (name, level)
        for name in ROBUSTNESS_PERTURBATIONS
        for level in first["curves"][name]["levels"]
        if not (name == "rescale" and level == 1)
    ]
    names = {"jpeg": "JPEG {:g}", "rescale": "x{:g}"}
    lines = []
    for key in ("pixel_f1", "pixel_auroc"):
        head = [f"{key}: detector", "clean", *(names[name].format(level) for name, level in levels)]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for result in results:
            curves = result["robustness"]["curves"]
            cells = [result["robustness"]["clean"][key]] + [
                curves[name]["metrics"][key][curves[name]["levels"].index(level)] for name, level in levels
            ]
            lines.append(f"| {result['detector']} | " + " | ".join(f"{v:.3f}" for v in cells) + " |")
        lines.append("")
    clean = first["clean"]
    lines.append(
        f"Held-out images: {int(clean['n_masks'])} manipulated (all operations) with masks, "
        f"pixel metrics per manipulated image at probability 0.5 (AUROC threshold-free), averaged."
    )
    return "\n".join(lines)


def write_readme(readme: Path, text: str, markers: tuple[str, str] = MARKERS) -> None:
    content = readme.read_text()
    start, end = content.index(markers[0]) + len(markers[0]), content.index(markers[1])
    readme.write_text(content[:start] + "\n" + text + "\n" + content[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--detectors",
        nargs="+",
        default=["seg_tiny", "mvss_tiny"],
        help="detector configs or variants NAME:KEY=VALUE[,KEY=VALUE...] (KEY under `net`)",
    )
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-time budget of each training run")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "outputs" / "localization_quality")
    parser.add_argument("--readme", type=Path, default=None, help="also write the table(s) into this file")
    parser.add_argument("--reuse", action="store_true", help="evaluate finished runs again without retraining")
    parser.add_argument("--robustness", action="store_true", help="also sweep JPEG and rescaling (pixel F1, AUROC)")
    parser.add_argument("--robustness-max-images", type=int, default=500)
    args = parser.parse_args(argv)
    for spec in args.detectors:
        parse_variant(spec)  # fail on a typo before any training
    manifest = make_data(args.output_dir / "data")
    results = []
    for spec in args.detectors:
        run = args.output_dir / run_name(spec)
        checkpoint, budget = train(spec, manifest.parent, run, args.epochs, args.minutes, args.reuse)
        result = {"detector": spec, "budget": budget, "operations": evaluate(checkpoint, manifest)}
        if args.robustness:
            held_out = test_manifest(manifest, args.output_dir / "test_manifest.csv")
            result["robustness"] = robustness(checkpoint, held_out, run / "robustness", args.robustness_max_images)
        results.append(result)
        (args.output_dir / "results.json").write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (args.output_dir / "localization_quality.md").write_text(text + "\n")
    if args.robustness:
        robust = robustness_markdown(results)
        (args.output_dir / "localization_robustness.md").write_text(robust + "\n")
        text += "\n\n" + robust
    if args.readme:
        write_readme(args.readme, markdown(results))
        if args.robustness:
            write_readme(args.readme, robust, ROBUSTNESS_MARKERS)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
