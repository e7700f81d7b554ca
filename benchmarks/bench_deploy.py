"""Deployment figures: start-up, steady state, pipeline vs its limit, int8 vs fp32, memory, processes.

    python -m benchmarks.bench_deploy [--only startup pipeline localizer localizer_ckpt int8 memory processes]
                                      [--repeats 3] [--localizer mvss] [--output FILE.json]

- startup: `python infer.py` on one PNG, a new process each time, with the `.onnx` and the `.ckpt`
  of `npr` (wall time, best of `--repeats`); steady state = images/s of a long run with the one-image
  run's time taken off, so start-up and throughput are reported separately.
- pipeline: `npr` at 224 px, batch 32, 256 PNGs: `infer.py`'s scoring loop with the `.onnx` (model
  loaded: decoding threads, batches, forward, rows streamed to CSV) against (a) the raw onnxruntime
  forward on pre-decoded tensors and (b) the limit that decoding plus the raw forward set on the same
  cores: N / (time to decode and preprocess the N files with one thread + time of the raw forward).
- localizer: `--localizer` (default `mvss`) on 8 PNGs of 512 x 512, batch 8: the `.onnx` scoring
  loop with maps not saved and saved (`save_masks=true`) against the raw onnxruntime forward (all
  outputs fetched) and against decoding plus it.
- localizer_ckpt: the same localizer's `.ckpt` scoring loop against the eager PyTorch forward, and
  the raw onnxruntime forward against the eager one.
- int8: raw onnxruntime forward images/s of the fp32 and the int8 (static QDQ) exports of `npr`,
  `dct` and `seg_tiny` (a localizer, 256 px).
- memory: peak resident memory of `infer.py` (.onnx, `dct_tiny`) scoring 10,000 vs 1,000 images.
- processes: `infer.py devices=2 device=cpu` vs one process, images/s end to end and in steady state
  (start-up taken off by scoring `count` and 4 x `count` images).

Pipeline and localizer figures: every timing once as warm-up (the localizers on one image), then
`--repeats` rounds of all of them in turn; each ratio is the median over the rounds of the ratio
within a round, so the pipeline and its reference are measured under the same load. The raw forward
is timed with a default onnxruntime session and with the scoring runtime's own session (its threads
sleep instead of spinning when idle); the faster of the two in each round is the reference.
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


def build_models(name: str, folder: Path, size: int | None = None) -> tuple[Path, Path]:
    """`name`'s config, untrained, as model.ckpt and model.onnx in `folder`."""
    import torch

    from detectors.module import DetectorModule
    from detectors.registry import net_config
    from exporting.onnx_export import export_onnx

    net = net_config(name, [f"net.preprocess.size={size}"] if size else [])
    if net.get("pretrained"):
        net["pretrained"] = None
    module = DetectorModule(net=net, name=name).eval()
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


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def decode(paths: list[Path], geometry) -> list[np.ndarray]:
    """What the limit charges for decoding: read and bring to the network size, one thread."""
    from datamodules.io import read_image

    return [geometry(read_image(path)) for path in paths]


def onnx_forward(session, batches: list[np.ndarray]) -> None:
    """The raw onnxruntime forward pass, every output fetched (scores and maps), as `infer.py` fetches them."""
    for batch in batches:
        session.run(None, {"image": batch})


def eager_forward(module, batches: list[np.ndarray]) -> None:
    """The raw eager PyTorch forward pass on decoded tensors (as the `.ckpt` runtime runs it)."""
    import torch

    with torch.inference_mode():
        for batch in batches:
            outputs = module.net(torch.from_numpy(batch))
            torch.sigmoid(outputs["logit"])
            if "mask_logit" in outputs:
                torch.sigmoid(outputs["mask_logit"])


def score_loop(runtime, paths: list[Path], batch_size: int, folder: Path, save_masks: bool = False) -> None:
    """`infer.py`'s scoring loop with the model loaded: decoding threads (its default `num_workers`),
    batches, forward, rows streamed to a CSV and, with `save_masks`, the PNG maps."""
    import shutil

    import yaml

    from inference.scoring import score_items
    from inference.writer import COLUMNS, ResultWriter

    workers = yaml.safe_load((ROOT / "configs" / "infer.yaml").read_text())["num_workers"]
    masks = folder / "masks" if save_masks else None
    shutil.rmtree(folder / "masks", ignore_errors=True)
    with ResultWriter(folder / "loop.csv", [*COLUMNS, "mask"]) as writer:
        counts = score_items(runtime, list(enumerate(map(str, paths))), writer, batch_size=batch_size,
                             num_workers=workers, progress=False, masks_dir=masks)
    assert counts["ok"] == len(paths), counts
    if save_masks:
        assert len(list(masks.glob("*.png"))) == len(paths)


def median_rounded(values, digits: int = 3) -> float:
    return round(float(np.median(values)), digits)


def interleaved(timings: dict, count: int, repeats: int, warm_up: int) -> dict:
    """`timings`: name -> function of a number of images. Each runs once on `warm_up` images
    (excluded), then `repeats` rounds run all of them in turn on `count` images, so a change of load
    on shared cores hits each alike. Returns each one's seconds per round; ratios are taken round
    by round (same load), then their median."""
    for function in timings.values():
        function(warm_up)
    rounds = {name: [] for name in timings}
    for _ in range(repeats):
        for name, function in timings.items():
            rounds[name].append(timed(function, count))
    return {name: np.asarray(values) for name, values in rounds.items()}


def in_batches(images: list[np.ndarray], batch_size: int) -> list[np.ndarray]:
    from datamodules.geometry import to_network_input

    return [to_network_input(images[i:i + batch_size]) for i in range(0, len(images), batch_size)]


def rates(times: dict, count: int, digits: int = 1) -> dict:
    return {f"{name}_images_per_s": median_rounded(count / values, digits) for name, values in times.items()}


def pipeline(work: Path, repeats: int, count: int = 256, batch_size: int = 32) -> dict:
    """`npr` at 224 px, batch 32: the `.onnx` scoring loop against decoding plus the raw forward."""
    import onnxruntime as ort

    from inference.runtime import load_runtime, runtime_transform

    _, onnx = build_models("npr", work / "npr224", size=224)
    paths = write_pngs(work / "png224", count, 256)
    runtime = load_runtime(onnx, "cpu")
    geometry = runtime_transform(runtime)
    batches = in_batches(decode(paths, geometry), batch_size)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    times = interleaved({"decode": lambda n: decode(paths[:n], geometry),
                         "forward": lambda n: onnx_forward(session, batches[:n // batch_size]),
                         "forward_own_session": lambda n: onnx_forward(runtime.session, batches[:n // batch_size]),
                         "pipeline": lambda n: score_loop(runtime, paths[:n], batch_size, work)},
                        count, repeats, warm_up=count)
    forward = np.minimum(times["forward"], times["forward_own_session"])
    limit = times["decode"] + forward
    return {"detector": "npr", "size": 224, "batch_size": batch_size, "images": count, "repeats": repeats,
            **rates(times, count), "limit_images_per_s": median_rounded(count / limit, 1),
            "ratio_to_limit": median_rounded(limit / times["pipeline"]),
            "ratio_to_raw_forward": median_rounded(forward / times["pipeline"]),
            "load_average": round(os.getloadavg()[0], 2)}


def localizer_inputs(work: Path, name: str, count: int, size: int, batch_size: int) -> tuple:
    """The localizer's .ckpt and .onnx (in a folder shared by the localizer sections of one run) and
    `count` PNGs of `size` x `size`, also decoded into batches."""
    from inference.runtime import load_runtime, runtime_transform

    models = work.parent / f"models_{name}"
    if not (models / "model.onnx").is_file():
        build_models(name, models, size=128)  # the export's parity probes at 128 px: quicker
    paths = write_pngs(work / "png", count, size)
    runtime = load_runtime(models / "model.onnx", "cpu")
    geometry = runtime_transform(runtime)
    return models / "model.ckpt", models / "model.onnx", runtime, paths, geometry, in_batches(
        decode(paths, geometry), batch_size)


def localizer(work: Path, repeats: int, name: str = "mvss", count: int = 8, batch_size: int = 8,
              size: int = 512) -> dict:
    """A localizer on `count` PNGs of `size` x `size`, batch `batch_size`: the `.onnx` scoring loop
    with maps not saved and saved against the raw onnxruntime forward and against decoding plus it."""
    import onnxruntime as ort

    _, onnx, runtime, paths, geometry, batches = localizer_inputs(work, name, count, size, batch_size)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    times = interleaved({
        "decode": lambda n: decode(paths[:n], geometry),
        "onnx_forward": lambda n: onnx_forward(session, [b[:n] for b in batches[:max(1, n // batch_size)]]),
        "onnx_forward_own_session": lambda n: onnx_forward(runtime.session,
                                                           [b[:n] for b in batches[:max(1, n // batch_size)]]),
        "onnx_pipeline": lambda n: score_loop(runtime, paths[:n], batch_size, work),
        "onnx_pipeline_masks": lambda n: score_loop(runtime, paths[:n], batch_size, work, save_masks=True),
    }, count, repeats, warm_up=1)
    forward = np.minimum(times["onnx_forward"], times["onnx_forward_own_session"])
    limit = times["decode"] + forward
    return {"detector": name, "size": size, "batch_size": batch_size, "images": count, "repeats": repeats,
            **rates(times, count, 3), "limit_images_per_s": median_rounded(count / limit),
            "ratio_to_raw_onnx": median_rounded(forward / times["onnx_pipeline"]),
            "ratio_to_limit": median_rounded(limit / times["onnx_pipeline"]),
            "masks_ratio_to_raw_onnx": median_rounded(forward / times["onnx_pipeline_masks"]),
            "masks_ratio_to_limit": median_rounded(limit / times["onnx_pipeline_masks"]),
            "load_average": round(os.getloadavg()[0], 2)}


def localizer_ckpt(work: Path, repeats: int, name: str = "mvss", count: int = 8, batch_size: int = 8,
                   size: int = 512) -> dict:
    """The same localizer's `.ckpt` scoring loop against the eager PyTorch forward, and the raw
    onnxruntime forward against the eager one (ONNX vs eager)."""
    import onnxruntime as ort
    import torch

    from inference.runtime import load_checkpoint, load_runtime

    ckpt, onnx, _, paths, _, batches = localizer_inputs(work, name, count, size, batch_size)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    runtime, module = load_runtime(ckpt, "cpu"), load_checkpoint(ckpt)
    times = interleaved({
        "eager_forward": lambda n: eager_forward(module, [b[:n] for b in batches[:max(1, n // batch_size)]]),
        "ckpt_pipeline": lambda n: score_loop(runtime, paths[:n], batch_size, work),
        "onnx_forward": lambda n: onnx_forward(session, [b[:n] for b in batches[:max(1, n // batch_size)]]),
    }, count, repeats, warm_up=1)
    return {"detector": name, "size": size, "batch_size": batch_size, "images": count, "repeats": repeats,
            "torch_threads": torch.get_num_threads(), **rates(times, count, 3),
            "ckpt_ratio_to_raw_eager": median_rounded(times["eager_forward"] / times["ckpt_pipeline"]),
            "onnx_vs_eager": median_rounded(times["eager_forward"] / times["onnx_forward"]),
            "load_average": round(os.getloadavg()[0], 2)}


def int8_speed(work: Path, repeats: int) -> dict:
    import onnxruntime as ort

    from datamodules.preprocess import Preprocess
    from exporting.variants import build_variant, probe_images

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
                        "int8_images_per_s": round(rates["int8"], 1),
                        "speedup": round(rates["int8"] / rates["fp32"], 3),
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
    parser.add_argument("--only", nargs="+", default=["startup", "pipeline", "localizer", "localizer_ckpt", "int8",
                                                       "memory", "processes"])
    parser.add_argument("--localizer", default="mvss", help="the localizer of the `localizer` figures")
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
            elif name in ("localizer", "localizer_ckpt"):
                results[name] = globals()[name](work, args.repeats, args.localizer)
            else:
                results[name] = globals()[{"int8": "int8_speed"}.get(name, name)](work, args.repeats)
            print(json.dumps({name: results[name], "seconds": round(time.perf_counter() - start, 1)}), flush=True)
    if args.output:
        args.output.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
