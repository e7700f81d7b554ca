"""Late fusion of training-free evidence into a learned localizer's map (`evidence` in its config).

The training-free localizers (noise level, Splicebuster, JPEG ghosts, copy-move self-matching)
find traces a small learned model trained minutes on a CPU does not. With `evidence` set, a
learned localizer (`seg`, `mvss`, `trufor`) adds their pixel logits to its own, each times a
learned weight: mask_logit = own + sum_i w_i * clamp(evidence_i). The weights start at zero, so
training starts from the learned model alone and moves each weight only as far as its evidence
helps the loss; the evidence itself has nothing to train and runs without gradients. The maps are
fused after the network (late fusion), not fed to its first layer, so every localizer takes them
without a change to its architecture; a detection head (`image_score: head`) does not see them.

    python train.py detector=seg_tiny 'detector.net.evidence={noise_level: {}, jpeg_ghost: {}}'
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

# evidence name -> the training-free localizer class that computes it
EVIDENCE_DETECTORS = {
    "noise_level": "detectors.noise_level.NoiseLevelLocalizer",
    "splicebuster": "detectors.splicebuster.SplicebusterLocalizer",
    "jpeg_ghost": "detectors.jpeg_ghost.JpegGhostLocalizer",
    "copy_move_selfmatch": "detectors.duplication.SelfMatchLocalizer",
}
# a block far from any evidence reads as a large negative logit; clamped so one map cannot swamp the rest
EVIDENCE_LOGIT_LIMIT = 10.0


def build_evidence_detector(name: str, options: Mapping[str, Any] | None) -> nn.Module:
    """The training-free localizer `name` built with `options` (its config's `net` keys)."""
    if name not in EVIDENCE_DETECTORS:
        raise ValueError(f"unknown evidence {name!r}; known: {', '.join(EVIDENCE_DETECTORS)}")
    module_name, class_name = EVIDENCE_DETECTORS[name].rsplit(".", 1)
    detector = getattr(importlib.import_module(module_name), class_name)(**dict(options or {}))
    return detector.eval()


class EvidenceFusion(nn.Module):
    """Training-free maps as weighted extra logits of a learned map (see the module docstring)."""

    def __init__(self, evidence: Mapping[str, Mapping[str, Any] | None]) -> None:
        super().__init__()
        if not evidence:
            raise ValueError("evidence must name at least one training-free localizer")
        self.names = list(evidence)
        self.detectors = nn.ModuleDict({name: build_evidence_detector(name, evidence[name]) for name in self.names})
        self.weight = nn.Parameter(torch.zeros(len(self.names)))
        refusals = [getattr(d, "onnx_export_refusal", None) for d in self.detectors.values()]
        self.onnx_export_refusal = next((f"evidence: {r}" for r in refusals if r), None)

    def train(self, mode: bool = True) -> "EvidenceFusion":
        """The evidence detectors always score as at inference; only the weights train."""
        super().train(mode)
        self.detectors.eval()
        return self

    def logits(self, image: torch.Tensor) -> torch.Tensor:
        """(N, K, H, W) clamped pixel logits of the K evidence maps of `image` (no gradients)."""
        with torch.no_grad():
            maps = [self.detectors[name](image)["mask_logit"].float() for name in self.names]
        return torch.cat(maps, dim=1).clamp(-EVIDENCE_LOGIT_LIMIT, EVIDENCE_LOGIT_LIMIT).to(image.dtype)

    def fuse(self, mask_logit: torch.Tensor, evidence: torch.Tensor) -> torch.Tensor:
        """`mask_logit` plus the weighted evidence logits (both at the input's size)."""
        return mask_logit + (self.weight.view(1, -1, 1, 1).to(evidence) * evidence).sum(1, keepdim=True)
