"""MVSS-Net (Chen et al., ICCV 2021): multi-view (RGB + noise), multi-scale (pixel, edge, image)
supervised manipulation localizer, and the loader of the authors' released checkpoints.

Layout (as in the authors' public inference code, `dong03/MVSS-Net`, models/mvssnet.py):
- RGB stream: a ResNet (ResNet-50 by default, any timm ResNet-like model with four stages) with
  output stride 16; layer4's 3x3 convolutions use the authors' multi-grid dilations 1, 2, 4.
- Edge branch: every stage's features go through a `SobelGate` and an edge-residual block down to
  one channel; the four are merged coarse-to-fine at 1/4 scale (up-sampled 2x / 4x, each merge
  another edge-residual block, the last without ReLU) into edge logits.
- Noise stream: luma -> `BayarConv2d` (5x5, 3 outputs) -> a second ResNet.
- The two stage-4 maps are concatenated -> dual attention head (dropout 0.1, 1x1 conv) -> mask
  logits at 1/16, up-sampled to the input (bilinear, corners aligned, as the authors do).
- Image score: global max of the mask logits. Loss: 0.16 Dice(mask) + 0.04 BCE(image label, max
  logit) + 0.80 Dice(edge), the weighting IMDL-BenCo uses (the authors did not release training).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.blocks.dual_attention import DualAttentionHead
from detectors.blocks.forensic_filters import SOBEL_X, BayarConv2d, SobelGate, luminance
from detectors.blocks.weights import MissingWeightsError, load_timm_encoder, weights_deferred
from detectors.localizer import Localizer

log = logging.getLogger(__name__)

MVSS_LOSS_WEIGHTS = {"mask_dice": 0.16, "mask_bce": 0.0, "edge_dice": 0.80, "image_bce": 0.04}
CHANNEL_ORDERS = ("rgb", "bgr")
IMAGENET_NAMES = (True, "imagenet", "true", "True")


class EdgeResidualBlock(nn.Module):
    """1x1 conv to `out_channels`, then x + conv3x3(relu(bn(conv3x3(x)))), optionally ReLU'd."""

    def __init__(self, in_channels: int, out_channels: int = 1) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(in_channels, out_channels, 1)
        self.residual = nn.Sequential(
            nn.Conv2d(out_channels, out_channels, 3, padding=1),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
            nn.Conv2d(out_channels, out_channels, 3, padding=1),
        )

    def forward(self, features: torch.Tensor, activate: bool = True) -> torch.Tensor:
        reduced = self.reduce(features)
        merged = reduced + self.residual(reduced)
        return F.relu(merged) if activate else merged


def set_block_dilations(stage: nn.Module, dilations: Sequence[int]) -> None:
    """Give the 3x3 `conv2` of each block of a ResNet stage its own dilation (multi-grid)."""
    blocks = list(stage.children())
    if len(blocks) != len(dilations):
        raise ValueError(
            f"layer4_dilations has {len(dilations)} entries but the backbone's layer4 has {len(blocks)} blocks"
        )
    for block, rate in zip(blocks, dilations):
        conv = getattr(block, "conv2", None)
        if not isinstance(conv, nn.Conv2d) or conv.kernel_size != (3, 3):
            raise ValueError("layer4_dilations needs ResNet blocks with a 3x3 conv2; set it to null for this backbone")
        conv.dilation, conv.padding = (int(rate), int(rate)), (int(rate), int(rate))


class MVSSNet(Localizer):
    """MVSS-Net manipulation localizer; see the module docstring for the layout.

    `pretrained`: null (random initialization, logged), `imagenet` (timm's ImageNet weights for
    both streams from the local cache, one clear error when missing) or a file path: the authors'
    released MVSS-Net checkpoint (`mvssnet_casia.pt`, mapped by `map_authors_state_dict`), a state
    dict of this class (or a training checkpoint holding one), or an ImageNet ResNet state dict
    (loaded into both streams). `channel_order: bgr` reproduces the authors' checkpoints, which were
    trained on OpenCV's BGR images normalized with the RGB ImageNet statistics in that order.
    `backbone_kwargs` go to `timm.create_model` (e.g. `channels` and `layers` for a tiny variant).
    """

    def __init__(
        self,
        backbone: str = "resnet50",
        pretrained: str | bool | None = None,
        backbone_kwargs: Mapping[str, Any] | None = None,
        layer4_dilations: Sequence[int] | None = (1, 2, 4),
        head_channels: int | None = None,
        dropout: float = 0.1,
        channel_order: str = "rgb",
        preprocess: Preprocess | Mapping[str, Any] | None = None,
        image_score: str = "max",
        loss_weights: Mapping[str, float] | None = None,
        topk_fraction: float = 0.01,
        evidence: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> None:
        super().__init__(
            preprocess or {"size": 512, "mode": "center_crop"},
            image_score,
            {**MVSS_LOSS_WEIGHTS, **(loss_weights or {})},
            topk_fraction,
            evidence,
        )
        if channel_order not in CHANNEL_ORDERS:
            raise ValueError(f"channel_order must be one of {CHANNEL_ORDERS}, got {channel_order!r}")
        self.channel_order = channel_order
        imagenet = pretrained in IMAGENET_NAMES
        self.rgb_backbone = self._backbone(backbone, imagenet, backbone_kwargs, layer4_dilations)
        self.noise_backbone = self._backbone(backbone, imagenet, backbone_kwargs, layer4_dilations)
        channels = self.rgb_backbone.feature_info.channels()
        self.stride = max(self.rgb_backbone.feature_info.reduction())
        self.bayar = BayarConv2d(1, 3, 5)
        self.edge_gates = nn.ModuleList(SobelGate() for _ in channels)
        self.edge_stage_blocks = nn.ModuleList(EdgeResidualBlock(c, 1) for c in channels)
        self.edge_merge_blocks = nn.ModuleList(EdgeResidualBlock(1, 1) for _ in channels[1:])
        self.head = DualAttentionHead(2 * channels[-1], 1, head_channels, dropout)
        if not pretrained:
            log.warning("mvss: random initialization (pretrained: null)")
        elif not imagenet:
            self.load_pretrained_file(str(pretrained))

    @staticmethod
    def _backbone(
        name: str, imagenet: bool, kwargs: Mapping[str, Any] | None, dilations: Sequence[int] | None
    ) -> nn.Module:
        options = {"features_only": True, "out_indices": (1, 2, 3, 4), "output_stride": 16, **(kwargs or {})}
        if imagenet:
            model = load_timm_encoder(name, True, **options)
        else:
            import timm

            model = timm.create_model(name, pretrained=False, **options)
        if dilations:
            set_block_dilations(model.layer4, dilations)
        return model

    def load_pretrained_file(self, path: str) -> None:
        """Load an MVSS-Net checkpoint (the authors' or ours) or ImageNet ResNet weights from `path`."""
        if weights_deferred():
            log.info("mvss: %s not read, weights come from the checkpoint", path)
            return
        state = read_state_dict(path)
        if "head.conv_p1.0.weight" in state:
            kind, state = "the authors' MVSS-Net checkpoint", map_authors_state_dict(state)
        elif "head.position_in.0.weight" in state:
            kind = "an MVSS-Net state dict of this toolkit"
        elif "conv1.weight" in state and any(k.startswith("layer4.") for k in state):
            kind = "ImageNet ResNet weights (both streams)"
            backbone = {k: v for k, v in state.items() if not k.startswith("fc.")}
            state = {
                **{f"rgb_backbone.{k}": v for k, v in backbone.items()},
                **{f"noise_backbone.{k}": v for k, v in backbone.items()},
            }
            state = {**{k: v for k, v in self.state_dict().items() if k not in state}, **state}
        else:
            raise ValueError(
                f"{path} is neither an MVSS-Net checkpoint (the authors' or this toolkit's) nor "
                f"ResNet ImageNet weights; first keys: {list(state)[:5]}"
            )
        try:
            self.load_state_dict(state, strict=True)
        except RuntimeError as error:
            raise ValueError(
                f"{path} ({kind}) does not fit this MVSS-Net configuration (backbone, head_channels): {error}"
            ) from error
        log.info("mvss: loaded %s from %s", kind, path)

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        """Mask and edge logits up-sampled to the input's size (a multiple of `stride`)."""
        coarse = self.coarse_logits(image)
        size = image.shape[-2:]
        return {
            f"{name}_logit": F.interpolate(coarse[name], size=size, mode="bilinear", align_corners=True)
            for name in ("mask", "edge")
        }

    def coarse_logits(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        """The network at its own resolutions: `mask` at 1/16, `edge` at 1/4 (the authors' outputs)."""
        normalized = self.normalize(image[:, [2, 1, 0]] if self.channel_order == "bgr" else image)
        features = self.rgb_backbone(normalized)
        edge = self.edge_logits(features)
        noise = self.bayar(luminance(normalized, self.channel_order))
        fused = torch.cat([features[-1], self.noise_backbone(noise)[-1]], dim=1)
        return {"mask": self.head(fused), "edge": edge}

    def edge_logits(self, features: Sequence[torch.Tensor]) -> torch.Tensor:
        """Sobel-gated stage features merged coarse-to-fine at the first stage's scale."""
        gated = [gate(stage) for gate, stage in zip(self.edge_gates, features)]
        edge = self.edge_stage_blocks[0](gated[0])
        last = len(self.edge_merge_blocks) - 1
        for index, (side_block, merge_block) in enumerate(zip(self.edge_stage_blocks[1:], self.edge_merge_blocks)):
            side = F.interpolate(
                side_block(gated[index + 1]), size=edge.shape[-2:], mode="bilinear", align_corners=True
            )
            edge = merge_block(edge + side, activate=index < last)
        return edge


def read_state_dict(path: str) -> dict[str, torch.Tensor]:
    """Tensors of a weights file (`weights_only`: no code from the file runs), with the usual
    wrappers removed: a training checkpoint's `state_dict`, `net.` and DataParallel's `module.`."""
    if not os.path.isfile(path):
        raise MissingWeightsError(
            f"MVSS-Net weights file {path!r} does not exist (nothing is downloaded); "
            "see docs/guides/localizers.md (MVSS-Net) for where the published checkpoints are"
        )
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        state = load_file(path, device="cpu")
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # unpickling errors have no common base class
            raise ValueError(f"cannot read {path} as a weights file (read with weights_only=True): {error}") from error
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path} does not hold a state dict of tensors")
    for prefix in ("module.", "net."):
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return dict(state)


# The authors' key names (models/mvssnet.py, `get_mvss(sobel=True, constrain=True)`) -> ours.
# Each rule rewrites a key's prefix; `None` drops the key. Order matters: the first match wins.
_ERB_PARTS = {"conv1": "reduce", "conv2": "residual.0", "bn": "residual.1", "conv3": "residual.3"}
_HEAD_PARTS = {
    "conv_p1": "position_in",
    "conv_c1": "channel_in",
    "conv_p2": "position_out",
    "conv_c2": "channel_out",
    "pam.conv_b": "position.query",
    "pam.conv_c": "position.key",
    "pam.conv_d": "position.value",
    "pam.alpha": "position.gamma",
    "cam.beta": "channel.gamma",
    "out": "classifier",
}
AUTHORS_KEY_RULES: tuple[tuple[str, str | Callable[[re.Match], str] | None], ...] = (
    (r"^(noise_extractor\.)?model\.fc\.", None),  # ImageNet classifier of each ResNet, never used
    (r"^sobel_[xy][1-4]\.0\.weight$", None),  # the fixed Sobel filters: checked, they are our buffers
    (r"^head\.conv_[pc]3\.", None),  # auxiliary heads (aux=True only), not part of the output
    (r"^noise_extractor\.model\.", "noise_backbone."),
    (r"^model\.", "rgb_backbone."),
    (r"^constrain_conv\.kernel$", "bayar.kernel"),
    (r"^sobel_([xy])([1-4])\.1\.", lambda m: f"edge_gates.{int(m[2]) - 1}.bn_{m[1]}."),
    (r"^erb_db_([1-4])\.(conv1|conv2|bn|conv3)\.", lambda m: f"edge_stage_blocks.{int(m[1]) - 1}.{_ERB_PARTS[m[2]]}."),
    (
        r"^erb_trans_([1-3])\.(conv1|conv2|bn|conv3)\.",
        lambda m: f"edge_merge_blocks.{int(m[1]) - 1}.{_ERB_PARTS[m[2]]}.",
    ),
    (r"^head\.(conv_[pc][12]|pam\.conv_[bcd]|out)\.", lambda m: f"head.{_HEAD_PARTS[m[1]]}."),
    (r"^head\.(pam\.alpha|cam\.beta)$", lambda m: f"head.{_HEAD_PARTS[m[1]]}"),
)


def authors_key_to_ours(key: str) -> str | None:
    """Our name for one of the authors' state-dict keys; None when the key is dropped."""
    for pattern, replacement in AUTHORS_KEY_RULES:
        if re.match(pattern, key):
            return None if replacement is None else re.sub(pattern, replacement, key, count=1)
    raise ValueError(
        f"unknown key in the MVSS-Net checkpoint: {key!r} (is it an MVSS-Net with sobel and constrain enabled?)"
    )


def map_authors_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The authors' MVSS-Net state dict -> a state dict of `MVSSNet` (ResNet-50, default head).

    Besides renaming: the Bayar kernel, stored (in, out, 24) and raw-reshaped to (out, in, 5, 5) by
    the authors, becomes our (out, in, 24) by the same raw reshape; the fixed Sobel filters are
    checked (an edited filter would change the network, so it is refused) and dropped.
    """
    mapped: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        ours = authors_key_to_ours(key)
        if ours is None:
            if key.startswith("sobel_"):
                _check_sobel(key, value)
            continue
        if ours == "bayar.kernel":
            value = value.reshape(value.shape[1], value.shape[0], value.shape[2])
        mapped[ours] = value
    return mapped


def _check_sobel(key: str, weight: torch.Tensor) -> None:
    sobel_x = torch.tensor(SOBEL_X, dtype=weight.dtype)
    expected = (sobel_x if key.startswith("sobel_x") else sobel_x.t()).expand_as(weight)
    if not torch.allclose(weight, expected):
        raise ValueError(f"{key} is not the fixed Sobel filter this network uses; refusing to load it")
