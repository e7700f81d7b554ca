"""`seg`: any segmentation-models-pytorch network as a manipulation localizer.

The simple, strong baseline users compare forensic localizers against: an ImageNet encoder (ResNet,
EfficientNet, MiT, or any timm model as `tu-<name>`) under a Unet, UnetPlusPlus, FPN, DeepLabV3+ or
Segformer decoder, trained with Dice + BCE on the manipulation mask. The image score is the map's
max / top-k mean, or smp's auxiliary classification head on the deepest features (`aux_head`).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import torch

from datamodules.preprocess import Preprocess
from detectors.blocks.weights import read_state_dict, resolve_smp_weights, resolve_timm_weights, weights_deferred
from detectors.localizer import Localizer

log = logging.getLogger(__name__)

ARCHITECTURES = (
    "Unet",
    "UnetPlusPlus",
    "FPN",
    "DeepLabV3Plus",
    "Segformer",
    "Linknet",
    "PSPNet",
    "PAN",
    "MAnet",
    "DeepLabV3",
    "UPerNet",
    "DPT",
)


class SegmentationLocalizer(Localizer):
    """A segmentation-models-pytorch `arch` with `encoder` producing 1-channel manipulation logits.

    `pretrained`: None random init (logged); `imagenet` (or another smp weight tag) from the local
    Hugging Face cache; a path to a weights file. Nothing is downloaded, and a missing file is one
    clear error. `aux_head`: add smp's classification head (`image_score: head` uses it; its logit
    is then trained by the `image_bce` loss term). `arch_kwargs` go to the smp constructor
    (`decoder_channels`, `encoder_output_stride`, ...).
    """

    def __init__(
        self,
        arch: str = "Unet",
        encoder: str = "resnet34",
        encoder_depth: int = 5,
        pretrained: str | None = "imagenet",
        aux_head: bool = False,
        arch_kwargs: Mapping[str, Any] | None = None,
        image_score: str = "max",
        topk_fraction: float = 0.01,
        loss_weights: Mapping[str, float] | None = None,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
        evidence: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> None:
        self.has_image_head = bool(aux_head)
        super().__init__(
            preprocess or {"size": 512, "mode": "center_crop"},
            image_score=image_score,
            loss_weights=loss_weights,
            topk_fraction=topk_fraction,
            evidence=evidence,
        )
        if arch not in ARCHITECTURES:
            raise ValueError(f"seg arch must be one of {', '.join(ARCHITECTURES)}, got {arch!r}")
        self.arch, self.encoder_name = arch, encoder
        self.stride = 2 ** int(encoder_depth)
        self.model = build_smp_model(arch, encoder, int(encoder_depth), pretrained, aux_head, dict(arch_kwargs or {}))
        freeze_unused_parameters(self.model, self.stride)

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        produced = self.model(self.normalize(image))
        if isinstance(produced, tuple):
            return {"mask_logit": produced[0], "head_logit": produced[1].reshape(-1)}
        return {"mask_logit": produced}


def build_smp_model(
    arch: str, encoder: str, depth: int, pretrained: str | None, aux_head: bool, arch_kwargs: dict[str, Any]
) -> torch.nn.Module:
    """The smp network with its encoder weights read from a local file (never downloaded)."""
    import segmentation_models_pytorch as smp

    aux = {"classes": 1, "pooling": "max", "dropout": 0.0} if aux_head else None
    if arch in ("Unet", "UnetPlusPlus", "MAnet") and "decoder_channels" not in arch_kwargs:
        arch_kwargs["decoder_channels"] = (256, 128, 64, 32, 16)[5 - depth :]  # smp's default, one per stage
    timm_encoder = encoder.startswith("tu-")
    load = bool(pretrained) and not weights_deferred()
    extra: dict[str, Any] = {}
    if load and timm_encoder:  # timm reads the file itself, before wrapping the model for features
        tag = True if str(pretrained) in ("imagenet", "true", "True", "default") else str(pretrained)
        path = resolve_timm_weights(encoder[3:], tag)
        extra = {"encoder_weights": True, "pretrained_cfg_overlay": {"file": path}}
    try:
        model = smp.create_model(
            arch,
            encoder_name=encoder,
            encoder_depth=depth,
            in_channels=3,
            classes=1,
            aux_params=aux,
            **{"encoder_weights": None, **extra, **arch_kwargs},
        )
    except KeyError as error:
        raise ValueError(
            f"segmentation-models-pytorch cannot build {arch} with encoder {encoder!r}: {error}"
        ) from error
    if not load:
        reason = "weights come from the checkpoint" if pretrained else "pretrained: null"
        log.warning("seg %s/%s: random initialization (%s)", arch, encoder, reason)
    elif timm_encoder:
        log.info("seg %s/%s: encoder weights from %s", arch, encoder, extra["pretrained_cfg_overlay"]["file"])
    else:
        path = resolve_smp_weights(encoder, str(pretrained))
        model.encoder.load_state_dict(read_state_dict(path))
        log.info("seg %s/%s: encoder weights from %s", arch, encoder, path)
    return model


def freeze_unused_parameters(model: torch.nn.Module, stride: int) -> list[str]:
    """Freeze the parameters no output depends on (smp keeps encoder stages deeper than `encoder_depth`).

    Parameters without gradients make DDP fail (or need the slow `find_unused_parameters`) and
    would be handed to the optimizer for nothing. Found from one small forward in eval mode.
    """
    if torch.is_inference_mode_enabled():  # built to score with: nothing will be trained
        return []
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    was_training = model.training
    try:
        with torch.enable_grad():
            produced = model.eval()(torch.zeros(1, 3, 2 * stride, 2 * stride))
            total = sum(out.sum() for out in (produced if isinstance(produced, tuple) else (produced,)))
            grads = torch.autograd.grad(total, [p for _, p in named], allow_unused=True)
    finally:
        model.train(was_training)
    unused = [name for (name, p), grad in zip(named, grads) if grad is None]
    for name, parameter in named:
        if name in unused:
            parameter.requires_grad_(False)
    if unused:
        log.info("seg: %d encoder parameters beyond encoder_depth feed no output and are frozen", len(unused))
    return unused
