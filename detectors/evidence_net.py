"""`evidence`: a small fully convolutional network over RGB, a noise residual and the training-free maps.

The training-free localizers rank manipulated pixels well from the first image (pixel AUROC around
0.8 for noise level and Splicebuster; copy-move self-matching finds duplicated regions), while a
learned localizer trained a few CPU minutes ranks them at chance. This localizer takes those maps
as input channels beside the image and its high-pass residual, so the learning is reduced to
deciding, per pixel and from its neighbourhood, which evidence to trust and how to cut it: a
problem a U-Net of about 0.1 M parameters learns in minutes on a CPU. It takes each image whole (the maps
need the whole image to know its dominant noise level and its repeated regions), and the maps are
computed once per image and kept (`detectors.evidence.EvidenceMaps`), so training epochs after the
first cost only the network.

Export: the maps of Splicebuster and copy-move self-matching are fitted or matched per image (not a
fixed graph), so a model using them refuses ONNX export with their reason; with only `noise_level`
and `jpeg_ghost` the whole model is torch and exports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.evidence import DEFAULT_CACHE_MB, EvidenceMaps
from detectors.localizer import Localizer, pad_to_multiple
from imageops import IMMERKAER_KERNEL, LUMA

DEFAULT_EVIDENCE = {"noise_level": {}, "jpeg_ghost": {}, "copy_move_selfmatch": {}}
EVIDENCE_INPUT_SCALE = 0.25  # clamped logits in [-10, 10] -> about the range of the normalized RGB
RESIDUAL_INPUT_SCALE = 1.0 / 16.0  # an 8-bit residual of a few grey levels -> order one


def conv_block(in_channels: int, out_channels: int, dilation: int = 1) -> nn.Sequential:
    """Two 3 x 3 convolutions with ReLU; the second dilated to widen the view at no cost."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(out_channels, out_channels, 3, padding=dilation, dilation=dilation),
        nn.ReLU(inplace=True),
    )


class EvidenceLocalizer(Localizer):
    """U-Net over [normalized RGB, noise residual, K evidence maps] -> manipulation logits.

    `evidence`: name -> options of each training-free map (`detectors.evidence.EVIDENCE_DETECTORS`).
    `width`: channels at full resolution (doubled per level); `depth`: down-sampling levels (the
    network pads its input to a multiple of 2 ** (depth + 1) internally, after the maps are computed on the
    image as given). `residual`: add the luma's high-pass residual as a channel. `prior_bias`: the
    initial map is the sum of the evidence logits plus this (6: with the three default maps, whose
    logits on unremarkable pixels are about -3, -3 and -6, a pixel where one map fires by about 3
    or more starts above 0.5). `cache_mb`: memory
    for the per-image maps (0: recompute every time). `global_context`: the decoder also sees the
    image-wide mean of the bottleneck features, so a region's noise, residual and map values can be
    read against the image's own level (a splice's side is told by which region departs from the
    rest, which a window of the image cannot see). No normalization layers: a map that is low
    everywhere must stay low, which per-image normalization would undo.
    """

    def __init__(
        self,
        evidence: Mapping[str, Mapping[str, Any] | None] | None = None,
        width: int = 16,
        depth: int = 3,
        residual: bool = True,
        prior_bias: float = 6.0,
        cache_mb: float = DEFAULT_CACHE_MB,
        global_context: bool = False,
        image_score: str = "topk_mean",
        topk_fraction: float = 0.01,
        loss_weights: Mapping[str, float] | None = None,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            preprocess or {"size": None, "mode": "none"},
            image_score=image_score,
            loss_weights=loss_weights,
            topk_fraction=topk_fraction,
        )
        if width < 1 or depth < 1:
            raise ValueError(f"evidence width and depth must be >= 1, got width {width}, depth {depth}")
        self.maps = EvidenceMaps(DEFAULT_EVIDENCE if evidence is None else evidence, cache_mb)
        if self.maps.onnx_export_refusal:
            self.onnx_export_refusal = self.maps.onnx_export_refusal
        self.residual, self.depth, self.global_context = bool(residual), int(depth), bool(global_context)
        self.register_buffer("luma", torch.tensor(LUMA).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("high_pass", torch.tensor(IMMERKAER_KERNEL).view(1, 1, 3, 3), persistent=False)
        in_channels = 3 + int(self.residual) + len(self.maps.names)
        widths = [int(width) * 2**level for level in range(self.depth + 1)]
        # the maps are smooth at the scale of their blocks: the network works at half resolution
        # (a strided first convolution) and its logits are brought back bilinearly
        self.stem = nn.Sequential(nn.Conv2d(in_channels, widths[0], 3, stride=2, padding=1), nn.ReLU(inplace=True))
        self.down = nn.ModuleList(conv_block(widths[i], widths[i + 1], dilation=2) for i in range(self.depth))
        from_below = [*widths[1:-1], widths[-1] * (2 if self.global_context else 1)]  # what each level decodes
        self.up = nn.ModuleList(conv_block(from_below[i] + widths[i], widths[i]) for i in reversed(range(self.depth)))
        self.head = nn.Conv2d(widths[0], 1, 1)
        # a per-pixel linear path at full resolution keeps the sharp edges of the maps (copy-move);
        # it starts as the sum of the evidence logits plus `prior_bias` (any map that fires marks
        # the pixel), and the U-Net's head starts at zero, so training starts from what the
        # training-free maps say together and learns corrections to it
        self.direct = nn.Conv2d(in_channels, 1, 1)
        with torch.no_grad():
            self.direct.weight.zero_()
            self.direct.weight[:, in_channels - len(self.maps.names) :] = 1.0 / EVIDENCE_INPUT_SCALE
            self.direct.bias.fill_(float(prior_bias))
            self.head.weight.zero_()
            self.head.bias.zero_()

    @property
    def min_image_side(self) -> int:
        """The smallest image side (px) its maps score (see `Localizer.min_image_side`)."""
        return self.maps.min_image_side

    def inputs(self, image: torch.Tensor) -> torch.Tensor:
        """(N, 3 + residual + K, H, W): what the network sees of `image`."""
        channels = [self.normalize(image)]
        if self.residual:
            gray = (image * self.luma).sum(1, keepdim=True) * 255.0
            residual = F.conv2d(F.pad(gray, (1, 1, 1, 1), mode="reflect"), self.high_pass)
            channels.append(residual * RESIDUAL_INPUT_SCALE)
        channels.append(self.maps(image) * EVIDENCE_INPUT_SCALE)
        return torch.cat(channels, dim=1)

    def network(self, inputs: torch.Tensor) -> torch.Tensor:
        """The U-Net on inputs whose height and width are multiples of 2 ** (depth + 1)."""
        skips = [self.stem(inputs)]
        for block in self.down:
            skips.append(block(F.max_pool2d(skips[-1], 2)))
        features = skips.pop()
        if self.global_context:
            features = torch.cat([features, features.mean((2, 3), keepdim=True).expand_as(features)], dim=1)
        for block in self.up:
            skip = skips.pop()
            features = F.interpolate(features, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            features = block(torch.cat([features, skip], dim=1))
        coarse = F.interpolate(self.head(features), size=inputs.shape[-2:], mode="bilinear", align_corners=False)
        return coarse + self.direct(inputs)

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        height, width = image.shape[-2:]
        inputs = pad_to_multiple(self.inputs(image), 2 ** (self.depth + 1))
        return {"mask_logit": self.network(inputs)[..., :height, :width]}
