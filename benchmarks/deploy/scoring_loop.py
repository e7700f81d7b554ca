"""`infer.py`'s scoring loop, model loaded, against the raw forward pass and against the limit that
decoding plus the raw forward set: the `pipeline`, `localizer` and `localizer_ckpt` sections."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from benchmarks.deploy.fixtures import ROOT, build_models, decode, in_batches, write_pngs
from benchmarks.deploy.timing import interleaved, median_rounded, rates


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
        counts = score_items(
            runtime,
            list(enumerate(map(str, paths))),
            writer,
            batch_size=batch_size,
            num_workers=workers,
            progress=False,
            masks_dir=masks,
        )
    assert counts["ok"] == len(paths), counts
    if save_masks:
        assert len(list(masks.glob("*.png"))) == len(paths)


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
    times = interleaved(
        {
            "decode": lambda n: decode(paths[:n], geometry),
            "forward": lambda n: onnx_forward(session, batches[: n // batch_size]),
            "forward_own_session": lambda n: onnx_forward(runtime.session, batches[: n // batch_size]),
            "pipeline": lambda n: score_loop(runtime, paths[:n], batch_size, work),
        },
        count,
        repeats,
        warm_up=count,
    )
    forward = np.minimum(times["forward"], times["forward_own_session"])
    limit = times["decode"] + forward
    return {
        "detector": "npr",
        "size": 224,
        "batch_size": batch_size,
        "images": count,
        "repeats": repeats,
        **rates(times, count),
        "limit_images_per_s": median_rounded(count / limit, 1),
        "ratio_to_limit": median_rounded(limit / times["pipeline"]),
        "ratio_to_raw_forward": median_rounded(forward / times["pipeline"]),
        "load_average": round(os.getloadavg()[0], 2),
    }


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
    return (
        models / "model.ckpt",
        models / "model.onnx",
        runtime,
        paths,
        geometry,
        in_batches(decode(paths, geometry), batch_size),
    )


def localizer(
    work: Path, repeats: int, name: str = "mvss", count: int = 8, batch_size: int = 8, size: int = 512
) -> dict:
    """A localizer on `count` PNGs of `size` x `size`, batch `batch_size`: the `.onnx` scoring loop
    with maps not saved and saved against the raw onnxruntime forward and against decoding plus it."""
    import onnxruntime as ort

    _, onnx, runtime, paths, geometry, batches = localizer_inputs(work, name, count, size, batch_size)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    times = interleaved(
        {
            "decode": lambda n: decode(paths[:n], geometry),
            "onnx_forward": lambda n: onnx_forward(session, [b[:n] for b in batches[: max(1, n // batch_size)]]),
            "onnx_forward_own_session": lambda n: onnx_forward(
                runtime.session, [b[:n] for b in batches[: max(1, n // batch_size)]]
            ),
            "onnx_pipeline": lambda n: score_loop(runtime, paths[:n], batch_size, work),
            "onnx_pipeline_masks": lambda n: score_loop(runtime, paths[:n], batch_size, work, save_masks=True),
        },
        count,
        repeats,
        warm_up=1,
    )
    forward = np.minimum(times["onnx_forward"], times["onnx_forward_own_session"])
    limit = times["decode"] + forward
    return {
        "detector": name,
        "size": size,
        "batch_size": batch_size,
        "images": count,
        "repeats": repeats,
        **rates(times, count, 3),
        "limit_images_per_s": median_rounded(count / limit),
        "ratio_to_raw_onnx": median_rounded(forward / times["onnx_pipeline"]),
        "ratio_to_limit": median_rounded(limit / times["onnx_pipeline"]),
        "masks_ratio_to_raw_onnx": median_rounded(forward / times["onnx_pipeline_masks"]),
        "masks_ratio_to_limit": median_rounded(limit / times["onnx_pipeline_masks"]),
        "load_average": round(os.getloadavg()[0], 2),
    }


def localizer_ckpt(
    work: Path, repeats: int, name: str = "mvss", count: int = 8, batch_size: int = 8, size: int = 512
) -> dict:
    """The same localizer's `.ckpt` scoring loop against the eager PyTorch forward, and the raw
    onnxruntime forward against the eager one (ONNX vs eager)."""
    import onnxruntime as ort
    import torch

    from inference.runtime import load_checkpoint, load_runtime

    ckpt, onnx, _, paths, _, batches = localizer_inputs(work, name, count, size, batch_size)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    runtime, module = load_runtime(ckpt, "cpu"), load_checkpoint(ckpt)
    times = interleaved(
        {
            "eager_forward": lambda n: eager_forward(module, [b[:n] for b in batches[: max(1, n // batch_size)]]),
            "ckpt_pipeline": lambda n: score_loop(runtime, paths[:n], batch_size, work),
            "onnx_forward": lambda n: onnx_forward(session, [b[:n] for b in batches[: max(1, n // batch_size)]]),
        },
        count,
        repeats,
        warm_up=1,
    )
    return {
        "detector": name,
        "size": size,
        "batch_size": batch_size,
        "images": count,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
        **rates(times, count, 3),
        "ckpt_ratio_to_raw_eager": median_rounded(times["eager_forward"] / times["ckpt_pipeline"]),
        "onnx_vs_eager": median_rounded(times["eager_forward"] / times["onnx_forward"]),
        "load_average": round(os.getloadavg()[0], 2),
    }
