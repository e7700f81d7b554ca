"""A trained detector from a `.ckpt` or an `.onnx` file behind one `predict(images)` interface."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from datamodules.preprocess import Preprocess

if TYPE_CHECKING:
    from detectors.module import DetectorModule


class ModelLoadError(Exception):
    """A model file that cannot be used, with the reason."""


def resolve_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ModelLoadError(f"device must be auto, cpu or cuda, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError("device=cuda was requested but no CUDA device is available")
    return device


def load_checkpoint(path: str | os.PathLike, map_location: str = "cpu") -> "DetectorModule":
    """Rebuild a `DetectorModule` from a checkpoint without executing code from the file.

    The file is read with `torch.load(weights_only=True)` (tensors and plain containers only), and
    the network class named in it must be a `Detector` under the toolkit's `detectors` package.
    """
    from detectors.blocks.weights import architecture_only
    from detectors.module import DetectorModule

    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise ModelLoadError(f"{path}: refusing to load: the file holds objects other than weights and plain "
                             f"values, and loading them could run code ({error})") from None
    except (RuntimeError, EOFError, OSError) as error:
        raise ModelLoadError(f"{path}: not a readable checkpoint ({error})") from None
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(hparams, dict) or "net" not in hparams or "state_dict" not in checkpoint:
        raise ModelLoadError(f"{path}: not a checkpoint written by this toolkit's train.py "
                             "(no hyper_parameters.net / state_dict)")
    try:
        with architecture_only():  # every weight comes from the checkpoint, not from pretrained files
            module = DetectorModule(**hparams)
        module.load_state_dict(checkpoint["state_dict"])
    except (ValueError, TypeError, RuntimeError) as error:
        raise ModelLoadError(f"{path}: cannot rebuild the detector: {error}") from None
    return module.eval()


class TorchRuntime:
    """A `.ckpt` detector in PyTorch."""

    def __init__(self, path: str | os.PathLike, device: str = "auto") -> None:
        self.device = resolve_device(device)
        self.module = load_checkpoint(path).to(self.device)
        self.net = self.module.net
        self.name = self.module.hparams.get("name") or type(self.net).__name__
        self.preprocess: Preprocess = self.net.preprocess
        self.threshold = float(self.module.threshold)
        self.is_localizer = bool(self.net.is_localizer)

    @torch.inference_mode()
    def predict(self, images: torch.Tensor) -> dict[str, np.ndarray]:
        outputs = self.net(images.to(self.device, non_blocking=True))
        result = {"score": torch.sigmoid(outputs["logit"].float()).cpu().numpy()}
        if "mask_logit" in outputs:
            result["mask"] = torch.sigmoid(outputs["mask_logit"].float()).cpu().numpy()
        return result


class OnnxRuntime:
    """An exported `.onnx` detector in onnxruntime; preprocessing and threshold from its metadata."""

    def __init__(self, path: str | os.PathLike, device: str = "auto") -> None:
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"ONNX model {path} does not exist")
        self.device = resolve_device(device)
        providers = ["CPUExecutionProvider"]
        if self.device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        try:
            self.session = ort.InferenceSession(str(path), providers=providers)
        except Exception as error:  # onnxruntime raises its own unexported exception types
            raise ModelLoadError(f"{path}: onnxruntime cannot load it ({error})") from None
        meta = self.session.get_modelmeta().custom_metadata_map
        missing = {"detector", "preprocess", "threshold", "outputs"} - set(meta)
        if missing:
            raise ModelLoadError(f"{path}: not exported by this toolkit's export.py (missing metadata "
                                 f"{sorted(missing)})")
        self.name = meta["detector"]
        self.preprocess = Preprocess.from_config(json.loads(meta["preprocess"]))
        self.threshold = float(meta["threshold"])
        self.output_names = json.loads(meta["outputs"])
        self.is_localizer = "mask" in self.output_names

    def predict(self, images: torch.Tensor) -> dict[str, np.ndarray]:
        values = self.session.run(self.output_names, {"image": images.detach().cpu().numpy().astype(np.float32)})
        return dict(zip(self.output_names, values))


def load_runtime(path: str | os.PathLike, device: str = "auto") -> TorchRuntime | OnnxRuntime:
    """`.ckpt` -> PyTorch, `.onnx` -> onnxruntime; anything else is refused with the reason."""
    suffix = Path(path).suffix.lower()
    if suffix == ".onnx":
        return OnnxRuntime(path, device)
    if suffix in (".ckpt", ".pt", ".pth"):
        return TorchRuntime(path, device)
    raise ModelLoadError(f"model must be a .ckpt (from train.py) or .onnx (from export.py), got {path}")


def tile_positions(length: int, size: int) -> list[int]:
    """Offsets of `size`-long windows covering `length`: a grid from 0, plus one flush with the end."""
    if length <= size:
        return [0]
    positions = list(range(0, length - size + 1, size))
    return positions + [length - size] if positions[-1] != length - size else positions


def tile_image(image: torch.Tensor, size: int) -> torch.Tensor:
    """3 x H x W -> T x 3 x size x size tiles covering the image (zero-padded at the bottom/right
    when it is smaller than a tile, as the `pad` mode does)."""
    _, height, width = image.shape
    if height < size or width < size:
        image = torch.nn.functional.pad(image, (0, max(0, size - width), 0, max(0, size - height)))
        _, height, width = image.shape
    return torch.stack([image[:, y:y + size, x:x + size]
                        for y in tile_positions(height, size) for x in tile_positions(width, size)])


class TiledRuntime:
    """Scores every image as the mean (or max) over native-resolution tiles that cover all of it.

    Artifact detectors are trained on crops; cropping once at inference ignores most of a large
    image, and resizing would erase the traces. Wraps any runtime (.ckpt or .onnx); images are fed
    whole (`preprocess.mode` none), one at a time, and their tiles are batched.
    """

    REDUCTIONS = ("mean", "max")

    def __init__(self, runtime: TorchRuntime | OnnxRuntime, reduce: str = "mean", batch_size: int = 32) -> None:
        if reduce not in self.REDUCTIONS:
            raise ModelLoadError(f"tile_reduce must be one of {self.REDUCTIONS}, got {reduce!r}")
        if runtime.is_localizer or not runtime.preprocess.size or runtime.preprocess.mode == "resize":
            raise ModelLoadError(f"tiling needs a classifier with a crop or pad input size; {runtime.name} has "
                                 f"mode={runtime.preprocess.mode!r}, size={runtime.preprocess.size}")
        self.runtime, self.reduce, self.batch_size = runtime, reduce, batch_size
        self.name, self.threshold, self.is_localizer = runtime.name, runtime.threshold, False
        self.tile_size = int(runtime.preprocess.size)
        self.preprocess = Preprocess(size=None, mode="none", mean=runtime.preprocess.mean, std=runtime.preprocess.std)

    def predict(self, images: torch.Tensor) -> dict[str, np.ndarray]:
        scores = []
        for image in images:
            tiles = tile_image(image, self.tile_size)
            tile_scores = np.concatenate([np.asarray(self.runtime.predict(tiles[i:i + self.batch_size])["score"])
                                          for i in range(0, len(tiles), self.batch_size)])
            scores.append(tile_scores.max() if self.reduce == "max" else tile_scores.mean())
        return {"score": np.asarray(scores, dtype=np.float32)}
