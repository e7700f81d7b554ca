"""Training-free evidence maps for learned localizers: late fusion (`evidence` in a learned
localizer's config) and the input channels of the `evidence` localizer (`detectors.evidence_net`).

The training-free localizers (noise level, Splicebuster, JPEG ghosts, copy-move self-matching)
find traces a small learned model trained minutes on a CPU does not. With `evidence` set, a
learned localizer (`seg`, `mvss`, `trufor`) adds their pixel logits to its own, each times a
learned weight: mask_logit = own + sum_i w_i * clamp(evidence_i). The weights start at zero, so
training starts from the learned model alone and moves each weight only as far as its evidence
helps the loss; the evidence itself has nothing to train and runs without gradients. The maps are
fused after the network (late fusion), not fed to its first layer, so every localizer takes them
without a change to its architecture; a detection head (`image_score: head`) does not see them.

    python train.py detector=seg_tiny 'detector.net.evidence={noise_level: {}, jpeg_ghost: {}}'

The maps take from a tenth of a second to a second per image on a CPU, and a training run sees the
same images every epoch: `EvidenceMaps` keeps each image's maps, keyed by a hash of its pixels, up
to `cache_mb` megabytes, so every epoch after the first costs only the network.
"""

from __future__ import annotations

import hashlib
import importlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from detectors.base import autocast_off, capturing_graph

# evidence name -> the training-free localizer class that computes it
EVIDENCE_DETECTORS = {
    "noise_level": "detectors.noise_level.NoiseLevelLocalizer",
    "splicebuster": "detectors.splicebuster.SplicebusterLocalizer",
    "jpeg_ghost": "detectors.jpeg_ghost.JpegGhostLocalizer",
    "jpeg_grid": "detectors.jpeg_grid.JpegGridLocalizer",
    "copy_move_selfmatch": "detectors.copy_move.SelfMatchLocalizer",
}
# a block far from any evidence reads as a large negative logit; clamped so one map cannot swamp the rest
EVIDENCE_LOGIT_LIMIT = 10.0
DEFAULT_CACHE_MB = 512.0


def build_evidence_detector(name: str, options: Mapping[str, Any] | None) -> nn.Module:
    """The training-free localizer `name` built with `options` (its config's `net` keys)."""
    if name not in EVIDENCE_DETECTORS:
        raise ValueError(f"unknown evidence {name!r}; known: {', '.join(EVIDENCE_DETECTORS)}")
    module_name, class_name = EVIDENCE_DETECTORS[name].rsplit(".", 1)
    detector = getattr(importlib.import_module(module_name), class_name)(**dict(options or {}))
    if hasattr(detector, "standalone"):
        detector.standalone = False  # one map among others: a small image is not refused for it
    return detector.eval()


def pixel_key(image: torch.Tensor) -> bytes:
    """A digest of one image's (3, H, W) pixels and size: equal pixels, equal key."""
    pixels = image.detach().to("cpu", torch.float32).contiguous()
    digest = hashlib.blake2b(pixels.numpy().tobytes(), digest_size=16)
    digest.update(str(tuple(pixels.shape)).encode())
    return digest.digest()


class EvidenceMaps(nn.Module):
    """The clamped pixel logits of the named training-free localizers, (N, K, H, W), no gradients.

    `evidence`: name -> options of each map (`EVIDENCE_DETECTORS`). `cache_mb`: how many megabytes
    of maps (float32, on the CPU) are kept, oldest dropped first; 0 keeps none. The cache
    lives in memory only, never in a checkpoint.
    """

    def __init__(self, evidence: Mapping[str, Mapping[str, Any] | None], cache_mb: float = DEFAULT_CACHE_MB) -> None:
        super().__init__()
        if not evidence:
            raise ValueError("evidence must name at least one training-free localizer")
        if cache_mb < 0:
            raise ValueError(f"evidence cache_mb must be >= 0, got {cache_mb}")
        self.names = list(evidence)
        self.detectors = nn.ModuleDict({name: build_evidence_detector(name, evidence[name]) for name in self.names})
        refusals = [getattr(d, "onnx_export_refusal", None) for d in self.detectors.values()]
        self.onnx_export_refusal = next((f"evidence: {r}" for r in refusals if r), None)
        self.cache_bytes = int(cache_mb * 2**20)
        self.cache: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self.cached_bytes = 0
        self.computed = 0  # images whose maps were computed (not taken from the cache)

    @property
    def min_image_side(self) -> int:
        """The smallest image side (px) every map scores (`noise_level`: more than half a block)."""
        return max(int(getattr(detector, "min_image_side", 1)) for detector in self.detectors.values())

    def train(self, mode: bool = True) -> "EvidenceMaps":
        """The evidence detectors always score as at inference."""
        super().train(mode)
        self.detectors.eval()
        return self

    def compute(self, image: torch.Tensor) -> torch.Tensor:
        """(N, K, H, W) clamped logits, computed now (no cache)."""
        if not capturing_graph():  # counting would fix the batch size of an exported graph
            self.computed += len(image)
        with torch.no_grad(), autocast_off(image.device):  # float32 maps, as infer.py computes them
            maps = [self.detectors[name](image.float())["mask_logit"].float() for name in self.names]
        return torch.cat(maps, dim=1).clamp(-EVIDENCE_LOGIT_LIMIT, EVIDENCE_LOGIT_LIMIT)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """(N, K, H, W) clamped logits of `image`, from the cache where its pixels were seen before."""
        if not self.cache_bytes or capturing_graph():
            return self.compute(image).to(image.dtype)
        keys = [pixel_key(single) for single in image]
        found = {key: self.cache[key] for key in keys if key in self.cache}
        for key in found:
            self.cache.move_to_end(key)
        missing = [i for i, key in enumerate(keys) if key not in found]
        if missing:  # kept here too: a cache smaller than the batch may drop them at once
            for i, maps in zip(missing, self.compute(image[missing]).cpu()):
                found[keys[i]] = maps
                self.remember(keys[i], maps)
        return torch.stack([found[key] for key in keys]).to(image.device, image.dtype)

    def remember(self, key: bytes, maps: torch.Tensor) -> None:
        size = maps.numel() * maps.element_size()
        self.cache[key] = maps
        self.cached_bytes += size
        while self.cached_bytes > self.cache_bytes and len(self.cache) > 1:
            _, dropped = self.cache.popitem(last=False)
            self.cached_bytes -= dropped.numel() * dropped.element_size()


class EvidenceFusion(EvidenceMaps):
    """Training-free maps as weighted extra logits of a learned map (see the module docstring)."""

    def __init__(self, evidence: Mapping[str, Mapping[str, Any] | None], cache_mb: float = DEFAULT_CACHE_MB) -> None:
        super().__init__(evidence, cache_mb)
        self.weight = nn.Parameter(torch.zeros(len(self.names)))

    def logits(self, image: torch.Tensor) -> torch.Tensor:
        """(N, K, H, W) clamped pixel logits of the K evidence maps of `image` (no gradients)."""
        return self(image)

    def fuse(self, mask_logit: torch.Tensor, evidence: torch.Tensor) -> torch.Tensor:
        """`mask_logit` plus the weighted evidence logits (both at the input's size)."""
        return mask_logit + (self.weight.view(1, -1, 1, 1).to(evidence) * evidence).sum(1, keepdim=True)
