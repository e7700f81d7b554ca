"""TruFor (Guillaro et al., "TruFor: Leveraging all-round clues for trustworthy image forgery
detection and localization", CVPR 2023; github.com/grip-unina/TruFor).

RGB and a learned noise fingerprint (Noiseprint++) go through two SegFormer MiT encoders fused per
stage (CMX); one MLP decoder gives the 2-class anomaly map, a second one a confidence map, and a
small head turns 8 confidence-weighted statistics of both maps into the image score.

Training runs in three phases (`phase`), each freezing what the previous one trained:
`fingerprint` (the extractor alone, Noiseprint's contrastive objective over processing chains),
`localize` (encoders + anomaly decoder: 0.3 class-weighted CE + 0.7 Dice) and `detect`
(confidence decoder + detection head: MSE to the true-class probability away from mask borders,
plus 0.5 x weighted detection CE). `full` trains everything with the sum of the last two.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.blocks.cmx import MIT_B2, DualMiTEncoder, MLPDecoder, build_mit, weighted_statistics
from detectors.blocks.noiseprint import NoiseFingerprint, chain_separation_auroc, patch_contrastive_loss
from detectors.blocks.weights import resolve_smp_weights, weights_deferred
from detectors.localizer import Localizer

log = logging.getLogger(__name__)

PHASES = ("fingerprint", "localize", "detect", "full")
# Which parts each phase trains; everything else is frozen (no gradients, BatchNorm in eval mode).
TRAINED_PARTS = {
    "fingerprint": ("fingerprint",),
    "localize": ("encoder", "anomaly_decoder"),
    "detect": ("confidence_decoder", "detection_head"),
    "full": ("fingerprint", "encoder", "anomaly_decoder", "confidence_decoder", "detection_head"),
}
# What `init_from` (the previous phase's checkpoint) provides to each phase: what earlier phases trained.
INHERITED_PARTS = {
    "fingerprint": (),
    "localize": ("fingerprint",),
    "detect": ("fingerprint", "encoder", "anomaly_decoder"),
    "full": TRAINED_PARTS["full"],
}
DEFAULT_FINGERPRINT = {"depth": 17, "width": 64, "weights": None}
DEFAULT_PREPROCESS = {"size": 512, "mode": "center_crop"}
# The authors' training and test loaders divide 8-bit pixels by 256 (not 255), so the published
# TruFor and Noiseprint++ weights expect that scale (`configs/detector/trufor.yaml` sets it).
PUBLISHED_PIXEL_DIVISOR = 256


class TruFor(Localizer):
    """TruFor with every part sized by config.

    `encoder`: MiT sizes (`embed_dims`, `depths`, `num_heads`, `sr_ratios`; MiT-B2 by default) and
    `stem_width`, a convolutional stem before each stream's first patch embedding (`ConvStem`; not
    in the published model, so it cannot take `encoder_weights` or `pretrained`; the tiny variant
    has one).
    `encoder_weights`: `imagenet` (segmentation-models-pytorch's MiT-B2 weights from the local
    cache), a path to a MiT state dict, or None (random, logged); both streams start from the same
    weights, as in the published model. `fingerprint`: `depth`, `width`, `weights` (a Noiseprint++
    `.th` file or a state dict of this extractor; None = random). `noise_input`: `fingerprint`, or
    `rgb` to feed the second stream the normalized image instead (the ablation without the
    fingerprint). `pretrained`: the published TruFor checkpoint (`trufor.pth.tar`), loaded through
    `detectors.trufor_weights`; it replaces all the weights above.
    """

    has_image_head = True
    has_confidence = True
    scales_pixels = True

    def __init__(
        self,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
        image_score: str = "head",
        encoder: Mapping[str, Any] | None = None,
        encoder_weights: str | None = None,
        encoder_name: str = "mit_b2",
        drop_path_rate: float = 0.1,
        fingerprint: Mapping[str, Any] | None = None,
        noise_input: str = "fingerprint",
        decoder_embed_dim: int = 512,
        pretrained: str | None = None,
        phase: str = "full",
        init_from: str | None = None,
        ce_class_weights: Sequence[float] = (0.5, 2.5),
        ce_weight: float = 0.3,
        dice_weight: float = 0.7,
        confidence_erode: int = 15,
        confidence_dilate: int = 11,
        detection_weight: float = 0.5,
        detection_class_weights: Sequence[float] = (0.5 / 0.3, 0.5 / 0.7),
        fingerprint_patch: int = 32,
        fingerprint_temperature: float = 0.1,
        loss_weights: Mapping[str, float] | None = None,
        topk_fraction: float = 0.01,
        evidence: Mapping[str, Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Kept in one piece: it checks and wires the published layout's parts, as the authors' code does."""
        super().__init__(
            {**DEFAULT_PREPROCESS, **dict(preprocess or {})} if not isinstance(preprocess, Preprocess) else preprocess,
            image_score=image_score,
            loss_weights=loss_weights,
            topk_fraction=topk_fraction,
            evidence=evidence,
        )
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        if noise_input not in ("fingerprint", "rgb"):
            raise ValueError(f"noise_input must be 'fingerprint' or 'rgb', got {noise_input!r}")
        sizes = {**MIT_B2, **dict(encoder or {})}
        if sizes.get("stem_width") and (pretrained or encoder_weights):
            raise ValueError(
                "encoder.stem_width adds layers that the published TruFor and MiT weights do not "
                "have: set it to null to load `pretrained` or `encoder_weights`"
            )
        fingerprint = {**DEFAULT_FINGERPRINT, **dict(fingerprint or {})}
        if (pretrained or fingerprint["weights"]) and self.preprocess.pixel_divisor != PUBLISHED_PIXEL_DIVISOR:
            log.warning(
                "trufor: the published weights expect 8-bit pixels / %d (their loaders' scale), this "
                "configuration divides by %g: maps differ by up to about 0.015; set "
                "preprocess.pixel_divisor: %d",
                PUBLISHED_PIXEL_DIVISOR,
                self.preprocess.pixel_divisor,
                PUBLISHED_PIXEL_DIVISOR,
            )
        self.phase, self.noise_input = phase, noise_input
        self.fingerprint = NoiseFingerprint(depth=int(fingerprint["depth"]), width=int(fingerprint["width"]))
        self.encoder = DualMiTEncoder(
            build_mit(**sizes, drop_path_rate=drop_path_rate),
            build_mit(**sizes, drop_path_rate=drop_path_rate),
            sizes["embed_dims"],
            sizes["num_heads"],
        )
        dims = self.encoder.out_channels
        # BatchNorm eps 1e-3 in the anomaly decoder and 1e-5 in the confidence decoder, as the
        # published inference code builds them (eps is not stored in checkpoints).
        self.anomaly_decoder = MLPDecoder(dims, 2, decoder_embed_dim, bn_eps=1e-3)
        self.confidence_decoder = MLPDecoder(dims, 1, decoder_embed_dim, bn_eps=1e-5)
        self.detection_head = nn.Sequential(nn.Linear(8, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 1))
        self.ce_class_weights = tuple(float(w) for w in ce_class_weights)
        self.ce_weight, self.dice_weight = float(ce_weight), float(dice_weight)
        self.confidence_erode, self.confidence_dilate = int(confidence_erode), int(confidence_dilate)
        self.detection_weight = float(detection_weight)
        self.detection_class_weights = tuple(float(w) for w in detection_class_weights)
        self.fingerprint_patch, self.fingerprint_temperature = int(fingerprint_patch), float(fingerprint_temperature)
        self._load_weights(pretrained, encoder_weights, encoder_name, fingerprint["weights"])
        if init_from and not weights_deferred():
            self.inherit(init_from, INHERITED_PARTS[phase])
        self.set_phase(phase)

    # ---------------------------------------------------------------- weights and phases
    def _load_weights(
        self, pretrained: str | None, encoder_weights: str | None, encoder_name: str, fingerprint_weights: str | None
    ) -> None:
        if weights_deferred():
            log.info("trufor: weights come from the checkpoint")
            return
        if pretrained:
            from detectors.trufor_weights import load_published

            load_published(self, pretrained)
            return
        if encoder_weights:
            path = resolve_smp_weights(encoder_name, encoder_weights)
            state = _read_state_dict(path)
            for stream in (self.encoder.rgb, self.encoder.noise):
                missing, unexpected = stream.load_state_dict(state, strict=False)
                unexpected = [k for k in unexpected if not k.startswith("head.")]
                if missing or unexpected:
                    raise ValueError(
                        f"{path} is not a {encoder_name} state dict: missing {missing[:3]}, unexpected {unexpected[:3]}"
                    )
            log.info("trufor: both MiT streams start from %s", path)
        else:
            log.warning("trufor: MiT encoders randomly initialized (encoder_weights: null)")
        if fingerprint_weights:
            from detectors.trufor_weights import load_fingerprint

            load_fingerprint(self.fingerprint, fingerprint_weights)
        else:
            log.warning("trufor: fingerprint extractor randomly initialized (fingerprint.weights: null)")

    def inherit(self, path: str, parts: Sequence[str]) -> None:
        """Take `parts` from a train.py checkpoint of this network (the previous phase's result)."""
        from detectors.trufor_weights import read_weights_file

        state = read_weights_file(path, "previous phase checkpoint")
        state = state.get("state_dict", state)
        state = {k[len("net.") :] if k.startswith("net.") else k: v for k, v in state.items()}
        for part in parts:
            module = getattr(self, part)
            taken = {k[len(part) + 1 :]: v for k, v in state.items() if k.startswith(part + ".")}
            if not taken:
                raise ValueError(f"{path} holds no weights of `{part}`: is it a trufor checkpoint?")
            module.load_state_dict(taken)
        log.info("trufor: %s taken from %s", ", ".join(parts) or "nothing", path)

    @property
    def learns_from_masks(self) -> bool:
        return self.phase != "fingerprint"  # phase 1 learns from processing chains, not masks

    def set_phase(self, phase: str) -> None:
        """Freeze every part the phase does not train (their BatchNorm statistics stay fixed too)."""
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        self.phase = phase
        for part in TRAINED_PARTS["full"]:
            getattr(self, part).requires_grad_(part in TRAINED_PARTS[phase])
        self.train(self.training)

    def train(self, mode: bool = True) -> "TruFor":
        super().train(mode)
        for part in TRAINED_PARTS["full"]:
            if part not in TRAINED_PARTS[self.phase]:
                getattr(self, part).eval()
        return self

    def _trains(self, part: str) -> bool:
        return torch.is_grad_enabled() and part in TRAINED_PARTS[self.phase]

    # ---------------------------------------------------------------- forward
    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        """`mask_logit` (log-odds of manipulated: class 1 minus class 0 of the anomaly map), the
        detection head's `head_logit`, `confidence_logit` and `fingerprint`. While phase 1 trains,
        only the fingerprint is computed: nothing downstream learns from it then."""
        image = self.scale_pixels(image)
        with torch.set_grad_enabled(self._trains("fingerprint")):
            fingerprint = self.fingerprint(image)
        if self.training and self.phase == "fingerprint":
            return {"fingerprint": fingerprint}
        rgb = self.normalize(image)
        noise = fingerprint.expand(-1, 3, -1, -1) if self.noise_input == "fingerprint" else rgb
        with torch.set_grad_enabled(self._trains("encoder")):
            features = self.encoder(rgb, noise)
        with torch.set_grad_enabled(self._trains("anomaly_decoder")):
            anomaly = self._upsample(self.anomaly_decoder(features), image)
        mask_logit = anomaly[:, 1:2] - anomaly[:, 0:1]
        with torch.set_grad_enabled(self._trains("confidence_decoder")):
            confidence = self._upsample(self.confidence_decoder(features), image)
        with torch.set_grad_enabled(self._trains("detection_head")):
            statistics = torch.cat(
                (weighted_statistics(confidence), weighted_statistics(mask_logit, F.logsigmoid(confidence))), dim=1
            )
            head_logit = self.detection_head(statistics)
        return {
            "mask_logit": mask_logit,
            "head_logit": head_logit,
            "confidence_logit": confidence,
            "fingerprint": fingerprint,
        }

    @staticmethod
    def _upsample(decoded: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        return F.interpolate(decoded, size=image.shape[-2:], mode="bilinear", align_corners=False)

    # ---------------------------------------------------------------- losses
    def loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """The objective of the current phase (see the module docstring)."""
        if self.phase == "fingerprint":
            chain = batch["chain"] if "chain" in batch else batch["label"]
            return patch_contrastive_loss(
                outputs["fingerprint"],
                chain,
                batch.get("photo"),
                self.fingerprint_patch,
                self.fingerprint_temperature,
                margin=self.fingerprint.depth,
            )
        if self.phase == "localize":
            return self.localization_loss(outputs, batch)
        if self.phase == "detect":
            return self.detection_loss(outputs, batch)
        return self.localization_loss(outputs, batch) + self.detection_loss(outputs, batch)

    def evaluation_metrics(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> dict[str, float]:
        """Phase 1's own figure on evaluation batches of chain data: `chain_auroc`, how well the
        fingerprint tells same-chain from different-chain tiles of different photos (0.5 = chance)."""
        if self.phase != "fingerprint" or "chain" not in batch:
            return {}
        return {
            "chain_auroc": chain_separation_auroc(
                outputs["fingerprint"],
                batch["chain"],
                batch.get("photo"),
                self.fingerprint_patch,
                self.fingerprint.depth,
            )
        }

    def localization_loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """0.3 x cross-entropy with class weights (0.5 genuine, 2.5 manipulated; normalized by the
        weights of the pixels, as `nn.CrossEntropyLoss(weight=...)`) + 0.7 x Dice of the
        manipulated-class probability (squared terms in the denominator, smooth 1, per image)."""
        logit = outputs["mask_logit"].float()
        mask = batch["mask"].to(logit)
        genuine_weight, forged_weight = self.ce_class_weights
        weight = genuine_weight + (forged_weight - genuine_weight) * mask
        per_pixel = F.binary_cross_entropy_with_logits(logit, mask, reduction="none")
        cross_entropy = (weight * per_pixel).sum() / weight.sum()
        prob = torch.sigmoid(logit).flatten(1)
        target = mask.flatten(1)
        dice = (2 * (prob * target).sum(1) + 1) / (prob.pow(2).sum(1) + target.pow(2).sum(1) + 1)
        return self.ce_weight * cross_entropy + self.dice_weight * (1 - dice.mean())

    def detection_loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """Confidence: MSE between sigmoid(confidence) and the anomaly map's probability of the
        true class, on pixels at least `erode`/`dilate` pixels inside/outside the mask border.
        Detection: `detection_weight` x BCE of the head's logit, weighted per class."""
        mask = batch["mask"].to(outputs["mask_logit"]).float()
        inside = 1 - F.max_pool2d(1 - mask, self.confidence_erode, 1, self.confidence_erode // 2)
        outside = 1 - F.max_pool2d(mask, self.confidence_dilate, 1, self.confidence_dilate // 2)
        forged_prob = torch.sigmoid(outputs["mask_logit"].float()).detach()
        true_class_prob = forged_prob * inside + (1 - forged_prob) * outside
        valid = (inside + outside) > 0
        confidence = torch.sigmoid(outputs["confidence_logit"].float())
        confidence_loss = F.mse_loss(confidence[valid], true_class_prob[valid]) if valid.any() else confidence.sum() * 0
        label = batch["label"].to(outputs["logit"]).float()
        negative_weight, positive_weight = self.detection_class_weights
        weight = negative_weight + (positive_weight - negative_weight) * label
        detection = F.binary_cross_entropy_with_logits(outputs["logit"].float(), label, weight=weight)
        return confidence_loss + self.detection_weight * detection


def _read_state_dict(path: str) -> dict[str, torch.Tensor]:
    if str(path).endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(path, device="cpu")
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state.get("state_dict", state.get("model", state)) if isinstance(state, dict) else state
