"""Saving and loading the generator networks trained here (autoencoders, latent VAE, DDPM).

A file holds the model's constructor `config` and its `state_dict`, plain tensors and values only, so
it loads with `torch.load(weights_only=True)` and rebuilds the network without running file code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

Model = TypeVar("Model", bound=nn.Module)


def save_model(model: nn.Module, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": dict(model.config), "state_dict": model.state_dict()}, path)
    return path


def load_model(cls: type[Model], path: str | Path, device: str | torch.device = "cpu", what: str = "model") -> Model:
    """Rebuild `cls(**config)` from a file written by `save_model`, in eval mode on `device`."""
    ckpt = torch.load(Path(path), map_location=device, weights_only=True)
    if not isinstance(ckpt, dict) or "config" not in ckpt or "state_dict" not in ckpt:
        raise ValueError(f"{path} is not a {what} checkpoint (expected keys 'config' and 'state_dict')")
    model = cls(**ckpt["config"])
    model.load_state_dict(ckpt["state_dict"])
    return model.to(device).eval()
