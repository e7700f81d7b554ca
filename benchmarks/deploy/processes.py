"""Fresh `python infer.py` processes: start-up against steady state, peak memory, one process against two
(the `startup`, `memory` and `processes` sections)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.deploy.fixtures import ROOT, build_models, write_pngs
from benchmarks.deploy.timing import best


def run_infer(model: Path, images: Path, output: Path, *extra: str) -> tuple[float]:
    """Wall seconds of `python infer.py` in a fresh process."""
    command = [
        sys.executable,
        str(ROOT / "infer.py"),
        f"model={model}",
        f"input={images}",
        f"output={output}",
        "progress=false",
        "device=cpu",
        *extra,
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=output.parent)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:] + done.stdout[-2000:])
    output.unlink()
    return (elapsed,)


def startup(work: Path, repeats: int) -> dict:
    ckpt, onnx = build_models("npr", work / "npr")
    write_pngs(work / "one", 1, 256)
    many = 256
    write_pngs(work / "many", many, 256)
    result = {}
    for kind, model in (("onnx", onnx), ("ckpt", ckpt)):
        one = best([run_infer(model, work / "one", work / "out.csv")[0] for _ in range(repeats)])
        long = best([run_infer(model, work / "many", work / "out.csv", "batch_size=32")[0] for _ in range(repeats)])
        result[kind] = {
            "one_image_s": round(one, 2),
            f"{many}_images_s": round(long, 2),
            "steady_images_per_s": round((many - 1) / max(long - one, 1e-9), 1),
        }
    result["onnx_vs_ckpt_startup"] = round(result["onnx"]["one_image_s"] / result["ckpt"]["one_image_s"], 3)
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
        command = [
            "/usr/bin/time",
            "-f",
            "%M",
            sys.executable,
            str(ROOT / "infer.py"),
            f"model={onnx}",
            f"input={folder}",
            f"output={work / 'mem.csv'}",
            "progress=false",
            "batch_size=64",
        ]
        done = subprocess.run(command, capture_output=True, text=True, cwd=work)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        assert sum(1 for _ in open(work / "mem.csv")) == len(list(folder.iterdir())) + 1  # every image has a row
        peaks[label] = int(done.stderr.strip().splitlines()[-1])
    return {
        "peak_rss_kib_1k": peaks["1k"],
        "peak_rss_kib_10k": peaks["10k"],
        "ratio_10k_to_1k": round(peaks["10k"] / peaks["1k"], 3),
    }


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
        seconds = {
            folder: best(
                [run_infer(onnx, work / folder, work / "out.csv", "batch_size=32", *extra)[0] for _ in range(repeats)]
            )
            for folder in ("png_proc", "png_proc_4x")
        }
        steady = 3 * count / max(seconds["png_proc_4x"] - seconds["png_proc"], 1e-9)
        result[f"{label}_images_per_s"] = round(count / seconds["png_proc"], 1)
        result[f"{label}_steady_images_per_s"] = round(steady, 1)
        result[f"{label}_startup_s"] = round(seconds["png_proc"] - count / steady, 2)
    for kind in ("", "_steady"):
        result[f"ratio{kind}"] = round(
            result[f"two_processes{kind}_images_per_s"] / result[f"one_process{kind}_images_per_s"], 3
        )
    return result
