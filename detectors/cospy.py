"""CO-SPY (Cheng et al., CVPR 2025): semantic and artifact detectors, trained apart, then fused.

Faithful to the authors' code (Megum1/CO-SPY, `detectors/{sd-v1_4,progan}`), in its two published
variants:
- `sd-v1.4` (trained on DRCT-2M): semantic branch = frozen open_clip `ViT-SO400M-14-SigLIP-384`
  (`webli`) `encode_image` on the 384 px input normalized with mean = std = 0.5 -> Linear(1152, 1);
  artifact branch = the input resized (short side 224, bilinear, no antialiasing) in [0, 1], its
  reconstruction by the frozen Stable Diffusion v1.4 VAE from the latent mean, residual
  (x - recon) / 7 * 100 -> ResNet-50 stem, layer1, layer2 -> average pool (512) -> Linear(512, 1).
- `progan` (trained on CNNDet's ProGAN set): semantic branch = Hugging Face CLIP ViT-L/14
  `get_image_features` (768-d, CLIP mean/std) -> Linear(768, 1); artifact branch = NPR residual of
  the ImageNet-normalized input (x - nearest down/up-sampled x, times 2/3) -> the same trunk.
Fusion = Linear(2, 1) over the two branch logits. Training is staged as in the authors' code
(`stage`): each branch alone (AdamW 1e-4, BCE; the semantic branch with feature-space mixup,
Beta(0.2, 0.2), on about half of each batch), then the fusion layer alone (lr 0.1, its bias kept
>= `fusion_bias_floor` by a hinge term). `logit` is the output of the stage being trained.

`pretrained` loads the authors' released folder (`semantic_weights.pth`, `artifact_weights.pth`,
`fusion_weights.pth`) through `cospy_state_dict`; the frozen towers come from `clip` / `vae`.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from datamodules.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from detectors.base import Detector
from detectors.blocks.clip import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ClipImageEncoder
from detectors.blocks.hf_clip import load_hf_clip_vision
from detectors.blocks.residuals import neighboring_pixel_residual
from detectors.blocks.resnet import truncated_resnet
from detectors.blocks.vae import VAEReconstruction
from detectors.blocks.weights import MissingWeightsError, weights_deferred

log = logging.getLogger(__name__)

VARIANTS = ("sd-v1.4", "progan")
STAGES = ("semantic", "artifact", "fusion")
RELEASE_FILES = {"semantic": "semantic_weights.pth", "artifact": "artifact_weights.pth", "fusion": "fusion_weights.pth"}
# Authors' artifact encoder -> our trunk (nn.Sequential: 0 conv, 1 bn, 2 relu, 3 max-pool, 4 layer1, 5 layer2).
TRUNK_NAMES = {"conv1.": "0.", "bn1.": "1.", "layer1.": "4.", "layer2.": "5."}
VARIANT_DEFAULTS = {
    "sd-v1.4": {
        "clip": "ViT-SO400M-14-SigLIP-384",
        "clip_pretrained": "webli",
        "size": 384,
        "load_size": 384,
        "semantic_mean": (0.5, 0.5, 0.5),
        "semantic_std": (0.5, 0.5, 0.5),
        "artifact_mean": (0.0, 0.0, 0.0),
        "artifact_std": (1.0, 1.0, 1.0),
        "fusion_weight_init": 0.5,
        "fusion_bias_floor": 2.0,
    },
    "progan": {
        "clip": "openai/clip-vit-large-patch14",
        "clip_pretrained": None,
        "size": 224,
        "load_size": 256,
        "semantic_mean": OPENAI_CLIP_MEAN,
        "semantic_std": OPENAI_CLIP_STD,
        "artifact_mean": IMAGENET_MEAN,
        "artifact_std": IMAGENET_STD,
        "fusion_weight_init": 0.0,
        "fusion_bias_floor": 0.0,
    },
}


def cospy_state_dict(part: str, release: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One of the authors' files -> our keys (documented mapping).

    semantic: `fc.*` -> `semantic_head.*`. artifact: `fc.*` -> `artifact_head.*`,
    `artifact_encoder.{conv1,bn1,layer1,layer2}.*` -> `artifact.trunk.{0,1,4,5}.*`; the VAE copy
    (`artifact_encoder.vae.*`, the frozen SD v1.4 VAE) and the unused `artifact_encoder.fc1.*`
    are dropped. fusion: `fc.*` -> `fusion.*`.
    """
    if part not in RELEASE_FILES:
        raise ValueError(f"part must be one of {sorted(RELEASE_FILES)}, got {part!r}")
    head = {"semantic": "semantic_head.", "artifact": "artifact_head.", "fusion": "fusion."}[part]
    ours: dict[str, torch.Tensor] = {}
    for key, value in release.items():
        if key.startswith("fc."):
            ours[head + key[3:]] = value
        elif part == "artifact" and key.startswith("artifact_encoder."):
            rest = key[len("artifact_encoder.") :]
            for theirs, mine in TRUNK_NAMES.items():
                if rest.startswith(theirs):
                    ours["artifact.trunk." + mine + rest[len(theirs) :]] = value
    return ours


def _branch_state(part: str, path: str) -> dict[str, torch.Tensor]:
    """A branch's weights from the authors' `.pth` or from one of our stage checkpoints (`.ckpt`)."""
    if not os.path.isfile(path):
        raise MissingWeightsError(f"CO-SPY {part} weights {path!r} do not exist")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state.get("state_dict"), Mapping):  # a Lightning checkpoint of ours
        prefixes = {
            "semantic": ("net.semantic_head.",),
            "artifact": ("net.artifact_head.", "net.artifact."),
            "fusion": ("net.fusion.",),
        }[part]
        return {k[4:]: v for k, v in state["state_dict"].items() if k.startswith(prefixes)}
    return cospy_state_dict(part, state)


class ArtifactBranch(nn.Module):
    """The residual (VAE reconstruction or NPR) -> truncated ResNet-50 -> average pool."""

    def __init__(
        self,
        variant: str,
        vae: str | Mapping[str, Any] | None,
        width: int,
        layers: Sequence[int],
        block: str,
        artifact_size: int,
        cache_dir: str | None,
    ) -> None:
        super().__init__()
        self.variant, self.artifact_size = variant, artifact_size
        self.reconstruction = VAEReconstruction(vae, cache_dir) if variant == "sd-v1.4" else None
        self.trunk, self.out_dim = truncated_resnet(3, width, layers, block)
        self.pool = nn.AdaptiveAvgPool2d(1)
        for module in self.trunk.modules():  # the authors' initialization
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def resize(self, image: torch.Tensor) -> torch.Tensor:
        """torchvision `Resize(artifact_size, antialias=False)`: the short side to `artifact_size`."""
        height, width = image.shape[-2:]
        short, long = min(height, width), max(height, width)
        if short == self.artifact_size:
            return image
        long = int(self.artifact_size * long / short)
        size = (self.artifact_size, long) if height <= width else (long, self.artifact_size)
        return F.interpolate(image, size=size, mode="bilinear", align_corners=False)

    def residual(self, image: torch.Tensor) -> torch.Tensor:
        if self.reconstruction is None:
            return neighboring_pixel_residual(image) * (2.0 / 3.0)
        image = self.resize(image)
        return (image - self.reconstruction(image)) / 7.0 * 100.0

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.pool(self.trunk(self.residual(image))).flatten(1)


class SemanticBranch(nn.Module):
    """A frozen CLIP image feature: open_clip `encode_image` or Hugging Face `get_image_features`."""

    def __init__(
        self, variant: str, clip: str | Mapping[str, Any], clip_pretrained: str | None, cache_dir: str | None
    ) -> None:
        super().__init__()
        if variant == "sd-v1.4":
            self.encoder = ClipImageEncoder(clip, clip_pretrained, "frozen", cache_dir=cache_dir)
            self.out_dim, self.image_size = self.encoder.embed_dim, None
        else:
            self.encoder = load_hf_clip_vision(clip, projection=True, cache_dir=cache_dir).requires_grad_(False)
            self.out_dim, self.image_size = int(self.encoder.config.projection_dim), int(self.encoder.config.image_size)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if self.image_size is None:
            return self.encoder(image)
        if tuple(image.shape[-2:]) != (self.image_size, self.image_size):
            image = F.interpolate(image, size=(self.image_size,) * 2, mode="bilinear", align_corners=False)
        with torch.no_grad():
            return self.encoder(pixel_values=image).image_embeds


class CoSpy(Detector):
    """CO-SPY fused detector; returns `logit` (the current stage's) and both branch logits.

    `clip`: the semantic tower (an open_clip name or config dict for `sd-v1.4`, a Hugging Face repo
    id, folder or config dict for `progan`; None = the variant's own); `clip_pretrained`: the
    open_clip weights tag or file (`default` = the variant's, `webli`); `vae`: the SD VAE
    (`sd-v1.4` only); `pretrained`: the authors' weights folder; `init_semantic` / `init_artifact`:
    one branch's weights (the authors' file or a stage checkpoint of ours).
    """

    @staticmethod
    def settings_to_train(net: Mapping[str, Any]) -> list[str]:
        """What training this config needs set: the fusion stage (the default) trains only the fusion
        layer over branches it is given; with neither the authors' weights nor a branch of an earlier
        stage it would fuse two random branches (`experiment=cospy_fusion` needs both)."""
        given = net.get("pretrained") or net.get("init_semantic") or net.get("init_artifact")
        if net.get("stage", "fusion") != "fusion" or given:
            return []
        return ["detector.net.init_semantic", "detector.net.init_artifact"]

    def __init__(
        self,
        variant: str = "sd-v1.4",
        clip: str | Mapping[str, Any] | None = None,
        clip_pretrained: str | None = "default",
        vae: str | Mapping[str, Any] | None = "CompVis/stable-diffusion-v1-4",
        pretrained: str | None = None,
        stage: str = "fusion",
        init_semantic: str | None = None,
        init_artifact: str | None = None,
        artifact_width: int = 64,
        artifact_layers: Sequence[int] = (3, 4),
        artifact_block: str = "bottleneck",
        artifact_size: int = 224,
        mixup_alpha: float = 0.2,
        mixup_fraction: float = 0.5,
        fusion_weight_init: float | None = None,
        fusion_bias_floor: float | None = None,
        cache_dir: str | None = None,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        """Kept in one piece: it checks and wires the published layout's parts, as the authors' code does."""
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        if variant == "sd-v1.4" and not vae:
            raise ValueError("CO-SPY sd-v1.4 needs `vae`: a Stable Diffusion VAE folder, cache id or config dict")
        facts = VARIANT_DEFAULTS[variant]
        config = {
            "size": facts["size"],
            "load_size": facts["load_size"],
            "mode": "resize_crop",
            "interpolation": "bilinear",
            **dict(preprocess.to_dict() if isinstance(preprocess, Preprocess) else preprocess or {}),
        }
        config.update(mean=list(facts["semantic_mean"]), std=list(facts["semantic_std"]))
        super().__init__(config)
        self.variant, self.stage = variant, stage
        self.mixup_alpha, self.mixup_fraction = mixup_alpha, mixup_fraction
        self.fusion_bias_floor = facts["fusion_bias_floor"] if fusion_bias_floor is None else fusion_bias_floor
        self.register_buffer("artifact_mean", torch.tensor(facts["artifact_mean"]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("artifact_std", torch.tensor(facts["artifact_std"]).view(1, 3, 1, 1), persistent=False)
        clip_pretrained = facts["clip_pretrained"] if clip_pretrained == "default" else clip_pretrained
        self.semantic = SemanticBranch(variant, clip or facts["clip"], clip_pretrained, cache_dir)
        self.artifact = ArtifactBranch(
            variant, vae, artifact_width, artifact_layers, artifact_block, artifact_size, cache_dir
        )
        self.semantic_head = nn.Linear(self.semantic.out_dim, 1)
        self.artifact_head = nn.Linear(self.artifact.out_dim, 1)
        self.fusion = nn.Linear(2, 1)
        for head in (self.semantic_head, self.artifact_head, self.fusion):  # the authors' initialization
            nn.init.normal_(head.weight, 0.0, 0.02)
        with torch.no_grad():
            self.fusion.weight += facts["fusion_weight_init"] if fusion_weight_init is None else fusion_weight_init
            self.fusion.bias.fill_(self.fusion_bias_floor)
        if not weights_deferred():  # a toolkit checkpoint being loaded brings every weight itself
            for part, path in (("semantic", init_semantic), ("artifact", init_artifact)):
                if path:
                    self.load_branch(part, path)
            if pretrained:
                self.load_release(pretrained)
        self._freeze_for_stage()

    def train(self, mode: bool = True) -> "CoSpy":
        """Branches this stage does not train stay in eval mode, so their batch-norm statistics
        do not drift while the fusion layer (or the other branch) trains."""
        super().train(mode)
        if self.stage != "artifact":
            self.artifact.eval()
        return self

    def _freeze_for_stage(self) -> None:
        """Only the stage's own parameters train (the CLIP tower and the VAE never do)."""
        self.requires_grad_(False)
        trained = {
            "semantic": [self.semantic_head],
            "artifact": [self.artifact.trunk, self.artifact_head],
            "fusion": [self.fusion],
        }[self.stage]
        for module in trained:
            module.requires_grad_(True)

    def load_branch(self, part: str, path: str) -> None:
        state = _branch_state(part, path)
        if not state:
            raise ValueError(f"{path}: no CO-SPY {part} weights in this file")
        missing, unexpected = self.load_state_dict(state, strict=False)
        expected = {
            k
            for k in self.state_dict()
            if k.startswith(
                tuple(
                    {
                        "semantic": ["semantic_head."],
                        "artifact": ["artifact_head.", "artifact.trunk."],
                        "fusion": ["fusion."],
                    }[part]
                )
            )
        }
        lacking = sorted(expected - set(state))
        if unexpected or lacking:
            raise ValueError(
                f"{path}: {part} weights do not fit CO-SPY {self.variant}: "
                f"unexpected {unexpected[:5]}, missing {lacking[:5]}"
            )
        log.info("CO-SPY %s: %s weights loaded from %s (%d tensors)", self.variant, part, path, len(state))

    def load_release(self, folder: str) -> None:
        """The authors' folder of `{semantic,artifact,fusion}_weights.pth` (weights only)."""
        if not os.path.isdir(folder):
            raise MissingWeightsError(
                f"CO-SPY weights folder {folder!r} does not exist (expected {', '.join(RELEASE_FILES.values())} in it)"
            )
        for part, name in RELEASE_FILES.items():
            self.load_branch(part, os.path.join(folder, name))

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        if self.stage != "artifact":
            features = self.semantic(self.normalize(image))
            out["logit_semantic"] = self.semantic_head(features).squeeze(1)
            if self.training and self.stage == "semantic":
                out["features_semantic"] = features
        if self.stage != "semantic":
            artifact = self.artifact((image - self.artifact_mean) / self.artifact_std)
            out["logit_artifact"] = self.artifact_head(artifact).squeeze(1)
        if self.stage == "fusion":
            fused = torch.stack([out["logit_semantic"], out["logit_artifact"]], dim=1)
            out["logit"] = self.fusion(fused).squeeze(1)
        else:
            out["logit"] = out[f"logit_{self.stage}"]
        return out

    def loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """BCE of the stage's logit; the semantic stage mixes features, the fusion stage adds the
        hinge that keeps the fusion bias above its floor (the authors' guard against over-rejection)."""
        label = batch["label"].float()
        if self.stage == "semantic" and "features_semantic" in outputs and self.mixup_fraction > 0:
            features, label = self.mix_features(outputs["features_semantic"], label)
            return F.binary_cross_entropy_with_logits(self.semantic_head(features).squeeze(1), label)
        loss = F.binary_cross_entropy_with_logits(outputs["logit"], label)
        if self.stage == "fusion" and self.training:
            loss = loss + F.relu(self.fusion_bias_floor - self.fusion.bias[0])
        return loss

    def mix_features(self, features: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each sample, with probability `mixup_fraction`, becomes delta * itself + (1 - delta) * a
        random partner (features and labels alike), delta ~ Beta(alpha, alpha)."""
        mixed = torch.rand(len(features), device=features.device) < self.mixup_fraction
        partner = torch.randint(0, len(features), (len(features),), device=features.device)
        delta = torch.distributions.Beta(self.mixup_alpha, self.mixup_alpha).sample((len(features),)).to(features)
        delta = torch.where(mixed, delta, torch.ones_like(delta))
        features = delta[:, None] * features + (1 - delta[:, None]) * features[partner]
        return features, delta * label + (1 - delta) * label[partner]
