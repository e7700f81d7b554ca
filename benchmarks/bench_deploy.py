"""Deployment figures: start-up, steady state, pipeline vs its limit, int8 vs fp32, memory, processes.

    python benchmarks/bench_deploy.py [--only startup pipeline int8 memory processes] [--output FILE.json]

- startup: `python infer.py` on one PNG, a new process each time, with the `.onnx` and the `.ckpt`
  of `npr` (wall time, best of `--repeats`); steady state = images/s of a long run with the one-image
  run's time taken off, so start-up and throughput are reported separately.
- pipeline: `npr` at 224 px, batch 32, a folder of PNGs: `infer.py` with the `.onnx` (start-up taken
  off) against (a) the raw onnxruntime forward on pre-decoded tensors and (b) the limit that decoding
  plus the raw forward set on the same cores: N / (time to decode and preprocess the N files with
  one thread + time of the raw forward on them).
- int8: raw onnxruntime forward images/s of the fp32 and the int8 (static QDQ) exports of `npr`,
  `dct` and `seg_tiny` (a localizer, 256 px).
- memory: peak resident memory of `infer.py` (.onnx, `dct_tiny`) scoring 10,000 vs 1,000 images.
- processes: `infer.py devices=2 device=cpu` vs one process, images/s end to end and in steady state
  (start-up taken off by scoring `count` and 4 x `count` images).

Untrained weights (speed does not depend on them); CPU only; one run gives all ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_models(name: str, folder: Path, size: int | None = None) -> tuple[Path, Path]:
    """`name`'s config, untrained, as model.ckpt and model.onnx in `folder`."""
    import torch
    import yaml

    from detectors.export import export_onnx
    from detectors.module import DetectorModule

    config = yaml.safe_load((ROOT / "configs" / "detector" / f"{name}.yaml").read_text())
    if size:
        config["net"]["preprocess"] = {**config["net"].get("preprocess", {}), "size": size}
    if config["net"].get("pretrained"):
        config["net"]["pretrained"] = None
    module = DetectorModule(net=config["net"], name=config.get("name", name)).eval()
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, folder / "model.ckpt")
    export_onnx(module, folder / "model.onnx")
    return folder / "model.ckpt", folder / "model.onnx"


def write_pngs(folder: Path, count: int, size: int, seed: int = 0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    paths = []
    for i in range(count):
        paths.append(folder / f"{i:05d}.png")
        Image.fromarray(np.roll(base, i, axis=1)).save(paths[-1], compress_level=1)
    return paths


def run_infer(model: Path, images: Path, output: Path, *extra: str) -> tuple[float]:
    """Wall seconds of `python infer.py` in a fresh process."""
    command = [sys.executable, str(ROOT / "infer.py"), f"model={model}", f"input={images}", f"output={output}",
               "progress=false", "device=cpu", *extra]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=output.parent)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:] + done.stdout[-2000:])
    output.unlink()
    return (elapsed,)


def best(values: list[float]) -> float:
    return min(values)


def startup(work: Path, repeats: int) -> dict:
    ckpt, onnx = build_models("npr", work / "npr")
    write_pngs(work / "one", 1, 256)
    many = 256
    write_pngs(work / "many", many, 256)
    result = {}
    for kind, model in (("onnx", onnx), ("ckpt", ckpt)):
        one = best([run_infer(model, work / "one", work / "out.csv")[0] for _ in range(repeats)])
        long = best([run_infer(model, work / "many", work / "out.csv", "batch_size=32")[0] for _ in range(repeats)])
        result[kind] = {"one_image_s": round(one, 2), f"{many}_images_s": round(long, 2),
                        "steady_images_per_s": round((many - 1) / max(long - one, 1e-9), 1)}
    result["onnx_vs_ckpt_startup"] = round(result["onnx"]["one_image_s"] / result["ckpt"]["one_image_s"], 3)
    return result


def raw_forward_rate(session, batches: list[np.ndarray], repeats: int) -> float:
    session.run(["score"], {"image": batches[0]})
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for batch in batches:
            session.run(["score"], {"image": batch})
        times.append(time.perf_counter() - start)
    return sum(len(b) for b in batches) / best(times)


def pipeline(work: Path, repeats: int, count: int = 256) -> dict:
    import onnxruntime as ort

    from datamodules.geometry import eval_geometry, to_network_input
    from datamodules.io import read_image
    from datamodules.preprocess import Preprocess

    _, onnx = build_models("npr", work / "npr224", size=224)
    paths = write_pngs(work / "png224", count, 256)
    geometry = eval_geometry(Preprocess(size=224, mode="center_crop"))
    decode_times = []
    for _ in range(repeats):
        start = time.perf_counter()
        decoded = [geometry(read_image(p)) for p in paths]
        decode_times.append(time.perf_counter() - start)
    batches = [to_network_input(decoded[i:i + 32]) for i in range(0, count, 32)]
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    raw = raw_forward_rate(session, batches, repeats)
    write_pngs(work / "one224", 1, 256)
    one = best([run_infer(onnx, work / "one224", work / "out.csv")[0] for _ in range(repeats)])
    total = best([run_infer(onnx, work / "png224", work / "out.csv", "batch_size=32")[0] for _ in range(repeats)])
    rate = (count - 1) / max(total - one, 1e-9)
    limit = count / (best(decode_times) + count / raw)
    return {"images": count, "pipeline_images_per_s": round(rate, 1), "raw_forward_images_per_s": round(raw, 1),
            "decode_images_per_s": round(count / best(decode_times), 1), "limit_images_per_s": round(limit, 1),
            "ratio_to_limit": round(rate / limit, 3), "ratio_to_raw_forward": round(rate / raw, 3)}


def int8_speed(work: Path, repeats: int) -> dict:
    import onnxruntime as ort

    from datamodules.preprocess import Preprocess
    from inference.onnx_variants import build_variant, probe_images

    result = {}
    for name, size in (("npr", 224), ("dct", None), ("seg_tiny", 256)):
        _, onnx = build_models(name, work / f"int8_{name}", size=size)
        meta = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"]).get_modelmeta().custom_metadata_map
        side = json.loads(meta["preprocess"]).get("size") or 256
        images = probe_images(Preprocess(size=side), 16)
        int8 = work / f"int8_{name}" / "int8.onnx"
        report = build_variant(onnx, int8, precision="int8", images=images, calibration=images, max_auroc_drop=1.0)
        batch = np.random.default_rng(0).random((8, 3, side, side), dtype=np.float32)
        rates = {kind: raw_forward_rate(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]),
                                        [batch] * 4, repeats) for kind, path in (("fp32", onnx), ("int8", int8))}
        result[name] = {"size": side, "fp32_images_per_s": round(rates["fp32"], 1),
                        "int8_images_per_s": round(rates["int8"], 1), "speedup": round(rates["int8"] / rates["fp32"], 3),
                        "max_score_deviation": report["quality"]["max_score_deviation"]}
    return result


def memory(work: Path) -> dict:
    """Peak RSS of a fresh `infer.py` process per run (each measured in its own child, via `time`)."""
    _, onnx = build_models("dct_tiny", work / "dct_tiny")
    paths = write_pngs(work / "png10k", 10_000, 32)
    small = work / "png1k"
    small.mkdir()
    for path in paths[:1000]:
        os.link(path, small / path.name)
    peaks = {}
    for label, folder in (("1k", small), ("10k", work / "png10k")):
        command = ["/usr/bin/time", "-f", "%M", sys.executable, str(ROOT / "infer.py"), f"model={onnx}",
                   f"input={folder}", f"output={work / 'mem.csv'}", "progress=false", "batch_size=64"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=work)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        assert sum(1 for _ in open(work / "mem.csv")) == len(list(folder.iterdir())) + 1  # every image has a row
        peaks[label] = int(done.stderr.strip().splitlines()[-1])
    return {"peak_rss_kib_1k": peaks["1k"], "peak_rss_kib_10k": peaks["10k"],
            "ratio_10k_to_1k": round(peaks["10k"] / peaks["1k"], 3)}


def processes(work: Path, repeats: int, count: int = 512) -> dict:
    """One vs two processes, end to end and in steady state.

    Each setting scores `count` and 4 x `count` images; the difference of the two wall times is the
    time of 3 x `count` images with start-up (imports, process launch, collective set-up) taken off.
    """
    _, onnx = build_models("npr", work / "npr_proc", size=96)
    write_pngs(work / "png_proc", count, 128)
    write_pngs(work / "png_proc_4x", 4 * count, 128)
    result: dict = {"images": count, "cores": os.cpu_count()}
    for label, extra in (("one_process", []), ("two_processes", ["devices=2", "strategy=ddp"])):
        seconds = {folder: best([run_infer(onnx, work / folder, work / "out.csv", "batch_size=32", *extra)[0]
                                 for _ in range(repeats)]) for folder in ("png_proc", "png_proc_4x")}
        steady = 3 * count / max(seconds["png_proc_4x"] - seconds["png_proc"], 1e-9)
        result[f"{label}_images_per_s"] = round(count / seconds["png_proc"], 1)
        result[f"{label}_steady_images_per_s"] = round(steady, 1)
        result[f"{label}_startup_s"] = round(seconds["png_proc"] - count / steady, 2)
    for kind in ("", "_steady"):
        result[f"ratio{kind}"] = round(result[f"two_processes{kind}_images_per_s"]
                                       / result[f"one_process{kind}_images_per_s"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", default=["startup", "pipeline", "int8", "memory", "processes"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.only:
            work = Path(folder) / name
            work.mkdir()
            start = time.perf_counter()
            if name == "memory":
                results[name] = memory(work)
            else:
                results[name] = globals()[{"int8": "int8_speed"}.get(name, name)](work, args.repeats)
            print(json.dumps({name: results[name], "seconds": round(time.perf_counter() - start, 1)}), flush=True)
    if args.output:
        args.output.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
