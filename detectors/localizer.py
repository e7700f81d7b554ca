"""What every manipulation localizer shares: map -> image score, the default loss, padding to stride.

A localizer's `forward(image)` returns `{"logit": (N,), "mask_logit": (N, 1, H, W)}` at the input's
size, plus optionally `"edge_logit"` and `"confidence_logit"` (N, 1, H, W). The pipeline is fixed
here, as segmentation_models_pytorch's base model fixes its own: pad to the stride -> the dense
prediction -> crop back -> the image score and the result dict. A new localizer is a constructor
and a `dense_prediction`; the image score, the loss and the handling of arbitrary input sizes come
from here, so nothing else in the toolkit changes.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F

from datamodules.preprocess import Preprocess
from detectors.base import Detector, autocast_off
from detectors.losses import bce_loss, dice_loss

IMAGE_SCORES = ("max", "topk_mean", "head")
LOSS_TERMS = ("mask_dice", "mask_bce", "edge_dice", "image_bce")
DEFAULT_LOSS_WEIGHTS = {"mask_dice": 1.0, "mask_bce": 1.0, "edge_dice": 0.0, "image_bce": 0.0}


def pad_to_multiple(image: torch.Tensor, stride: int) -> torch.Tensor:
    """Pad bottom/right (replicating the border) so height and width are multiples of `stride`.

    Always pads, even by zero pixels, so the exported graph has no size-dependent branch.
    Replicating the border adds no edges a forensic network could take for a splice boundary.
    """
    height, width = image.shape[-2:]
    return F.pad(image, (0, (-width) % stride, 0, (-height) % stride), mode="replicate")


class Localizer(Detector):
    """Base of the manipulation localizers (MVSS-Net, TruFor, the segmentation baseline).

    `image_score`: how the image logit comes from the map: `max` (the FraudBench / MVSS-Net rule),
    `topk_mean` (mean of the `topk_fraction` highest pixel logits: less sensitive to one hot pixel),
    or `head` (the network's own detection head; only for networks that have one).
    `loss_weights`: weights of `mask_dice`, `mask_bce`, `edge_dice` (needs an `edge_logit`) and
    `image_bce` (the image logit against the label); missing keys take `DEFAULT_LOSS_WEIGHTS`.
    `evidence`: training-free maps fused into the learned map (`detectors.evidence`), e.g.
    `{noise_level: {}, jpeg_ghost: {}}`; None for the network alone.
    Subclasses set `stride` (the factor the input size must divide by) and `has_image_head`.
    """

    is_localizer = True
    has_image_head = False
    stride = 1

    def __init__(
        self,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
        image_score: str = "max",
        loss_weights: Mapping[str, float] | None = None,
        topk_fraction: float = 0.01,
        evidence: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> None:
        super().__init__(preprocess)
        if image_score not in IMAGE_SCORES:
            raise ValueError(f"image_score must be one of {IMAGE_SCORES}, got {image_score!r}")
        if image_score == "head" and not self.has_image_head:
            raise ValueError(f"{type(self).__name__} has no detection head; use image_score max or topk_mean")
        unknown = set(loss_weights or {}) - set(LOSS_TERMS)
        if unknown:
            raise ValueError(f"unknown loss_weights {sorted(unknown)}; known terms: {', '.join(LOSS_TERMS)}")
        if not 0.0 < topk_fraction <= 1.0:
            raise ValueError(f"topk_fraction must be in (0, 1], got {topk_fraction}")
        self.image_score = image_score
        self.loss_weights = {**DEFAULT_LOSS_WEIGHTS, **{k: float(v) for k, v in (loss_weights or {}).items()}}
        # An integer divisor keeps k an integer expression of the (possibly symbolic) map size.
        self.topk_divisor = max(1, round(1.0 / topk_fraction))
        self.evidence = None
        if evidence:
            from detectors.evidence import EvidenceFusion

            self.evidence = EvidenceFusion(evidence)
            if self.evidence.onnx_export_refusal:  # a map fitted per image is no fixed graph
                self.onnx_export_refusal = self.evidence.onnx_export_refusal

    @property
    def min_image_side(self) -> int:
        """The smallest image side (px) it scores: its evidence maps' (an exported model's metadata
        carries it, so the ONNX path refuses a smaller image with the same reason); 1 without."""
        return self.evidence.min_image_side if self.evidence is not None else 1

    def image_logit_from_map(self, mask_logit: torch.Tensor) -> torch.Tensor:
        """(N, 1, H, W) pixel logits -> (N,) image logit by `max` or `topk_mean`."""
        flat = mask_logit.flatten(1)
        if self.image_score == "topk_mean":
            k = torch.sym_max(1, flat.shape[1] // self.topk_divisor)
            return flat.topk(k, dim=1).values.mean(1)
        return flat.amax(1)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        """Pad to a multiple of `stride`, predict densely, crop every map back to the input's size,
        then the evidence fused in (when configured), the image logit (from the map or the head)
        and the result dict. A training-free localizer (`fit_without_gradients`) predicts in
        float32 with mixed precision off, so a trainer's `16-mixed` calibrates it on the scores
        infer.py gives."""
        height, width = image.shape[-2:]
        evidence = self.evidence.logits(image) if self.evidence is not None else None
        if self.stride > 1:  # a class constant: the exported graph has no size-dependent branch
            image = pad_to_multiple(image, self.stride)
        if getattr(self, "fit_without_gradients", False):  # a fixed statistic: as infer.py computes it
            with autocast_off(image.device):
                dense = dict(self.dense_prediction(image.float()))
        else:
            dense = dict(self.dense_prediction(image))
        if self.stride > 1:
            dense = {k: v[..., :height, :width] if v.dim() == 4 else v for k, v in dense.items()}
        if "mask_logit" not in dense:  # a training phase that trains no map (TruFor's fingerprint)
            return dense
        if evidence is not None:
            dense["mask_logit"] = self.evidence.fuse(dense["mask_logit"], evidence)
        return self.outputs(dense.pop("mask_logit"), dense.pop("head_logit", None), **dense)

    def dense_prediction(self, image: torch.Tensor) -> Mapping[str, torch.Tensor]:
        """The network on `image` (height and width multiples of `stride`): `mask_logit`
        (N, 1, H, W) at the image's size, `head_logit` (N,) when the network has a detection head,
        and any other maps it produces (`edge_logit`, `confidence_logit`, ...)."""
        raise NotImplementedError(f"{type(self).__name__} must implement dense_prediction")

    def outputs(
        self, mask_logit: torch.Tensor, head_logit: torch.Tensor | None = None, **extra: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        """The forward's result dict: image logit from the head or the map, plus the given maps."""
        if self.image_score == "head":
            logit = head_logit.reshape(-1)
        else:
            logit = self.image_logit_from_map(mask_logit)
        result = {"logit": logit, "mask_logit": mask_logit}
        result.update({k: v for k, v in extra.items() if v is not None})
        return result

    def loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """Weighted sum of mask Dice, mask BCE, edge Dice and image BCE (zero weights are skipped)."""
        weights = self.loss_weights
        mask = batch["mask"].to(outputs["mask_logit"])
        total = outputs["mask_logit"].new_zeros(())
        if weights["mask_dice"]:
            total = total + weights["mask_dice"] * dice_loss(outputs["mask_logit"], mask)
        if weights["mask_bce"]:
            total = total + weights["mask_bce"] * bce_loss(outputs["mask_logit"], mask)
        if weights["edge_dice"]:
            if "edge_logit" not in outputs:
                raise ValueError(f"{type(self).__name__} has no edge_logit output; set loss_weights.edge_dice to 0")
            total = total + weights["edge_dice"] * dice_loss(outputs["edge_logit"], batch["edge"])
        if weights["image_bce"]:
            total = total + weights["image_bce"] * bce_loss(outputs["logit"], batch["label"].to(outputs["logit"]))
        return total
