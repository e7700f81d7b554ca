"""clip_freq: CLIP semantics + frequency artifacts in one detector (in the spirit of CO-SPY).

Semantic features (CLIP) generalize across generators but miss low-level traces; artifact
features (NPR / DCT residuals) catch up-sampling traces but overfit to one generator's. CO-SPY
(Cheng et al., CVPR 2025) fuses both. Two views of the input are made inside `forward`: the
artifact branch sees the crop at native resolution (resizing erases the traces), the CLIP branch
sees it resized to the tower's size with `F.interpolate` (so the export carries it).

Fusion (`fusion`):
- `concat`, CO-SPY's end-to-end mode: each branch has its own linear head whose logit weights that
  branch's features; the weighted features are concatenated into a linear classifier.
- `late`: a learned affine combination of the two branch logits.
In training, each sample drops one branch (chosen at random) with probability `branch_dropout`, so
neither branch can carry the decision alone. `aux_weight` adds each branch's own BCE to the loss.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.base import Detector, autocast_off
from detectors.blocks.clip import ClipImageEncoder, clip_preprocess, clip_spec
from detectors.blocks.frequency import dct_highpass_residual
from detectors.blocks.residuals import neighboring_pixel_residual
from detectors.blocks.resnet import BLOCKS, truncated_resnet

ARTIFACTS = ("npr", "dct", "both")
FUSIONS = ("concat", "late")


class ArtifactBranch(nn.Module):
    """NPR and/or DCT high-pass residuals -> truncated ResNet -> global average pooling."""

    def __init__(
        self,
        artifact: str = "npr",
        width: int = 64,
        layers: Sequence[int] = (3, 4),
        block: str = "bottleneck",
        residual_scale: float = 2.0 / 3.0,
        dct_cutoff: float = 0.25,
    ) -> None:
        super().__init__()
        if artifact not in ARTIFACTS:
            raise ValueError(f"artifact must be one of {ARTIFACTS}, got {artifact!r}")
        if block not in BLOCKS:
            raise ValueError(f"artifact block must be one of {sorted(BLOCKS)}, got {block!r}")
        self.artifact, self.residual_scale, self.dct_cutoff = artifact, residual_scale, dct_cutoff
        self.features, self.out_dim = truncated_resnet(6 if artifact == "both" else 3, width, layers, block)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def residual(self, image: torch.Tensor) -> torch.Tensor:
        parts = []
        if self.artifact in ("npr", "both"):
            parts.append(neighboring_pixel_residual(image) * self.residual_scale)
        if self.artifact in ("dct", "both"):
            with autocast_off(image.device):
                parts.append(dct_highpass_residual(image.float(), self.dct_cutoff).to(image.dtype))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.pool(self.features(self.residual(image))).flatten(1)


class ClipFreq(Detector):
    """Hybrid AI-generated-image classifier; returns `logit` and each branch's own logit."""

    def __init__(
        self,
        model: str | Mapping[str, Any] = "ViT-SO400M-14-SigLIP-384",
        pretrained: str | None = "webli",
        adapter: str = "frozen",
        residual_rank: int = 1,
        cache_dir: str | None = None,
        quick_gelu: bool | None = None,
        interpolation: str = "bilinear",
        artifact: str = "npr",
        artifact_width: int = 64,
        artifact_layers: Sequence[int] = (3, 4),
        artifact_block: str = "bottleneck",
        residual_scale: float = 2.0 / 3.0,
        dct_cutoff: float = 0.25,
        fusion: str = "concat",
        branch_dropout: float = 0.3,
        aux_weight: float = 0.0,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        if not 0.0 <= branch_dropout <= 1.0:
            raise ValueError(f"branch_dropout must lie in [0, 1], got {branch_dropout}")
        spec = clip_spec(model, pretrained, quick_gelu)
        overrides = preprocess.to_dict() if isinstance(preprocess, Preprocess) else preprocess
        super().__init__(clip_preprocess(spec, overrides))
        self.fusion, self.branch_dropout, self.aux_weight = fusion, branch_dropout, aux_weight
        self.semantic = ClipImageEncoder(
            model, pretrained, adapter, residual_rank, cache_dir, quick_gelu, interpolation
        )
        self.artifact = ArtifactBranch(
            artifact, artifact_width, artifact_layers, artifact_block, residual_scale, dct_cutoff
        )
        self.semantic_head = nn.Linear(self.semantic.embed_dim, 1)
        self.artifact_head = nn.Linear(self.artifact.out_dim, 1)
        if fusion == "concat":
            self.fusion_head = nn.Linear(self.semantic.embed_dim + self.artifact.out_dim, 1)
        else:
            self.fusion_head = nn.Linear(2, 1)
            nn.init.constant_(self.fusion_head.weight, 1.0)
            nn.init.zeros_(self.fusion_head.bias)

    def drop_branches(
        self, semantic_weight: torch.Tensor, artifact_weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Branch dropout on the per-sample branch weights (N x 1): in training a sample loses one
        branch, chosen uniformly, with probability `branch_dropout`; in eval nothing changes (and
        nothing batch-shaped is created, so exported graphs keep a dynamic batch)."""
        if not self.training or self.branch_dropout == 0.0:
            return semantic_weight, artifact_weight
        drop = torch.rand_like(semantic_weight) < self.branch_dropout
        drop_semantic = torch.rand_like(semantic_weight) < 0.5
        keep_semantic = (~(drop & drop_semantic)).to(semantic_weight.dtype)
        keep_artifact = (~(drop & ~drop_semantic)).to(artifact_weight.dtype)
        return semantic_weight * keep_semantic, artifact_weight * keep_artifact

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.normalize(image)
        semantic, artifact = self.semantic(x), self.artifact(x)
        semantic_logit, artifact_logit = self.semantic_head(semantic), self.artifact_head(artifact)
        semantic_weight, artifact_weight = self.drop_branches(semantic_logit, artifact_logit)
        if self.fusion == "concat":
            fused = torch.cat([semantic * semantic_weight, artifact * artifact_weight], dim=1)
        else:
            fused = torch.cat([semantic_weight, artifact_weight], dim=1)
        return {
            "logit": self.fusion_head(fused).squeeze(1),
            "logit_semantic": semantic_logit.squeeze(1),
            "logit_artifact": artifact_logit.squeeze(1),
        }

    def loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """Fused BCE, plus `aux_weight` times each branch's BCE (keeps both branches informative)."""
        loss = super().loss(outputs, batch)
        if self.aux_weight > 0:
            label = batch["label"].float()
            for key in ("logit_semantic", "logit_artifact"):
                loss = loss + self.aux_weight * F.binary_cross_entropy_with_logits(outputs[key], label)
        return loss
