"""Effort (Yan et al., ICML 2025): orthogonal subspace fine-tuning of CLIP for AI-generated images.

As in the authors' code (YZY-stack/Effort-AIGI-Detection, `effort_detector.py`): the Hugging Face
CLIP ViT-L/14 vision model; every q, k, v and output projection of its attention layers becomes
W = W_main + U_r S_r V_r, W_main the top-(n - rank) SVD reconstruction (frozen) and the residual the
smallest `residual_rank` singular directions (trainable); everything else is frozen. The pooled CLS
(`pooler_output`, 1024-d, before the projection) -> Linear(1024, 2); the score is the softmax
probability of class 1, so our `logit` is the difference of the two class logits (sigmoid of it is
that probability, and BCE on it equals their two-class cross-entropy). Their demo resizes to
224 x 224 without cropping, and so do we. Their orthogonality and singular-value-keeping losses
are offered with weights (0 by default: the authors' current training code leaves them out).

`pretrained` loads a released checkpoint (`module.backbone...` / `module.head...`), including the
files that lack the frozen SVD copies (`weight_main`, `U_r`, `S_r`, `V_r`): W_main is then
recomputed from the original CLIP weights, which must be those of `clip`.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.base import Detector
from detectors.blocks.clip import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from detectors.blocks.hf_clip import load_hf_clip_vision
from detectors.blocks.svd_adapter import apply_adapter, svd_regularization
from detectors.blocks.weights import MissingWeightsError, weights_deferred

log = logging.getLogger(__name__)

# Keys of the authors' SVD layers that hold frozen copies of the top singular directions; ours
# keeps only W_main (and recomputes it when a file lacks it).
FROZEN_FACTOR_KEYS = ("U_r", "S_r", "V_r")
TRAINED_LEAVES = ("U_residual", "S_residual", "V_residual")


def effort_state_dict(release: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The authors' checkpoint keys -> ours (documented mapping).

    `module.backbone.<k>` -> `backbone.<k>` (the HF `CLIPVisionTransformer`, same names), with the
    SVD factors reshaped to our one-chunk layout (`U_residual` n x r -> 1 x n x r, `S_residual` r ->
    1 x r, `V_residual` r x n -> 1 x r x n); `module.head.<k>` -> `head.<k>`; `U_r`, `S_r`, `V_r`
    (frozen copies) and `position_ids` buffers are dropped. A `state_dict` wrapper is unwrapped.
    """
    release = release.get("state_dict", release) if isinstance(release.get("state_dict"), Mapping) else release
    ours: dict[str, torch.Tensor] = {}
    for key, value in release.items():
        key = key[len("module.") :] if key.startswith("module.") else key
        leaf = key.rsplit(".", 1)[-1]
        if leaf in FROZEN_FACTOR_KEYS or leaf == "position_ids" or not key.startswith(("backbone.", "head.")):
            continue
        if leaf in ("U_residual", "V_residual", "S_residual"):
            value = value.unsqueeze(0)
        ours[key] = value
    return ours


class Effort(Detector):
    """Binary AI-generated-image classifier: SVD-residual CLIP -> Linear(hidden, 2)."""

    def __init__(
        self,
        clip: str | Mapping[str, Any] = "openai/clip-vit-large-patch14",
        pretrained: str | None = None,
        residual_rank: int = 1,
        orthogonality_weight: float = 0.0,
        singular_value_weight: float = 0.0,
        cache_dir: str | None = None,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        tower = load_hf_clip_vision(clip, projection=False, cache_dir=cache_dir)
        size = int(tower.config.image_size)
        config = {
            "size": size,
            "mode": "resize",
            "interpolation": "bilinear",
            **dict(preprocess.to_dict() if isinstance(preprocess, Preprocess) else preprocess or {}),
        }
        config.update(mean=list(OPENAI_CLIP_MEAN), std=list(OPENAI_CLIP_STD))
        super().__init__(config)
        self.image_size = size
        self.orthogonality_weight, self.singular_value_weight = orthogonality_weight, singular_value_weight
        # transformers 4 wraps the tower in `.vision_model`; 5 flattens it (same parameter names)
        self.backbone = getattr(tower, "vision_model", tower)
        self.parameter_counts = apply_adapter(self.backbone, "svd", residual_rank)
        self.head = nn.Linear(tower.config.hidden_size, 2)
        if pretrained and not weights_deferred():
            self.load_release(pretrained)

    def load_release(self, path: str) -> None:
        """Load the authors' checkpoint file through `effort_state_dict` (weights only, never code)."""
        if not os.path.isfile(path):
            raise MissingWeightsError(f"Effort checkpoint {path!r} does not exist")
        state = effort_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        missing, unexpected = self.load_state_dict(state, strict=False)
        if unexpected:
            raise ValueError(f"{path}: keys that are not Effort's: {unexpected[:5]}")
        trained = [k for k in missing if k.startswith("head.") or k.endswith(TRAINED_LEAVES)]
        if trained:
            raise ValueError(f"{path}: lacks trained Effort weights: {trained[:5]}")
        log.info(
            "Effort: loaded %s (%d tensors)%s",
            path,
            len(state),
            f"; {len(missing)} frozen tensors (W_main included) kept from the original CLIP weights" if missing else "",
        )

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        x = image
        if tuple(x.shape[-2:]) != (self.image_size, self.image_size):
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        features = self.backbone(pixel_values=self.normalize(x)).pooler_output
        logits = self.head(features)
        return {"logit": logits[:, 1] - logits[:, 0], "class_logits": logits}

    def loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """Two-class cross-entropy (as BCE on the logit difference), plus the optional regularizers."""
        loss = super().loss(outputs, batch)
        if self.training and (self.orthogonality_weight or self.singular_value_weight):
            orthogonality, keep = svd_regularization(self.backbone)
            loss = loss + self.orthogonality_weight * orthogonality + self.singular_value_weight * keep
        return loss
