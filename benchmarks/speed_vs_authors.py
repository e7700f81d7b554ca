"""Seconds per image of a detector in this toolkit next to its authors' released code (a script).

    python -m benchmarks.speed_vs_authors --detector trufor --images-dir DIR [--size 512] [--threads 2]
        [--authors authors.json] [--workdir outputs/speed_vs_authors] [--output speed.json]

Our side, on every image of `DIR` (written as seeded random PNGs at `--size` when the folder is
missing), with untrained weights (`pretrained` and `encoder_weights` off: speed does not depend on
them) and `--threads` CPU threads:

- `infer.py` with the `.ckpt` and with the `.onnx` (exported by `exporting.onnx_export`, parity-checked),
  each as its own process: wall time / images, so Python start-up, imports and model load count, as
  they do for a user's run (`batch_size=1`: whole-image localizers score one image at a time anyway);
- the raw forward pass on decoded tensors, eager PyTorch and onnxruntime: median seconds per image
  after one warm-up image.

`--authors` reads the other side from a JSON file measured on the same images, threads and machine:
`{"images": N, "size": S, "threads": T, "script_seconds": wall time of their test script over the
folder (start-up included), "forward_seconds": [seconds of their forward pass per image]}`. This
toolkit does not ship or build the authors' model; measure it with their code in its own
environment. Ratios are ours / theirs in seconds per image (below 1: ours is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from benchmarks.bench_inference import build_module, write_images
from exporting.onnx_export import export_onnx

ROOT = Path(__file__).resolve().parents[1]


def load_images(folder: Path) -> list[torch.Tensor]:
    """Every image of the folder as a 1 x 3 x H x W tensor in [0, 1], sorted by name."""
    paths = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    if not paths:
        raise SystemExit(f"no images in {folder}")
    return [
        torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1)[None].float() / 255 for p in paths
    ]


def per_image(forward, images: list) -> float:
    """Median seconds of `forward(image)` over the images, after one warm-up image."""
    forward(images[0])
    seconds = []
    for image in images:
        start = time.perf_counter()
        forward(image)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def infer_seconds(model: Path, folder: Path, output: Path, threads: int) -> float:
    """Wall time of `python infer.py` over the folder, start-up and model load included."""
    command = [
        sys.executable,
        str(ROOT / "infer.py"),
        f"model={model}",
        f"input={folder}",
        f"output={output}",
        "batch_size=1",
        "num_workers=0",
        "device=cpu",
        "progress=false",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    output.unlink(missing_ok=True)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure_ours(detector: str, folder: Path, workdir: Path, size: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    module = build_module(detector, size)
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint, onnx_path = workdir / "model.ckpt", workdir / "model.onnx"
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, checkpoint)
    started = time.perf_counter()
    export_onnx(module, onnx_path)
    export_seconds = time.perf_counter() - started
    images = load_images(folder)
    with torch.inference_mode():
        raw = per_image(lambda image: module.net(image), images)
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    raw_onnx = per_image(lambda image: session.run(None, {"image": image.numpy()}), images)
    count = len(images)
    return {
        "detector": detector,
        "images": count,
        "size": size,
        "threads": threads,
        "export_seconds": round(export_seconds, 1),
        "raw_forward_seconds": round(raw, 3),
        "raw_onnx_seconds": round(raw_onnx, 3),
        "infer_ckpt_seconds": round(infer_seconds(checkpoint, folder, workdir / "ckpt.csv", threads) / count, 3),
        "infer_onnx_seconds": round(infer_seconds(onnx_path, folder, workdir / "onnx.csv", threads) / count, 3),
    }


def compare(ours: dict, authors: dict) -> dict:
    """Per-image ratios, ours / theirs, and ours / our raw forward (how much the pipeline costs)."""
    for key in ("images", "size", "threads"):
        if authors.get(key) != ours[key]:
            print(
                f"warning: the authors' run has {key}={authors.get(key)}, ours {ours[key]}: not comparable",
                file=sys.stderr,
            )
    theirs_script = authors["script_seconds"] / authors["images"]
    theirs_forward = statistics.median(authors["forward_seconds"])
    return {
        "authors_script_seconds": round(theirs_script, 3),
        "authors_forward_seconds": round(theirs_forward, 3),
        "infer_ckpt_vs_authors_script": round(ours["infer_ckpt_seconds"] / theirs_script, 3),
        "infer_onnx_vs_authors_script": round(ours["infer_onnx_seconds"] / theirs_script, 3),
        "raw_forward_vs_authors_forward": round(ours["raw_forward_seconds"] / theirs_forward, 3),
        "raw_onnx_vs_authors_forward": round(ours["raw_onnx_seconds"] / theirs_forward, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--detector", default="trufor")
    parser.add_argument("--images-dir", type=Path, required=True)
    parser.add_argument("--count", type=int, default=8, help="images written when --images-dir is missing")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--authors", type=Path, default=None, help="the authors' timings (JSON, see above)")
    parser.add_argument("--workdir", type=Path, default=ROOT / "outputs" / "speed_vs_authors")
    parser.add_argument("--output", type=Path, default=None, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    if not args.images_dir.is_dir():
        write_images(args.images_dir, args.count, args.size)
    result = {
        "ours": measure_ours(args.detector, args.images_dir, args.workdir, args.size, args.threads),
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }
    # our pipeline against our own raw forward (seconds per image; above 1: the pipeline costs time)
    ours = result["ours"]
    result["infer_ckpt_vs_raw_forward"] = round(ours["infer_ckpt_seconds"] / ours["raw_forward_seconds"], 3)
    result["infer_onnx_vs_raw_onnx"] = round(ours["infer_onnx_seconds"] / ours["raw_onnx_seconds"], 3)
    result["onnx_vs_eager"] = round(ours["raw_onnx_seconds"] / ours["raw_forward_seconds"], 3)
    if args.authors:
        result["authors"] = json.loads(args.authors.read_text())
        result.update(compare(ours, result["authors"]))
    text = json.dumps(result, indent=1)
    if args.output:
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
