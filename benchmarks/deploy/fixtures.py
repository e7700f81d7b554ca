"""What the deployment figures run on: untrained models exported as `.ckpt` and `.onnx`, PNGs, and
those PNGs decoded and batched as the scoring loop would."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


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


def decode(paths: list[Path], geometry) -> list[np.ndarray]:
    """What the limit charges for decoding: read and bring to the network size, one thread."""
    from datamodules.io import read_image

    return [geometry(read_image(path)) for path in paths]


def in_batches(images: list[np.ndarray], batch_size: int) -> list[np.ndarray]:
    from datamodules.geometry import to_network_input

    return [to_network_input(images[i : i + batch_size]) for i in range(0, len(images), batch_size)]
