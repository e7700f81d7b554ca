"""Pairs per second of the learned pair detector exported to ONNX, against its PyTorch forward (a script).

    python -m benchmarks.pair_onnx_throughput [--detectors pairnet_tiny pairnet]
        [--threads 1 2] [--batch-sizes 1 16] [--pairs 64] [--rounds 5] [--panel-side 512] [--json FILE]

For each config (untrained: speed does not depend on the weights, so no ImageNet file is needed)
it exports the network with `exporting.onnx_export` (the parity check included) and measures, at
each `--threads` count and batch size, in the same run:

- `torch`: the eager PyTorch forward of the exported graph (the four outputs as probabilities) on
  pairs already at the network's input size; PyTorch on one thread is the reference of every ratio;
- `onnx`: the bare onnxruntime session on the same arrays (intra-op threads as given, idle threads
  sleeping as in infer.py);
- `onnx, lone pair from panels`: what infer.py pays per pair with the `.onnx`
  (`inference.pair_onnx.OnnxPairNet`): two `--panel-side` px RGB panels resized to the input, one
  pair per call, masks resized back and thresholded.

The settings are timed in alternating rounds so that they see the same load; each figure is the
median of `--rounds` rounds. The load average is recorded before and after: on a shared machine
absolute rates move with it much more than the ratios, and PyTorch's OpenMP threads suffer most
when the cores are oversubscribed (hence the one-thread reference).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from exporting.onnx_export import export_onnx
from exporting.pair_export import PAIR_OUTPUTS, PairScoringGraph


def build_pair_module(name: str) -> Any:
    """An untrained pair detector module of config `name` (no pretrained weights are looked for)."""
    from detectors.registry import create_module, detector_config

    config = detector_config(name, [])
    if config.net.get("pretrained"):
        config.net["pretrained"] = None
    return create_module(config).eval()


def onnx_session(path: Path, threads: int) -> Any:
    """An onnxruntime CPU session on `threads` intra-op threads, idle threads sleeping (as infer.py)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def rate(run_once: Callable[[], None], count: int) -> float:
    """`count` / seconds of one call of `run_once`."""
    started = time.perf_counter()
    run_once()
    return count / (time.perf_counter() - started)


def torch_pass(graph: Any, tensors: list[torch.Tensor], threads: int, batch: int) -> Callable[[], None]:
    """One PyTorch pass over all pairs, `batch` at a time, on `threads` threads."""

    def run() -> None:
        torch.set_num_threads(threads)
        with torch.inference_mode():
            for first in range(0, len(tensors[0]), batch):
                graph(tensors[0][first : first + batch], tensors[1][first : first + batch])

    return run


def onnx_pass(session: Any, arrays: list[np.ndarray], batch: int) -> Callable[[], None]:
    """One onnxruntime pass over all pairs, `batch` at a time."""

    def run() -> None:
        for first in range(0, len(arrays[0]), batch):
            session.run(
                PAIR_OUTPUTS, {"image_a": arrays[0][first : first + batch], "image_b": arrays[1][first : first + batch]}
            )

    return run


def lone_pair_pass(pair_net: Any, panels: np.ndarray, count: int) -> Callable[[], None]:
    """`count` pairs through the per-pair path infer.py takes (describe both panels, then predict)."""

    def run() -> None:
        for _ in range(count):
            pair_net.predict_pair(pair_net.describe(panels[0]), pair_net.describe(panels[1]), 0.5)

    return run


def timed_rounds(settings: dict[str, tuple[Callable[[], None], int]], rounds: int) -> dict[str, list[float]]:
    """Pairs/s of every setting per round, the settings alternating within each round (after a
    warm-up call each: first calls allocate and pick kernels)."""
    for run_once, _ in settings.values():
        run_once()
    rates: dict[str, list[float]] = {label: [] for label in settings}
    for _ in range(rounds):
        for label, (run_once, count) in settings.items():
            rates[label].append(rate(run_once, count))
    return rates


def measure(
    name: str, threads: list[int], batch_sizes: list[int], pairs: int, rounds: int, panel_side: int
) -> dict[str, Any]:
    """Export `name` and time its PyTorch forward, its ONNX session and the per-pair ONNX path, at
    each thread count and batch size, in alternating rounds."""
    from inference.pair_onnx import OnnxPairNet

    module = build_pair_module(name)
    size = int(module.net.preprocess.size)
    graph = PairScoringGraph(module.net).eval()
    rng = np.random.default_rng(0)
    arrays = [rng.random((pairs, 3, size, size), dtype=np.float32) for _ in range(2)]
    tensors = [torch.from_numpy(a) for a in arrays]
    panels = rng.integers(0, 256, size=(2, panel_side, panel_side, 3), dtype=np.uint8)
    lone_pairs = max(4, pairs // 4)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.onnx"
        started = time.perf_counter()
        export_onnx(module, path)
        export_seconds = time.perf_counter() - started
        settings: dict[str, tuple[Callable[[], None], int]] = {}
        for count in threads:
            session = onnx_session(path, count)
            for batch in batch_sizes:
                settings[f"torch, {count} thread(s), batch {batch}"] = (torch_pass(graph, tensors, count, batch), pairs)
                settings[f"onnx, {count} thread(s), batch {batch}"] = (onnx_pass(session, arrays, batch), pairs)
            settings[f"onnx, {count} thread(s), lone pair from {panel_side} px panels"] = (
                lone_pair_pass(OnnxPairNet(session, size), panels, lone_pairs),
                lone_pairs,
            )
        rates = timed_rounds(settings, rounds)
    medians = {label: statistics.median(values) for label, values in rates.items()}
    return {
        "input_size": size,
        "parameters": sum(p.numel() for p in module.net.parameters()),
        "export_seconds": export_seconds,
        "pairs_per_second": medians,
        "rounds": rates,
    }


def reference_label(label: str, threads: list[int]) -> str:
    """The PyTorch row a setting is compared with: one thread, the same batch (batch 1 for lone pairs)."""
    batch = label.rsplit(" ", 1)[-1] if "batch" in label else "1"
    return f"torch, {min(threads)} thread(s), batch {batch}"


def markdown(results: dict[str, Any], threads: list[int], load: tuple[float, float]) -> str:
    """One row per setting: pairs/s (median of the rounds) and the ratio to the reference row."""
    lines = [
        f"Load average {load[0]:.2f} before, {load[1]:.2f} after (1 minute). Ratios: to the PyTorch forward on "
        f"{min(threads)} thread(s) at the same batch size, measured in the same rounds.",
        "",
        "| detector (input) | setting | pairs/s | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for name, found in results.items():
        rates = found["pairs_per_second"]
        for label, value in rates.items():
            reference = rates.get(reference_label(label, threads))
            ratio = f"{value / reference:.2f}x" if reference else "-"
            lines.append(f"| {name} ({found['input_size']} px) | {label} | {value:.1f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--detectors", nargs="+", default=["pairnet_tiny", "pairnet"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--pairs", type=int, default=64, help="pairs per timed pass")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--panel-side", type=int, default=512)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    results = {
        name: measure(name, args.threads, args.batch_sizes, args.pairs, args.rounds, args.panel_side)
        for name in args.detectors
    }
    load = (load_before, os.getloadavg()[0])
    text = markdown(results, args.threads, load)
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "load_average": load, "results": results}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
