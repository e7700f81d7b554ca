"""Helpers shared by tests: composing the real Hydra configs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TINY_NPR = ["detector.net.width=8", "detector.net.layers=[1,1]", "detector.net.block=basic"]


def tiny_npr_net(preprocess: dict | None = None) -> dict:
    """The net config of the smallest NPR (the overrides TINY_NPR give through Hydra)."""
    return {
        "_target_": "detectors.npr.NPR",
        "width": 8,
        "layers": [1, 1],
        "block": "basic",
        "preprocess": preprocess or {"size": 32, "mode": "center_crop"},
    }


def compose_config(config_name: str, overrides: list[str]) -> DictConfig:
    """The config an entry point would see for these command-line overrides."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides, return_hydra_config=True)


def small_train_overrides(manifest: Path) -> list[str]:
    """The real train config on a small manifest: tiny NPR, CPU, no progress bar, no workers."""
    return [
        "data=manifest",
        f"data.manifest={manifest}",
        "data.num_workers=0",
        "data.batch_size=16",
        "trainer=cpu",
        "trainer.max_epochs=1",
        "trainer.enable_progress_bar=false",
        "detector.net.preprocess.size=64",
        *TINY_NPR,
    ]


def prepare_train_config(overrides: list[str], output_dir: Path) -> DictConfig:
    """What `python train.py <overrides>` would hand to `train()`, with its run directory at `output_dir`."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    cfg = compose_config("train", overrides)
    HydraConfig().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
        del cfg["hydra"]  # a real run's config has no `hydra` node; `${hydra:...}` reads HydraConfig
    return cfg


class TensorLike:
    """Stands in for a torch tensor (detach().cpu().numpy()), without paying torch's import here."""

    def __init__(self, array):
        self.array = np.asarray(array)

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.array


def write_tiny_model(folder: Path, preprocess: dict | None = None, onnx: bool = True, seed: int = 0) -> dict:
    """An untrained tiny NPR written as `model.ckpt` (the layout train.py saves) and, with `onnx`,
    exported to `model.onnx`; returns {"ckpt": path, "onnx": path or None, "module": module}."""
    import torch

    from detectors.module import DetectorModule
    from exporting.onnx_export import export_onnx

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    module = DetectorModule(net=tiny_npr_net(preprocess), name="npr").eval()
    ckpt = folder / "model.ckpt"
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, ckpt)
    path = export_onnx(module, folder / "model.onnx").path if onnx else None
    return {"ckpt": ckpt, "onnx": path, "module": module}


def write_pairnet_checkpoint(path: Path, seed: int) -> Path:
    """An untrained `pairnet_tiny` (configs/detector/pairnet_tiny.yaml) in train.py's checkpoint layout
    (`hyper_parameters.net`, the network's weights under `net.` and the `threshold` buffer)."""
    import torch
    from omegaconf import OmegaConf

    from detectors.build import build_detector, to_plain

    torch.manual_seed(seed)
    config = OmegaConf.load(CONFIGS / "detector" / "pairnet_tiny.yaml")
    net = build_detector(config.net)
    state = {f"net.{key}": value for key, value in net.state_dict().items()} | {"threshold": torch.tensor(0.5)}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"hyper_parameters": {"net": to_plain(config.net), "name": str(config.name)}, "state_dict": state}, path)
    return path


def write_images(folder: Path, sizes: list[tuple[int, int]], seed: int = 0, suffix: str = ".png") -> list[Path]:
    """Random RGB images of the given (height, width) sizes, named 000.png, 001.png, ..."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i, size in enumerate(sizes):
        paths.append(folder / f"{i:03d}{suffix}")
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(paths[-1])
    return paths


def run_without(module: str, script: str, *settings: str, cwd) -> subprocess.CompletedProcess:
    """`python script settings` with `module` unimportable, as when it is not installed."""
    blocked = (
        f"import runpy, sys; sys.modules[{module!r}] = None; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", blocked, str(ROOT / script), *settings],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout, not an installed one
        timeout=300,
    )
