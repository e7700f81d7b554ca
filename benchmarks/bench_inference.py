"""What the scoring pipeline costs: `infer.py` with .ckpt and .onnx vs the raw forward pass (a script).

    python -m benchmarks.bench_inference [--detectors dct_tiny clip_linear_tiny clip_freq_tiny npr forgelens_tiny
                                          iapl_tiny cospy_tiny cospy_progan_tiny effort_tiny]
                                         [--images 64] [--batch-sizes 1 32] [--repeats 3] [--threads 2]
                                         [--size 512] [--save-masks]
    # localizers at 512 x 512 (maps saved or not):
    python -m benchmarks.bench_inference --detectors mvss --size 512 --images 16 --batch-sizes 8 --repeats 2
    # the steady-state ratios of the deployment targets (model loaded, warm-up excluded, medians of
    # interleaved rounds): benchmarks/bench_deploy.py --only pipeline localizer

For each detector config (untrained: speed does not depend on the weights) it writes a checkpoint,
exports it with `exporting.onnx_export`, writes `--images` PNGs at the detector's input size, and
reports images/second of `infer.infer` (decode, preprocess, batch, score, write CSV) with the
.ckpt and the .onnx, next to the raw PyTorch forward pass on the same images already decoded to
tensors, in the same run. `ratio` = pipeline / raw: how much of the model's speed survives the
pipeline. The raw onnxruntime forward on the same tensors is measured too: `ratio_to_raw_onnx` (the
.onnx pipeline against the bare onnxruntime session) and `onnx_vs_eager` (onnxruntime against eager
PyTorch). `--size` overrides the detector's input size (localizers take any size); `--save-masks`
makes localizers write their PNG maps, as `infer.py save_masks=true` does. Each figure is the best
of `--repeats` timed passes (the machine may be shared; the best pass is the least disturbed one),
and every timed `infer` run loads the model again, as a user's run does. CPU only, so numbers are
comparable across machines of the same kind.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from PIL import Image

from detectors.module import DetectorModule
from detectors.registry import create_module, detector_config
from exporting.onnx_export import export_onnx

ROOT = Path(__file__).resolve().parents[1]


def build_module(name: str, size: int | None = None) -> DetectorModule:
    config = detector_config(name, [f"net.preprocess.size={size}"] if size else [])
    for key in ("pretrained", "encoder_weights"):  # speed does not depend on the weights: none to look for
        if config.net.get(key):
            config.net[key] = None
    return create_module(config).eval()


def write_images(folder: Path, count: int, size: int, seed: int = 0) -> torch.Tensor:
    """PNG files in one unlabelled folder; returns the same images as one tensor.

    Unlabelled on purpose: with labels, `infer.py` also writes a metrics report with figures,
    which is not the scoring pipeline this benchmark measures.
    """
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(count, size, size, 3), dtype=np.uint8)
    folder.mkdir(parents=True, exist_ok=True)
    for index, image in enumerate(images):
        Image.fromarray(image).save(folder / f"{index:05d}.png")
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(255.0)


def infer_config(model: Path, images: Path, output: Path, batch_size: int, save_masks: bool = False) -> DictConfig:
    """The config `python infer.py model=... input=... ...` would get (composed from configs/infer.yaml)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            config_name="infer",
            overrides=[
                f"model={model}",
                f"input={images}",
                f"output={output}",
                f"batch_size={batch_size}",
                "num_workers=0",
                "device=cpu",
                "progress=false",
                f"save_masks={str(save_masks).lower()}",
            ],
        )
    GlobalHydra.instance().clear()
    return cfg


@torch.inference_mode()  # as the .ckpt runtime scores
def raw_forward_rate(module: DetectorModule, tensors: torch.Tensor, batch_size: int, repeats: int = 3) -> float:
    """Images/s of the bare forward pass on decoded tensors: the best of `repeats` passes."""
    module.net(tensors[:batch_size])  # warm-up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for first in range(0, len(tensors), batch_size):
            torch.sigmoid(module.net(tensors[first : first + batch_size])["logit"])
        rates.append(len(tensors) / (time.perf_counter() - start))
    return max(rates)


def raw_onnx_rate(path: Path, tensors: torch.Tensor, batch_size: int, repeats: int = 3) -> float:
    """Images/s of the bare onnxruntime session on decoded tensors (all outputs fetched): best of `repeats`."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    arrays = tensors.numpy()
    session.run(None, {"image": arrays[:batch_size]})  # warm-up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for first in range(0, len(arrays), batch_size):
            session.run(None, {"image": arrays[first : first + batch_size]})
        rates.append(len(arrays) / (time.perf_counter() - start))
    return max(rates)


def pipeline_rate(
    model: Path, images: Path, output: Path, batch_size: int, repeats: int = 3, save_masks: bool = False
) -> float:
    """Images/s of `infer.infer` end to end (model load included, as a user's run): best of `repeats`."""
    import shutil

    from infer import infer

    cfg = infer_config(model, images, output, batch_size, save_masks)
    count = sum(1 for _ in images.rglob("*.png"))
    masks = output.with_name(f"{output.stem}_masks")
    infer(cfg)  # warm-up run (imports, first load); every timed run loads the model again
    output.unlink()
    rates = []
    for _ in range(repeats):
        shutil.rmtree(masks, ignore_errors=True)
        start = time.perf_counter()
        infer(cfg)
        rates.append(count / (time.perf_counter() - start))
        output.unlink()
    return max(rates)


def bench(
    name: str,
    count: int,
    batch_sizes: list[int],
    workdir: Path,
    repeats: int = 3,
    size: int | None = None,
    save_masks: bool = False,
) -> list[dict]:
    module = build_module(name, size)
    size = int(module.net.preprocess.size)
    folder = workdir / name
    checkpoint, onnx_path = folder / "model.ckpt", folder / "model.onnx"
    folder.mkdir(parents=True)
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, checkpoint)
    export_onnx(module, onnx_path)
    tensors = write_images(folder / "images", count, size)
    rows = []
    for batch_size in batch_sizes:
        raw = raw_forward_rate(module, tensors, batch_size, repeats)
        raw_onnx = raw_onnx_rate(onnx_path, tensors, batch_size, repeats)
        rates = {
            kind: pipeline_rate(path, folder / "images", folder / f"scores_{kind}.csv", batch_size, repeats, save_masks)
            for kind, path in (("ckpt", checkpoint), ("onnx", onnx_path))
        }
        raw = max(raw, raw_forward_rate(module, tensors, batch_size, repeats))  # timed before and after
        raw_onnx = max(raw_onnx, raw_onnx_rate(onnx_path, tensors, batch_size, repeats))
        for kind, rate in rates.items():
            rows.append(
                {
                    "detector": name,
                    "size": size,
                    "batch_size": batch_size,
                    "runtime": kind,
                    "save_masks": save_masks,
                    "images_per_s": round(rate, 3),
                    "raw_forward_images_per_s": round(raw, 3),
                    "ratio": round(rate / raw, 3),
                    "raw_onnx_images_per_s": round(raw_onnx, 3),
                    "ratio_to_raw_onnx": round(rate / raw_onnx, 3),
                    "onnx_vs_eager": round(raw_onnx / raw, 3),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--detectors",
        nargs="+",
        default=[
            "dct_tiny",
            "clip_linear_tiny",
            "clip_freq_tiny",
            "npr",
            "forgelens_tiny",
            "iapl_tiny",
            "cospy_tiny",
            "cospy_progan_tiny",
            "effort_tiny",
        ],
    )
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per figure; the best is kept")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--size", type=int, default=None, help="input size (default: each detector's own)")
    parser.add_argument("--save-masks", action="store_true", help="localizers write their maps as infer.py does")
    parser.add_argument("--output", type=Path, default=None, help="also write the rows here as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.detectors:
            rows += bench(name, args.images, args.batch_sizes, Path(workdir), args.repeats, args.size, args.save_masks)
    print(
        f"\n{'detector':<18}{'size':>5}{'batch':>6}{'runtime':>9}{'img/s':>10}{'raw img/s':>11}{'ratio':>8}"
        f"{'raw onnx':>10}{'/onnx':>7}{'onnx/eager':>11}"
    )
    for row in rows:
        print(
            f"{row['detector']:<18}{row['size']:>5}{row['batch_size']:>6}{row['runtime']:>9}"
            f"{row['images_per_s']:>10.2f}{row['raw_forward_images_per_s']:>11.2f}{row['ratio']:>8.3f}"
            f"{row['raw_onnx_images_per_s']:>10.2f}{row['ratio_to_raw_onnx']:>7.3f}{row['onnx_vs_eager']:>11.3f}"
        )
    if args.output:
        args.output.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
