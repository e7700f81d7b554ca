"""A trained detector from a `.ckpt` or an `.onnx` file behind one `predict(images)` interface."""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from datamodules.geometry import eval_geometry
from datamodules.preprocess import Preprocess

if TYPE_CHECKING:
    from detectors.base import Detector
    from detectors.module import DetectorModule

# torch is imported inside the functions that need it: scoring with an `.onnx` model never loads it
# (its import alone takes seconds, longer than scoring a handful of images).


log = logging.getLogger(__name__)


class ModelLoadError(Exception):
    """A model file that cannot be used, with the reason."""


class Runtime(Protocol):
    """What scoring needs of a loaded detector (`.ckpt`, `.onnx`, or a tiling wrapper around one)."""

    name: str
    threshold: float  # the calibrated decision threshold
    is_localizer: bool  # `predict` also returns `mask`: N x 1 x H x W probabilities
    preprocess: Preprocess  # the geometry the network is fed (`runtime_transform`)
    calibration: dict[str, Any] | None  # how its threshold was set (train.py, calibrate.py); None: never
    calibrated_tiles: dict[str, Any]  # how the scores its threshold was calibrated on were made

    def predict(self, images: Any) -> dict[str, np.ndarray]:
        """N x 3 x H x W float in [0, 1] -> `score` (N) probabilities of fake (+ `mask`, `confidence`)."""
        ...


def checked_pixels(images: Any, name: str) -> None:
    """Refuses integer images: `predict` takes floats in [0, 1], and 8-bit pixels (0..255) would be
    scored as if every one were saturated, without a word."""
    floating = (
        images.is_floating_point() if hasattr(images, "is_floating_point") else np.asarray(images).dtype.kind == "f"
    )
    if not floating:
        kind = images.dtype if hasattr(images, "dtype") else np.asarray(images).dtype
        raise TypeError(
            f"{name}: predict takes N x 3 x H x W floats in [0, 1], got {kind} images; "
            "divide 8-bit pixels by 255 (datamodules.geometry.to_network_input does)"
        )


def resolve_device(device: str = "auto") -> str:
    """`auto` | `cpu` | `cuda` | `cuda:N` for a PyTorch model, checked against the machine."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ModelLoadError(f"device must be auto, cpu or cuda, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError("device=cuda was requested but no CUDA device is available")
    return device


def check_model_file(path: Path, what: str) -> None:
    """A model path must name a file: a folder (a run's folder, or one whose name ends in .onnx)
    is said to be one, not to be missing."""
    if path.is_dir():
        raise ModelLoadError(f"{what} {path} is a folder, not a model file: give the .ckpt or .onnx file itself")
    if not path.is_file():
        from datamodules.io import looked_for

        raise ModelLoadError(f"{what} {path} does not exist{looked_for(path)}")


def read_checkpoint(path: str | os.PathLike, map_location: str = "cpu") -> dict[str, Any]:
    """The contents of a checkpoint written by `train.py`, read without executing code from the file
    (`torch.load(weights_only=True)`: tensors and plain containers only)."""
    import torch

    path = Path(path)
    check_model_file(path, "checkpoint")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise ModelLoadError(
            f"{path}: refusing to load: the file holds objects other than weights and plain "
            f"values, and loading them could run code ({error})"
        ) from None
    except Exception as error:  # whatever a file that is no checkpoint makes the unpickler raise
        reason = str(error) or type(error).__name__
        raise ModelLoadError(f"{path}: not a readable checkpoint ({reason})") from None
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(hparams, dict) or "net" not in hparams or "state_dict" not in checkpoint:
        raise ModelLoadError(
            f"{path}: not a checkpoint written by this toolkit's train.py (no hyper_parameters.net / state_dict)"
        )
    return checkpoint


def load_checkpoint(path: str | os.PathLike, map_location: str = "cpu") -> "DetectorModule":
    """Rebuild the training `DetectorModule` (Lightning) from a checkpoint, for export and training
    tools; the network class named in it must be a `Detector` under the toolkit's `detectors`
    package. Scoring needs only the network: `load_detector`, which does not import Lightning."""
    from detectors.blocks.weights import architecture_only
    from detectors.build import MissingPackageError
    from detectors.module import DetectorModule

    checkpoint = read_checkpoint(path, map_location)
    try:
        with architecture_only():  # every weight comes from the checkpoint, not from pretrained files
            module = DetectorModule(**checkpoint["hyper_parameters"])
        module.load_state_dict(checkpoint["state_dict"])
        module.category_thresholds = {
            str(k): float(v) for k, v in (checkpoint.get("category_thresholds") or {}).items()
        }
        module.calibration = checkpoint.get("calibration")  # how far the threshold can be trusted
    except (ValueError, TypeError, RuntimeError, MissingPackageError) as error:
        raise ModelLoadError(f"{path}: cannot rebuild the detector: {error}") from None
    return module.eval()


@dataclass
class LoadedDetector:
    """The network of a checkpoint with what scoring needs besides it: its name and calibrated threshold."""

    net: "Detector"
    name: str
    threshold: float
    category_thresholds: dict[str, float] = field(default_factory=dict)  # calibration.by=category
    target_fpr: float = 0.01
    calibration: dict[str, Any] | None = None  # how its threshold was set (None: never calibrated)


def load_detector(path: str | os.PathLike, map_location: str = "cpu") -> LoadedDetector:
    """The detector of a `train.py` checkpoint, rebuilt without Lightning: `hyper_parameters.net`
    builds the network (`detectors.build`, trusted classes only), the `net.` weights fill it, the
    `threshold` buffer gives the calibrated threshold. Any other key is refused, as
    `DetectorModule.load_state_dict` would (strict), so both paths accept the same files."""
    from detectors.blocks.weights import architecture_only
    from detectors.build import MissingPackageError, build_detector

    checkpoint = read_checkpoint(path, map_location)
    hparams, state = checkpoint["hyper_parameters"], checkpoint["state_dict"]
    try:
        with architecture_only():  # every weight comes from the checkpoint, not from pretrained files
            net = build_detector(hparams["net"])
        unexpected = sorted(k for k in state if not k.startswith("net.") and k != "threshold")
        if unexpected or "threshold" not in state:
            raise RuntimeError(f"unexpected keys {unexpected[:5]}" if unexpected else "no threshold buffer")
        net.load_state_dict({k[len("net.") :]: v for k, v in state.items() if k.startswith("net.")})
    except (ValueError, TypeError, RuntimeError, MissingPackageError) as error:
        raise ModelLoadError(f"{path}: cannot rebuild the detector: {error}") from None
    from inference.model_metadata import checked_calibration, checked_category_thresholds, checked_threshold

    try:
        stored = np.asarray(state["threshold"], dtype=np.float64)  # a tensor in every checkpoint train.py writes
        if stored.size != 1:
            raise ValueError(f"metadata 'threshold' must be one number, got {stored.size}")
        threshold = checked_threshold(float(stored.reshape(())), uncalibrated=True)
        category_thresholds = checked_category_thresholds(checkpoint.get("category_thresholds"))
        calibration = checked_calibration(checkpoint.get("calibration"))
    except ValueError as error:
        raise ModelLoadError(f"{path}: {error}") from None
    target_fpr = float(hparams.get("target_fpr", 0.01))
    return LoadedDetector(
        net.eval(), hparams.get("name") or type(net).__name__, threshold, category_thresholds, target_fpr, calibration
    )


def calibrated_tiles(calibration: dict[str, Any] | None) -> dict[str, Any]:
    """How the scores a model's threshold was calibrated on were made (`inference.tiling.tile_settings`):
    calibrate.py records it; train.py, and calibrations made before it did, score without tiles."""
    return (calibration or {}).get("scoring") or {"tiles": False}


class TorchRuntime:
    """A `.ckpt` detector in PyTorch. `tta=True` adapts prompt-based detectors (iapl) to each image
    before scoring it (`inference.tta`); images are then read at the adaptation's load size."""

    def __init__(self, path: str | os.PathLike, device: str = "auto", tta: bool = False) -> None:
        self.device = resolve_device(device)
        detector = load_detector(path)
        self.net = detector.net.to(self.device)
        self.name = detector.name
        self.preprocess: Preprocess = self.net.preprocess
        self.threshold = detector.threshold
        # calibration.by=category: {category: threshold}; inputs of other categories use `threshold`
        self.category_thresholds = dict(detector.category_thresholds)
        self.target_fpr = detector.target_fpr
        self.calibration = detector.calibration
        self.calibrated_tiles = calibrated_tiles(self.calibration)
        self.is_localizer = bool(self.net.is_localizer)
        self.confidence_maps = False  # infer.py save_confidence=true: also return reliability maps
        self.adapter = None
        if tta:
            from dataclasses import replace

            from inference.tta import ContextAdapter

            try:
                self.adapter = ContextAdapter(self.net, size=int(self.preprocess.size or 0))  # refused when no TTA
            except ValueError as error:
                raise ModelLoadError(f"tta=true: {error}") from None
            settings = self.adapter.settings
            self.preprocess = replace(
                self.preprocess, size=settings.load_size, mode="resize", interpolation=settings.interpolation
            )
        self.trained_preprocess, self.preprocess = (
            self.preprocess,
            scoring_preprocess(self.preprocess, self.is_localizer),
        )

    def predict(self, images: Any) -> dict[str, np.ndarray]:
        """`images`: N x 3 x H x W float in [0, 1], a numpy array or a tensor (of any float dtype:
        the network takes float32)."""
        import torch

        checked_pixels(images, self.name)
        batch = torch.as_tensor(images).to(self.device, torch.float32, non_blocking=True)
        if self.adapter is not None:  # adapting needs gradients: no inference mode around it
            return {"score": np.asarray([self.adapter.score(image) for image in batch], dtype=np.float32)}
        with torch.inference_mode():
            outputs = self.net(batch)
            result = {"score": torch.sigmoid(outputs["logit"].float()).cpu().numpy()}
            if "mask_logit" in outputs:
                result["mask"] = torch.sigmoid(outputs["mask_logit"].float()).cpu().numpy()
            if "confidence_logit" in outputs and self.confidence_maps:
                result["confidence"] = torch.sigmoid(outputs["confidence_logit"].float()).cpu().numpy()
        return result


class OnnxRuntime:
    """An exported `.onnx` detector in onnxruntime; preprocessing and threshold from its metadata.
    `fallback`: `device` was chosen for the user (device=auto, one process per GPU), not asked for:
    where onnxruntime cannot run there, the CPU is used quietly, as with `auto`."""

    def __init__(
        self, path: str | os.PathLike, device: str = "auto", tta: bool = False, fallback: bool = False
    ) -> None:
        import onnxruntime as ort

        path = Path(path)
        if tta:
            raise ModelLoadError(
                f"{path}: test-time adaptation takes gradient steps, which an ONNX graph cannot; "
                "use the .ckpt for tta=true (the exported model is the non-adapted one)"
            )
        check_model_file(path, "ONNX model")
        self.device = device
        required = device.startswith("cuda") and not fallback
        providers = onnx_providers(device, ort.get_available_providers(), required)
        options = ort.SessionOptions()
        # The decoding threads share the cores with the model: onnxruntime's threads must sleep when
        # idle, not spin (spinning takes the cores the next batch is being decoded on).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if not required:
            options.log_severity_level = 4  # a GPU that cannot start is not an error here: the CPU is used
        try:
            self.session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as error:  # onnxruntime raises its own unexported exception types
            raise ModelLoadError(f"{path}: onnxruntime cannot load it ({error})") from None
        self.check_session_device(path, required)
        from inference.model_metadata import read_onnx_metadata

        try:
            meta = read_onnx_metadata(self.session.get_modelmeta().custom_metadata_map)
            self.preprocess = Preprocess.from_config(meta["preprocess"])
            trained = Preprocess.from_config(meta["trained_preprocess"])
        except (ValueError, TypeError) as error:
            raise ModelLoadError(f"{path}: {error}") from None
        self.name = meta["detector"]
        self.threshold = meta["threshold"]
        self.category_thresholds = meta["category_thresholds"]
        self.target_fpr = meta["target_fpr"]
        self.calibration = meta["calibration"]
        self.calibrated_tiles = calibrated_tiles(self.calibration)
        self.output_names = meta["outputs"]
        self.min_side = meta["min_side"]
        self.is_localizer = "mask" in self.output_names
        self.confidence_maps = False  # infer.py save_confidence=true: also return `confidence` if exported
        # files exported before trained_preprocess: the same as preprocess
        self.trained_preprocess, self.preprocess = trained, scoring_preprocess(self.preprocess, self.is_localizer)
        # `export.py graph_preprocess=true` models take the decoded image itself and preprocess in the
        # graph: feed each image whole (mode none), one at a time.
        self.input_name = meta["input"]
        if meta["is_pair_detector"]:  # exporting.pair_export: infer.py scores panel pairs
            from inference.pair_onnx import OnnxPairNet

            self.net = OnnxPairNet(self.session, int(self.trained_preprocess.size))
        if self.input_name != "image":
            self.preprocess = Preprocess(size=None, mode="none", mean=self.preprocess.mean, std=self.preprocess.std)

    def check_session_device(self, path: Path, required: bool) -> None:
        """A CUDA device asked for (`required`) that the session could not start is refused; one chosen
        for the user (device=auto with Fabric processes) falls back to the CPU, said once."""
        if not self.device.startswith("cuda") or "CUDAExecutionProvider" in self.session.get_providers():
            return
        if required:
            raise ModelLoadError(
                f"device={self.device} was requested but onnxruntime could not start CUDA "
                "(see its log above: missing CUDA / cuDNN libraries?)"
            )
        # "process i of N scores on cuda:k" was said for this process
        log.info("%s: onnxruntime cannot run on %s here, so this process scores on the CPU", path.name, self.device)

    def predict(self, images: Any) -> dict[str, np.ndarray]:
        """`images`: N x 3 x H x W float in [0, 1], a numpy array (or a CPU tensor)."""
        checked_pixels(images, self.name)
        if hasattr(images, "detach"):
            images = images.detach().cpu().float().numpy()
        images = np.asarray(images, dtype=np.float32)
        if min(images.shape[-2:]) < self.min_side:
            height, width = images.shape[-2:]
            raise ValueError(
                f"{self.name} needs an image of at least {self.min_side} px on each side; got {height} x {width}"
            )
        if self.input_name != "image":  # back to the decoded 8-bit pixels (exact: they were v / 255)
            images = np.rint(images * 255).astype(np.uint8).transpose(0, 2, 3, 1)
        values = self.session.run(self.output_names, {self.input_name: images})
        return dict(zip(self.output_names, values))


def scoring_preprocess(preprocess: Preprocess, is_localizer: bool) -> Preprocess:
    """What a runtime feeds its network: localizers take the whole image at its own size (they pad
    to their stride inside and crop their map back), so the map covers every pixel of the original;
    classifiers keep the crop or resize they were trained with."""
    return preprocess.whole() if is_localizer else preprocess


def gpu_present() -> bool:
    """Whether this process may see an NVIDIA GPU, asked of the driver files rather than of torch
    (whose import alone costs seconds). An onnxruntime-gpu build on a machine without a GPU then
    stays on the CPU quietly instead of logging a failed CUDA start."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    return Path("/dev/nvidiactl").exists() or any(Path("/proc/driver/nvidia/gpus").glob("*"))


def onnx_providers(device: str, available: list[str], required: bool = True) -> list[Any]:
    """onnxruntime execution providers for `auto` | `cpu` | `cuda` | `cuda:N` (N: the GPU of this
    process, e.g. its rank's local device), checked against what the installed build offers: a
    CUDA device that is not `required` (chosen for the user) falls back to the CPU as `auto` does."""
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise ModelLoadError(f"device must be auto, cpu or cuda, got {device!r}")
    has_cuda, required = "CUDAExecutionProvider" in available, required and device.startswith("cuda")
    if required and not has_cuda:
        raise ModelLoadError(f"device={device} was requested but this onnxruntime has no CUDA execution provider")
    if device == "cpu" or not has_cuda or (not required and not gpu_present()):
        return ["CPUExecutionProvider"]
    index = int(device.split(":")[1]) if ":" in device else 0
    return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]


def load_runtime(path: str | os.PathLike, device: str = "auto", tta: bool = False, fallback: bool = False) -> Runtime:
    """`.ckpt` -> PyTorch, `.onnx` -> onnxruntime; anything else is refused with the reason.
    `fallback`: `device` was chosen for the user, not asked for (`OnnxRuntime`)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".onnx":
        runtime: Runtime = OnnxRuntime(path, device, tta, fallback)
    elif suffix in (".ckpt", ".pt", ".pth"):
        if importlib.util.find_spec("torch") is None:
            raise ModelLoadError(f"{path}: a .ckpt model needs torch, which is not installed; score its .onnx export")
        runtime = TorchRuntime(path, device, tta)
    else:
        raise ModelLoadError(f"model must be a .ckpt (from train.py) or .onnx (from export.py), got {path}")
    if math.isnan(runtime.threshold):
        log.warning(
            "%s has no calibrated threshold (NaN: its training scored no genuine validation image), so every "
            "image would be labelled genuine: pass threshold=, or calibrate it with calibrate.py",
            path,
        )
    return runtime


def runtime_transform(runtime: Runtime) -> Callable[[np.ndarray], np.ndarray]:
    """The evaluation geometry a runtime expects (`uint8 H x W x 3 -> network size`), built from its
    own preprocessing config: the one place `infer.py`, the robustness sweep and the benchmarks take
    it from. Identical to the albumentations eval transform, without importing torch."""
    return eval_geometry(runtime.preprocess)
