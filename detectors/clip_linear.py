"""CLIP features -> linear head: UnivFD (frozen CLIP) and Effort (SVD-adapted CLIP).

UnivFD (Ojha et al., CVPR 2023) showed that a linear probe on frozen CLIP ViT-L/14 `encode_image`
features generalizes across generators far better than networks trained end to end on one
generator's artifacts. Effort (Yan et al., ICML 2025) keeps that head but trains the smallest
singular direction of every attention projection (`adapter: svd`). The tower's own
normalization is applied inside `forward`, and its default preprocessing is UnivFD's (centre
crop at the tower's size, no resizing).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import torch
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.base import Detector
from detectors.blocks.clip import ClipImageEncoder, clip_preprocess, clip_spec

log = logging.getLogger(__name__)


class ClipLinear(Detector):
    """Binary classifier: `Linear(CLIP.encode_image(x))`."""

    def __init__(
        self,
        model: str | Mapping[str, Any] = "ViT-L-14",
        pretrained: str | None = "openai",
        adapter: str = "frozen",
        residual_rank: int = 1,
        cache_dir: str | None = None,
        quick_gelu: bool | None = None,
        interpolation: str = "bilinear",
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        spec = clip_spec(model, pretrained, quick_gelu)
        overrides = preprocess.to_dict() if isinstance(preprocess, Preprocess) else preprocess
        super().__init__(clip_preprocess(spec, overrides))
        self.encoder = ClipImageEncoder(model, pretrained, adapter, residual_rank, cache_dir, quick_gelu, interpolation)
        self.head = nn.Linear(self.encoder.embed_dim, 1)
        # UnivFD initializes its probe with N(0, 0.02); a small head keeps early logits near 0.
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logit": self.head(self.encoder(self.normalize(image))).squeeze(1)}
