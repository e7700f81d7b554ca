"""IAPL (Li et al., CVPR 2026): image-adaptive prompt learning on a frozen CLIP ViT.

Two learnable context tokens are appended after the patch tokens; blocks 1 .. prompt_depth-1 replace
them with their own deep prompts plus a gated carry-over of the previous block's context outputs
(gates start at 1e-6); bottleneck adapters (width -> 64 -> width, x0.1) run next to the MLP of a few
blocks. A DCT condition module makes the context image-specific: it picks the 32 x 32 window with
the most high-frequency DCT energy, filters it with 30 SRM high-pass kernels and turns it into two
gated biases on the context (plus an auxiliary real/fake head). The projected CLS feeds a linear
head; both heads train with label-smoothed BCE. Test-time adaptation of the context (the authors'
evaluation) lives in `inference.tta` and needs the PyTorch runtime.

Released checkpoints (`pretrained: /path/checkpoint.pth`, their `model` entry) load through
`authors_key_map`; they carry the whole image tower, so `clip_pretrained` may be null.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.base import Detector
from detectors.blocks.clip import clip_preprocess, load_clip_visual
from detectors.blocks.clip_tower import (
    check_plain_vit,
    exportable_attention,
    freeze,
    patch_tokens,
    project_cls,
    resize_to_tower,
    run_block,
)
from detectors.blocks.released import load_mapped, map_state_dict, read_state_dict, regex_key_map
from detectors.blocks.weights import weights_deferred

log = logging.getLogger(__name__)


def srm_kernels() -> torch.Tensor:
    """The 30 SRM high-pass residual kernels (Fridrich & Kodovsky 2012), 5 x 5, in the order IAPL
    stacks them: 8 first-order, 4 second-order, 8 third-order, 4 + 4 edge (3 x 3, 5 x 5), 2 squares;
    each class divided by its centre weight, as in the normalized SRM bank."""
    around = [(r, c) for r in range(3) for c in range(3) if (r, c) != (1, 1)]
    clockwise = [(-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1)]
    square3 = np.array([[-1, 2, -1], [2, -4, 2], [-1, 2, -1]], dtype=np.float32)
    square5 = np.array(
        [[-1, 2, -2, 2, -1], [2, -6, 8, -6, 2], [-2, 8, -12, 8, -2], [2, -6, 8, -6, 2], [-1, 2, -2, 2, -1]],
        dtype=np.float32,
    )
    kernels = []
    for r, c in around:  # first order: neighbour minus centre
        k = np.zeros((5, 5), np.float32)
        k[2, 2], k[r + 1, c + 1] = -1, 1
        kernels.append(k)
    for r, c in around[:4]:  # second order: both opposite neighbours, halved
        k = np.zeros((5, 5), np.float32)
        k[2, 2], k[r + 1, c + 1], k[3 - r, 3 - c] = -1, 0.5, 0.5
        kernels.append(k)
    for dr, dc in clockwise:  # third order along each direction: (-1, 3, -3, 1) / 3
        k = np.zeros((5, 5), np.float32)
        for step, value in zip((2, 1, 0, -1), (-1, 3, -3, 1)):
            k[2 + dr * step, 2 + dc * step] = value / 3
        kernels.append(k)
    edges3 = [square3 * mask for mask in _half_masks(3)]
    edges5 = [square5 * mask for mask in _half_masks(5)]
    kernels += [np.pad(k / 4, 1) for k in edges3] + [k / 12 for k in edges5]
    kernels += [np.pad(square3 / 4, 1), square5 / 12]
    return torch.from_numpy(np.stack(kernels))


def _half_masks(size: int) -> list[np.ndarray]:
    """Keep the top, right, bottom, left half (centre line included) of a square kernel."""
    keep = size // 2 + 1
    top = np.zeros((size, size), np.float32)
    top[:keep] = 1
    return [top, np.rot90(top, -1), np.rot90(top, 2), np.rot90(top, 1)]


def dct_matrix(size: int) -> torch.Tensor:
    """Orthonormal DCT-II basis: row k is frequency k."""
    n = torch.arange(size, dtype=torch.float64)
    basis = torch.cos((n[None, :] + 0.5) * math.pi * n[:, None] / size) * math.sqrt(2.0 / size)
    basis[0] /= math.sqrt(2.0)
    return basis.float()


def band_masks(size: int, bands: int) -> torch.Tensor:
    """`bands` anti-diagonal frequency bands (i + j within [k, k+1] * 2 size / bands, ends included),
    each divided by its number of coefficients so bands weigh by mean energy."""
    total = torch.arange(size)[:, None] + torch.arange(size)[None, :]
    width = 2.0 * size / bands
    masks = torch.stack([((total >= width * k) & (total <= width * (k + 1))).float() for k in range(bands)])
    return masks / masks.sum(dim=(1, 2), keepdim=True)


class ResidualConvBlock(nn.Module):
    """3x3 conv-BN-ReLU, 3x3 conv-BN, plus a 1x1 conv-BN shortcut, then ReLU."""

    def __init__(self, channels_in: int, channels_out: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels_in, channels_out, 3, padding=1), nn.BatchNorm2d(channels_out)
        self.conv2, self.bn2 = nn.Conv2d(channels_out, channels_out, 3, padding=1), nn.BatchNorm2d(channels_out)
        self.shortcut = nn.Sequential(nn.Conv2d(channels_in, channels_out, 1), nn.BatchNorm2d(channels_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + self.shortcut(x))


class ConditionBranch(nn.Module):
    """Four residual blocks (c, 2c, 4c, 8c channels) with 3x3/2 max-pooling between, global average."""

    def __init__(self, channels_in: int, base: int) -> None:
        super().__init__()
        widths = [channels_in, base, 2 * base, 4 * base, 8 * base]
        self.blocks = nn.ModuleList(ResidualConvBlock(a, b) for a, b in zip(widths[:-1], widths[1:]))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, block in enumerate(self.blocks):
            x = block(F.max_pool2d(x, 3, 2, 1) if index else x)
        return x.mean(dim=(2, 3))


class DctCondition(nn.Module):
    """Image -> two gated context biases (N, 2, width) and an auxiliary logit (N,)."""

    def __init__(self, width: int, window: int = 32, stride: int = 16, bands: int = 6, base: int | None = None) -> None:
        super().__init__()
        base = base or width // 8
        if 8 * base != width:
            raise ValueError(f"the condition branches end with 8 x base channels, which must equal the width {width}")
        self.window, self.stride = window, stride
        self.register_buffer("dct", dct_matrix(window), persistent=False)
        self.register_buffer(
            "band_weights", band_masks(window, bands) * (2.0 ** torch.arange(bands)).view(-1, 1, 1), persistent=False
        )
        self.register_buffer("hpf_weight", srm_kernels().unsqueeze(1).repeat(1, 3, 1, 1))
        self.branch_min, self.branch_max = ConditionBranch(30, base), ConditionBranch(30, base)
        self.gate_min, self.gate_max = (
            nn.Parameter(torch.full((width,), 1e-6)),
            nn.Parameter(torch.full((width,), 1e-6)),
        )
        self.aux_head = nn.Linear(width, 1)

    def richest_window(self, image: torch.Tensor) -> torch.Tensor:
        """The window whose DCT spectrum has the most weighted high-frequency log energy (N, 3, w, w)."""
        n, channels = image.shape[:2]
        windows = image.unfold(2, self.window, self.stride).unfold(3, self.window, self.stride)
        windows = windows.permute(0, 2, 3, 1, 4, 5).reshape(n, -1, channels, self.window, self.window)
        spectrum = torch.log(torch.abs(self.dct @ windows @ self.dct.T) + 1)
        score = torch.einsum("nlcij,bij->nl", spectrum, self.band_weights)
        index = score.argmax(dim=1).view(n, 1, 1, 1, 1).expand(-1, 1, channels, self.window, self.window)
        return torch.gather(windows, 1, index).squeeze(1)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        residual = F.conv2d(self.richest_window(image), self.hpf_weight, padding=2)
        low, high = self.branch_min(residual), self.branch_max(residual)
        bias = torch.stack([low * self.gate_min, high * self.gate_max], dim=1)
        return bias, self.aux_head(high).squeeze(1)


class Adapter(nn.Module):
    """Bottleneck adapter next to a block's MLP: up(ReLU(down(x))) * scale, LoRA-style zero start."""

    def __init__(self, width: int, bottleneck: int = 64, scale: float = 0.1, dropout: float = 0.1) -> None:
        super().__init__()
        self.down, self.up = nn.Linear(width, bottleneck), nn.Linear(bottleneck, width)
        self.scale, self.dropout = scale, nn.Dropout(dropout)
        nn.init.kaiming_uniform_(self.down.weight, a=math.sqrt(5))
        for tensor in (self.down.bias, self.up.weight, self.up.bias):
            nn.init.zeros_(tensor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.dropout(F.relu(self.down(x)))) * self.scale


class IAPL(Detector):
    """Prompted, adapted CLIP ViT -> Linear on the projected CLS; outputs `logit` and, with the
    condition module, `aux_logit` (its auxiliary head, used by the loss only)."""

    def __init__(
        self,
        model: str | Mapping[str, Any] = "ViT-L-14",
        clip_pretrained: str | None = "openai",
        pretrained: str | None = None,
        n_ctx: int = 2,
        prompt_depth: int = 9,
        adapter_layers: Sequence[int] = (3, 7, 11, 15, 19, 23),
        adapter_bottleneck: int = 64,
        gate: bool = True,
        condition: bool = True,
        condition_base: int | None = None,
        label_smoothing: float = 0.1,
        aux_weight: float = 1.0,
        cache_dir: str | None = None,
        quick_gelu: bool = True,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        visual, spec = load_clip_visual(model, clip_pretrained, cache_dir, quick_gelu)
        config = {"mode": "tile", **(preprocess.to_dict() if isinstance(preprocess, Preprocess) else preprocess or {})}
        normalization = {k: config.pop(k) for k in ("mean", "std") if k in config}
        super().__init__({**clip_preprocess(spec, config), **normalization})  # the checkpoints differ in mean/std
        check_plain_vit(visual)
        self.tower, self.image_size = visual, spec.image_size
        width, depth = visual.conv1.out_channels, len(visual.transformer.resblocks)
        if not 1 <= prompt_depth <= depth or any(not 0 <= i < depth for i in adapter_layers):
            raise ValueError(f"prompt_depth and adapter_layers must lie within the tower's {depth} blocks")
        if condition and n_ctx != 2:
            raise ValueError("the condition module biases exactly two context tokens: n_ctx must be 2")
        freeze(self.tower)
        self.n_ctx, self.label_smoothing, self.aux_weight = n_ctx, label_smoothing, aux_weight
        self.context = nn.Parameter(torch.randn(n_ctx, width) * 0.02)
        self.deep_prompts = nn.ParameterList(
            nn.Parameter(torch.randn(n_ctx, width) * 0.02) for _ in range(prompt_depth - 1)
        )
        self.gates = (
            nn.ParameterList(nn.Parameter(torch.full((n_ctx, width), 1e-6)) for _ in range(prompt_depth - 1))
            if gate
            else None
        )
        self.adapters = nn.ModuleDict({str(i): Adapter(width, adapter_bottleneck) for i in adapter_layers})
        self.condition = DctCondition(width, base=condition_base) if condition else None
        self.head = nn.Linear(spec.embed_dim, 1)
        if pretrained and not weights_deferred():
            fmt, raw = read_state_dict(pretrained, ("model",))
            state = raw if fmt == "toolkit" else map_state_dict(raw, authors_key_map())
            kept = load_mapped(self, state, ("tower.",) if clip_pretrained else (), source=str(pretrained))
            log.info("IAPL: loaded %s; kept initial values for %d tensors", pretrained, len(kept))

    def tta_parameters(self) -> list[nn.Parameter]:
        """What test-time adaptation tunes per image: the shared context tokens only."""
        return [self.context]

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        image = resize_to_tower(self.normalize(image), self.image_size)
        context = self.context.unsqueeze(0).expand(image.shape[0], -1, -1)
        outputs: dict[str, torch.Tensor] = {}
        if self.condition is not None:
            bias, outputs["aux_logit"] = self.condition(image)
            context = context + bias
        tokens = patch_tokens(self.tower, image)
        tokens = self.tower.ln_pre(torch.cat([tokens, context.to(tokens.dtype)], dim=1))
        with exportable_attention():
            for index, block in enumerate(self.tower.transformer.resblocks):
                if 1 <= index <= len(self.deep_prompts):
                    tokens = self._swap_prompts(tokens, index - 1)
                tokens = run_block(
                    block, tokens, parallel=self.adapters[str(index)] if str(index) in self.adapters else None
                )
        outputs["logit"] = self.head(project_cls(self.tower, tokens)).squeeze(1)
        return outputs

    def _swap_prompts(self, tokens: torch.Tensor, layer: int) -> torch.Tensor:
        """Replace the context outputs of the previous block by this block's prompts, plus a gated
        share of those outputs when gates are on."""
        prompts = self.deep_prompts[layer].unsqueeze(0).to(tokens.dtype)
        previous = tokens[:, -self.n_ctx :]
        carried = prompts + self.gates[layer] * previous if self.gates is not None else prompts.expand_as(previous)
        return torch.cat([tokens[:, : -self.n_ctx], carried], dim=1)

    def loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """Label-smoothed BCE (targets pulled towards 0.5 by `label_smoothing`) on the main head,
        plus `aux_weight` times the same on the condition module's head."""
        target = batch["label"].float() * (1 - self.label_smoothing) + 0.5 * self.label_smoothing
        loss = F.binary_cross_entropy_with_logits(outputs["logit"], target)
        if "aux_logit" in outputs:
            loss = loss + self.aux_weight * F.binary_cross_entropy_with_logits(outputs["aux_logit"], target)
        return loss


BRANCH_PARTS = {
    "conv": "conv1",
    "bn": "bn1",
    "conv2": "conv2",
    "bn2": "bn2",
    "conv1x1.0": "shortcut.0",
    "conv1x1.1": "shortcut.1",
}
BRANCH_STAGES = {"conv00": 0, "conv20": 1, "conv40": 2, "conv60": 3}


def _branch_key(match: re.Match) -> str:
    side, stage, part, rest = match.groups()
    return f"condition.branch_{side}.blocks.{BRANCH_STAGES[stage]}.{BRANCH_PARTS[part]}.{rest}"


def authors_key_map():
    """The authors' `model` keys (their `CLIPModel.state_dict()`) -> ours.

    prompt_learner.ctx -> context; prompt_learner.compound_prompts_vision.k -> deep_prompts.k;
    image_encoder.transformer.resblocks.i.gamma -> gates.(i-1); ...resblocks.i.adapter.{down,up}_proj
    -> adapters.i.{down,up}; image_encoder.* -> tower.*; conditional_ctx.model_{min,max}.conv{00,20,
    40,60}.{conv,bn,conv2,bn2,conv1x1.0,conv1x1.1} -> condition.branch_{min,max}.blocks.{0-3}.{conv1,
    bn1,conv2,bn2,shortcut.0,shortcut.1}; gamma / gamma_2 / sup / hpf.hpf.weight -> condition.
    gate_min / gate_max / aux_head / hpf_weight; fc_binary -> head. Dropped: the module's fixed DCT
    matrices and band filters (never trained; `DctCondition` computes the same constants).
    """
    return regex_key_map(
        [
            (r"prompt_learner\.ctx", "context"),
            (r"prompt_learner\.compound_prompts_vision\.(\d+)", r"deep_prompts.\1"),
            (r"image_encoder\.transformer\.resblocks\.(\d+)\.gamma", lambda m: f"gates.{int(m.group(1)) - 1}"),
            (
                r"image_encoder\.transformer\.resblocks\.(\d+)\.adapter\.(down|up)_proj\.(weight|bias)",
                r"adapters.\1.\2.\3",
            ),
            (r"image_encoder\.(.*)", r"tower.\1"),
            (
                r"conditional_ctx\.model_(min|max)\.(conv\d0)\.(conv|bn|conv2|bn2|conv1x1\.0|conv1x1\.1)\.(.*)",
                _branch_key,
            ),
            (r"conditional_ctx\.gamma", "condition.gate_min"),
            (r"conditional_ctx\.gamma_2", "condition.gate_max"),
            (r"conditional_ctx\.sup\.(weight|bias)", r"condition.aux_head.\1"),
            (r"conditional_ctx\.hpf\.hpf\.weight", "condition.hpf_weight"),
            (r"conditional_ctx\.(_DCT_patch|_DCT_patch_T|level_filters\..*|grade_filters\..*)", None),
            (r"fc_binary\.(weight|bias)", r"head.\1"),
        ]
    )
