"""The raw onnxruntime forward of the fp32 and the int8 (static QDQ) exports (the `int8` section)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from benchmarks.deploy.fixtures import build_models
from benchmarks.deploy.timing import best


def raw_forward_rate(session, batches: list[np.ndarray], repeats: int) -> float:
    session.run(["score"], {"image": batches[0]})
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for batch in batches:
            session.run(["score"], {"image": batch})
        times.append(time.perf_counter() - start)
    return sum(len(b) for b in batches) / best(times)


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
        rates = {
            kind: raw_forward_rate(
                ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), [batch] * 4, repeats
            )
            for kind, path in (("fp32", onnx), ("int8", int8))
        }
        result[name] = {
            "size": side,
            "fp32_images_per_s": round(rates["fp32"], 1),
            "int8_images_per_s": round(rates["int8"], 1),
            "speedup": round(rates["int8"] / rates["fp32"], 3),
            "max_score_deviation": report["quality"]["max_score_deviation"],
        }
    return result
