"""What every detector is: an `nn.Module` from RGB in [0, 1] to a dict of logits."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from datamodules.preprocess import Preprocess


def capturing_graph() -> bool:
    """Whether the forward pass is being traced, compiled or exported into a graph, where Python
    checks on values and shapes (a cache lookup, a size refusal) must not run."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling() or torch.compiler.is_exporting()


@contextmanager
def autocast_off(device: torch.device) -> Iterator[None]:
    """Mixed precision suspended on `device`: fixed forensic statistics (squared gradients, DCT
    energies, similarities) overflow float16 or lose bfloat16's few mantissa bits, and what they
    give under a trainer's `16-mixed` must equal what infer.py computes in float32."""
    with torch.autocast(device_type=device.type, enabled=False):
        yield


class Detector(nn.Module):
    """Base class fixing the detector contract (docs/architecture.md, "Detectors").

    `forward(image)` takes float N x 3 x H x W RGB in [0, 1], normalizes inside (so exported graphs
    need no outside preprocessing) and returns `{"logit": (N,)}`; localizers add
    `{"mask_logit": (N, 1, H, W)}` and set `is_localizer`. Losses live in `loss()`, never in
    `forward`, so inference and export need no labels.

    No detector splits its forward into `forward_features` / `forward_head`: the two-branch
    classifiers fuse per-branch features and logits (clip_freq, CO-SPY), and the localizers split
    at the dense prediction (`Localizer`), so one such split would describe few of them.
    """

    is_localizer: bool = False
    # Whether `forward` applies `preprocess.pixel_divisor` (through `scale_pixels`); the others
    # refuse a divisor other than 255 rather than ignore it.
    scales_pixels: bool = False

    def __init__(self, preprocess: Preprocess | Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.preprocess = Preprocess.from_config(preprocess)
        if self.preprocess.pixel_divisor != 255 and not self.scales_pixels:
            raise ValueError(
                f"{type(self).__name__} takes 8-bit pixels / 255 only; got preprocess.pixel_divisor "
                f"{self.preprocess.pixel_divisor:g}"
            )
        self.register_buffer("pixel_mean", torch.tensor(self.preprocess.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(self.preprocess.std).view(1, 3, 1, 1), persistent=False)

    @property
    def learns_from_masks(self) -> bool:
        """Whether training this detector needs true masks: a localizer's does, unless a stage of its
        training learns from something else (TruFor's fingerprint phase: processing chains)."""
        return self.is_localizer

    def normalize(self, image: torch.Tensor) -> torch.Tensor:
        return (image - self.pixel_mean) / self.pixel_std

    def scale_pixels(self, image: torch.Tensor) -> torch.Tensor:
        """Loader input (8-bit / 255) -> 8-bit / `preprocess.pixel_divisor`, what the weights expect."""
        divisor = self.preprocess.pixel_divisor
        return image if divisor == 255 else image * (255.0 / divisor)

    def batch_inputs(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
        """What `forward` takes from a training batch: the images (pair detectors: both panels)."""
        return (batch["image"],)

    def loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """Binary cross-entropy of the image logit; localizers override to add mask terms."""
        return F.binary_cross_entropy_with_logits(outputs["logit"], batch["label"].float())
