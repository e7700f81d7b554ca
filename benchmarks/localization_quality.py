"""Localization quality per operation on generated data, within a stated CPU budget (a script).

    python benchmarks/localization_quality.py [--detectors seg_tiny mvss_tiny] [--minutes 10]
        [--epochs 30] [--output-dir outputs/localization_quality] [--readme README.md]

1. Generates (once) a localization set from the bundled photographs with `synthesis.dataset`:
   splicing, copy-move, inpainting, AI region edit (a small autoencoder regenerates a region) and
   damage (scratches, cracks, stains, tears), with masks; splits are drawn by source photo, so no
   photo's genuine or forged images straddle train and test.
2. Trains every detector with `train.py` (`data=localization trainer=cpu`) for at most `--epochs`
   epochs or `--minutes` of wall time (Lightning's `max_time`), whichever comes first; the best
   checkpoint by validation pixel F1 is kept.
3. Scores the held-out test photos whole (padded to the network's stride, as `infer.py` does) and
   writes per operation: pixel F1 per image at 0.5 (averaged over manipulated images) and at the best
   threshold per image (an oracle), pixel IoU, pixel AUROC, image AUROC (that operation's forgeries
   against all genuine test images) and the genuine pixel false-positive rate (fraction of genuine
   pixels above 0.5). The table goes to `<output-dir>/localization_quality.md` and `results.json`,
   and, with `--readme`, between the `localization-quality` markers of that file.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from datamodules.io import read_image, read_mask  # noqa: E402
from datamodules.layouts import read_layout  # noqa: E402
from evaluation import PixelMetricAccumulator, image_metrics  # noqa: E402
from inference.runtime import load_checkpoint  # noqa: E402

OPERATIONS = ("splicing", "copy_move", "inpainting", "region_edit", "damage")
SPEC = {"kind": "forgery", "ops": {"splicing": 0.5, "copy_move": 0.75, "inpainting": 0.5, "region_edit": 0.5,
                                   "damage": 0.5},
        "max_side": 160, "crops_per_photo": 3, "crop_size": 96, "crop_scales": (0.4, 0.8), "min_panel_side": 96,
        "generator": {"variants": ("nearest_conv", "bilinear_conv"), "steps": 150}}
COLUMNS = ("pixel_f1", "pixel_f1_best", "pixel_iou", "pixel_auroc", "image_auroc", "pixel_fpr_genuine",
           "whole_image_f1", "n_masks")
MARKERS = ("<!-- localization-quality:start -->", "<!-- localization-quality:end -->")


def make_data(folder: Path) -> Path:
    from synthesis.dataset import DatasetSpec, make_generated_manifest

    if not (folder / "manifest.csv").is_file():
        make_generated_manifest(folder, DatasetSpec(**SPEC), progress=False)
    return folder / "manifest.csv"


def operation(group: str | None) -> str | None:
    """The operation of a generated group (region edits are named after their generator)."""
    return "region_edit" if group and group.endswith("_region") else group


def train(detector: str, data: Path, run: Path, epochs: int, minutes: float, reuse: bool) -> tuple[Path, float]:
    """Train in a subprocess (`train.py`), return (best checkpoint, seconds); `reuse` keeps a finished run."""
    timing = run / "train_seconds.txt"
    if reuse and timing.is_file() and (run / "checkpoints" / "best.ckpt").is_file():
        return run / "checkpoints" / "best.ckpt", float(timing.read_text())
    command = [sys.executable, str(ROOT / "train.py"), f"detector={detector}", "data=localization",
               f"data.root={data}", "data.num_workers=0", "trainer=cpu", f"trainer.max_epochs={epochs}",
               f"+trainer.max_time='00:00:{int(minutes):02d}:{round(minutes % 1 * 60):02d}'", "trainer.enable_progress_bar=false", "test=false",
               f"hydra.run.dir={run}"]
    started = time.perf_counter()
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "train.log", "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    seconds = time.perf_counter() - started
    timing.write_text(f"{seconds:.1f}")
    return run / "checkpoints" / "best.ckpt", seconds


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
        table[op] = {**pixel, "image_auroc": image_metrics(labels, scores)["auroc"],
                     "whole_image_f1": whole_f1}
    return table


def markdown(results: list[dict]) -> str:
    head = ["detector", "operation", *COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for result in results:
        for op, row in result["operations"].items():
            cells = [f"{row[k]:.3f}" if k != "n_masks" else str(int(row[k])) for k in COLUMNS]
            lines.append(f"| {result['detector']} | {op} | " + " | ".join(cells) + " |")
    budget = ", ".join(f"{r['detector']} {r['train_seconds'] / 60:.1f} min" for r in results)
    lines.append("")
    lines.append(f"Training wall time on this machine's CPU: {budget}.")
    return "\n".join(lines)


def write_readme(readme: Path, text: str) -> None:
    content = readme.read_text()
    start, end = content.index(MARKERS[0]) + len(MARKERS[0]), content.index(MARKERS[1])
    readme.write_text(content[:start] + "\n" + text + "\n" + content[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--detectors", nargs="+", default=["seg_tiny", "mvss_tiny"])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-time budget of each training run")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "outputs" / "localization_quality")
    parser.add_argument("--readme", type=Path, default=None, help="also write the table into this file")
    parser.add_argument("--reuse", action="store_true", help="evaluate finished runs again without retraining")
    args = parser.parse_args(argv)
    manifest = make_data(args.output_dir / "data")
    results = []
    for detector in args.detectors:
        checkpoint, seconds = train(detector, manifest.parent, args.output_dir / detector, args.epochs, args.minutes,
                                    args.reuse)
        results.append({"detector": detector, "train_seconds": seconds, "operations": evaluate(checkpoint, manifest)})
    text = markdown(results)
    (args.output_dir / "results.json").write_text(json.dumps(results, indent=1))
    (args.output_dir / "localization_quality.md").write_text(text + "\n")
    if args.readme:
        write_readme(args.readme, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
