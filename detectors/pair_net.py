"""`pairnet`: a learned duplication detector for panel pairs (shared encoder + correlation volume).

Both panels go through one encoder (any timm model, ImageNet weights read from a local file); the
cosine similarity of every feature position of A with every position of B is the correlation
volume. Read per position of each panel, it gives how strongly that place recurs in the other panel
(peak), where it recurs (soft-argmax coordinates) and the colour there minus the colour here. A mask
head per panel reads its features with that field; an operation head reads weighted moments of the
field (the correspondence between coordinates tells flips, half turns and scaling; the colour
difference tells parameter changes) and gives the pair logit and the THEMIS CMO-I operations.

Unlike `dup_sift` it is one fixed graph (exported to ONNX with two image inputs) and is trained
with gradients through train.py (`data=duplication_pair_images`); its output contract for pairs
(`describe`, `predict_pair`) is `dup_sift`'s, so infer.py scores pairs with either.
"""

from __future__ import annotations

from typing import Any, Mapping

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.base import Detector
from detectors.blocks.weights import load_timm_encoder
from detectors.duplication import PairPrediction
from evaluation.protocols.duplication import CMO_OPERATIONS, operations_from_probabilities

# per position: peak, matched x / y in the other panel, own x / y, colour there minus here (3)
FIELD_CHANNELS = 8
# per panel side: 4 weighted means + 8 second moments of the coordinates, 3 + 3 + 3 colour moments,
# 3 peak / coverage figures
SIDE_STATISTICS = 24
DEFAULT_LOSS_WEIGHTS = {"pair": 1.0, "operations": 1.0, "mask_bce": 1.0, "mask_dice": 1.0}


class PairPanel:
    """A panel ready for the network: its input tensor (3 x size x size) and its own height / width."""

    def __init__(self, tensor: torch.Tensor, shape: tuple[int, int]) -> None:
        self.tensor, self.shape = tensor, shape


def coordinate_grid(height: int, width: int, like: torch.Tensor) -> torch.Tensor:
    """(height * width, 2) x / y of each feature position in [-1, 1], row-major."""
    ys = torch.linspace(-1.0, 1.0, height, dtype=like.dtype, device=like.device)
    xs = torch.linspace(-1.0, 1.0, width, dtype=like.dtype, device=like.device)
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([grid_x.reshape(-1), grid_y.reshape(-1)], dim=1)


def weighted_moments(field: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Moments of one side's field (N, P, 8) under weights (N, P): coordinates' means and second
    moments (how own x / y vary with matched x / y: mirror, half turn, scale), colour difference mean,
    mean absolute value and spread, and the peak's weighted mean and maximum with the coverage."""
    total = weight.sum(dim=1, keepdim=True) + 1e-6
    w = (weight / total).unsqueeze(-1)  # N, P, 1
    peak, matched, own, colour = field[..., :1], field[..., 1:3], field[..., 3:5], field[..., 5:8]
    coords = torch.cat([own, matched], dim=-1)  # x_a, y_a, x_b, y_b
    mean = (w * coords).sum(dim=1)  # N, 4
    centred = coords - mean.unsqueeze(1)
    own_c, matched_c = centred[..., :2], centred[..., 2:]
    cross = (w.unsqueeze(-1) * own_c.unsqueeze(-1) * matched_c.unsqueeze(-2)).sum(dim=1).flatten(1)  # N, 4
    spread = (w * centred * centred).sum(dim=1)  # N, 4
    colour_mean = (w * colour).sum(dim=1)
    colour_abs = (w * colour.abs()).sum(dim=1)
    colour_spread = (w * (colour - colour_mean.unsqueeze(1)) ** 2).sum(dim=1)
    peak_mean = (w * peak).sum(dim=1)
    coverage = weight.mean(dim=1, keepdim=True)
    return torch.cat(
        [mean, cross, spread, colour_mean, colour_abs, colour_spread, peak_mean, peak.amax(dim=1), coverage], dim=1
    )


def soft_dice(logit: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - Dice per sample (N,) of sigmoid(logit) against a binary target."""
    prob = torch.sigmoid(logit).flatten(1)
    target = target.flatten(1)
    return 1 - (2 * (prob * target).sum(1) + 1) / (prob.sum(1) + target.sum(1) + 1)


class PairCorrelationNet(Detector):
    """`encoder` (timm) features at `out_index`, projected to `dim` channels, correlated across the
    pair. `pretrained`: null (random init, logged), `imagenet` (the model's default timm weights from
    the local cache) or a weights file; never downloaded, a missing file is one clear error.
    Panels are resized to `preprocess.size` squared (both panels, so the pair is compared at one scale).
    """

    is_pair_detector = True
    pair_data = "duplication_pair_images"  # the data config it trains on: batches of panel images

    def __init__(
        self,
        encoder: str = "resnet50",
        pretrained: str | None = "imagenet",
        out_index: int = 3,
        dim: int = 128,
        hidden: int = 64,
        temperature: float = 20.0,
        loss_weights: Mapping[str, float] | None = None,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(preprocess or {"size": 256, "mode": "resize"})
        if self.preprocess.mode != "resize":
            raise ValueError(
                "pairnet compares both panels resized to one square size: preprocess.mode must be resize, "
                f"got {self.preprocess.mode!r}"
            )
        tag = True if str(pretrained) in ("imagenet", "true", "True", "default") else pretrained
        self.encoder = load_timm_encoder(encoder, tag, features_only=True, out_indices=(int(out_index),))
        channels = self.encoder.feature_info.channels()[-1]
        self.project = nn.Sequential(
            nn.Conv2d(channels, dim, 1), nn.BatchNorm2d(dim), nn.ReLU(), nn.Conv2d(dim, dim, 1)
        )
        self.log_temperature = nn.Parameter(torch.tensor(float(np.log(temperature))))
        self.mask_head = nn.Sequential(
            nn.Conv2d(dim + FIELD_CHANNELS, hidden, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(hidden, hidden, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(hidden, 1, 1),
        )
        self.operation_head = nn.Sequential(
            nn.Linear(2 * SIDE_STATISTICS, hidden), nn.ReLU(), nn.Linear(hidden, 1 + len(CMO_OPERATIONS))
        )
        self.loss_weights = {**DEFAULT_LOSS_WEIGHTS, **dict(loss_weights or {})}
        unknown = sorted(set(self.loss_weights) - set(DEFAULT_LOSS_WEIGHTS))
        if unknown:
            raise ValueError(f"unknown pairnet loss weights {unknown}; known: {sorted(DEFAULT_LOSS_WEIGHTS)}")

    def batch_inputs(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
        return batch["image_a"], batch["image_b"]

    def features(self, image: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.project(self.encoder(self.normalize(image))[-1]), dim=1)

    def forward(self, image_a: torch.Tensor, image_b: torch.Tensor) -> dict[str, torch.Tensor]:
        """Pairs of N x 3 x S x S RGB in [0, 1] -> `logit` (N,) duplicated, `operation_logit` (N, 5) in
        `CMO_OPERATIONS` order, `mask_logit_a` / `mask_logit_b` (N, 1, S, S) shared content."""
        feat_a, feat_b = self.features(image_a), self.features(image_b)
        n, _, h, w = feat_a.shape
        flat_a, flat_b = feat_a.flatten(2).transpose(1, 2), feat_b.flatten(2).transpose(1, 2)  # N, P, D
        correlation = flat_a @ flat_b.transpose(1, 2)  # N, P_a, P_b cosine similarities
        scaled = correlation * self.log_temperature.exp()
        grid = coordinate_grid(h, w, correlation)
        colour_a, colour_b = (self.pooled_colour(image, h, w) for image in (image_a, image_b))
        field_a = self.match_field(correlation, scaled.softmax(dim=2), grid, colour_a, colour_b)
        transposed = correlation.transpose(1, 2)
        field_b = self.match_field(transposed, scaled.transpose(1, 2).softmax(dim=2), grid, colour_b, colour_a)
        outputs: dict[str, torch.Tensor] = {}
        statistics = []
        for side, feat, field, image in (("a", feat_a, field_a, image_a), ("b", feat_b, field_b, image_b)):
            as_map = field.transpose(1, 2).reshape(n, FIELD_CHANNELS, h, w)
            coarse = self.mask_head(torch.cat([feat, as_map], dim=1))
            outputs[f"mask_logit_{side}"] = F.interpolate(
                coarse, size=image.shape[-2:], mode="bilinear", align_corners=False
            )
            statistics.append(weighted_moments(field, torch.sigmoid(coarse).flatten(1)))
        head = self.operation_head(torch.cat(statistics, dim=1))
        outputs["logit"] = head[:, 0]
        outputs["operation_logit"] = head[:, 1:]
        return outputs

    @staticmethod
    def pooled_colour(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """(N, P, 3) mean colour of the image under each feature position."""
        kernel = (image.shape[-2] // height, image.shape[-1] // width)
        pooled = F.avg_pool2d(image, kernel_size=kernel, stride=kernel)[..., :height, :width]
        return pooled.flatten(2).transpose(1, 2)

    @staticmethod
    def match_field(
        correlation: torch.Tensor,
        attention: torch.Tensor,
        grid: torch.Tensor,
        colour: torch.Tensor,
        other: torch.Tensor,
    ) -> torch.Tensor:
        """(N, P, 8): peak similarity, where the content recurs in the other panel (soft-argmax),
        the position itself, and the other panel's colour there minus the colour here."""
        peak = correlation.amax(dim=2, keepdim=True)
        matched = attention @ grid
        own = grid.unsqueeze(0).expand(correlation.shape[0], -1, -1)
        return torch.cat([peak, matched, own, attention @ other - colour], dim=2)

    def loss(self, outputs: Mapping[str, torch.Tensor], batch: Mapping[str, Any]) -> torch.Tensor:
        """BCE of the pair logit; BCE of the operation logits on duplicated pairs with a known operation
        set; per-pixel BCE of both masks (empty for pairs that share nothing) and their Dice on
        duplicated pairs."""
        weights = self.loss_weights
        label = batch["label"].float()
        total = weights["pair"] * F.binary_cross_entropy_with_logits(outputs["logit"], label)
        known = (label > 0.5) & batch["has_operations"].bool()
        if weights["operations"] and known.any():
            total = total + weights["operations"] * F.binary_cross_entropy_with_logits(
                outputs["operation_logit"][known], batch["operations"][known].float()
            )
        positive = label > 0.5
        for side in ("a", "b"):
            logit, mask = outputs[f"mask_logit_{side}"], batch[f"mask_{side}"].float()
            total = total + weights["mask_bce"] * F.binary_cross_entropy_with_logits(logit, mask) / 2
            if weights["mask_dice"] and positive.any():
                total = total + weights["mask_dice"] * soft_dice(logit[positive], mask[positive]).mean() / 2
        return total

    def describe(self, image: np.ndarray) -> PairPanel:
        """An RGB uint8 panel (any size) resized to the network's input, for many pairs."""
        size = int(self.preprocess.size)
        resized = cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA)
        tensor = torch.from_numpy(np.ascontiguousarray(resized)).permute(2, 0, 1).float() / 255.0
        return PairPanel(tensor, image.shape[:2])

    @torch.inference_mode()
    def predict_pair(self, panel_a: PairPanel, panel_b: PairPanel, threshold: float) -> PairPrediction:
        """The pair as `dup_sift` reports it: score, decision, THEMIS operations (those at probability
        >= 0.5 among scaling, rotation, flip, parameter; `direct` when none) and a mask per panel at
        its own size (empty when not duplicated). No fitted map: `transform` is empty."""
        device = next(self.parameters()).device
        outputs = self(panel_a.tensor[None].to(device), panel_b.tensor[None].to(device))
        score = float(torch.sigmoid(outputs["logit"][0]))
        duplicated = score >= threshold
        operations = (
            operations_from_probabilities(torch.sigmoid(outputs["operation_logit"][0]).cpu().numpy())
            if duplicated
            else []
        )
        masks = []
        for side, panel in (("a", panel_a), ("b", panel_b)):
            prob = torch.sigmoid(outputs[f"mask_logit_{side}"][0, 0]).float().cpu().numpy()
            height, width = panel.shape
            resized = cv2.resize(prob, (width, height), interpolation=cv2.INTER_LINEAR) >= 0.5
            masks.append(resized & duplicated)
        reason = "" if duplicated else "score below threshold"
        return PairPrediction(score, duplicated, operations, [], {}, masks[0], masks[1], "pairnet", reason)


def evaluate_pair_network(net: PairCorrelationNet, pair_set: Any, threshold: float) -> dict[str, Any]:
    """THEMIS set-F1 / EM / SPC, pair figures and mask pixel F1 of `net` on a `PairSet`, scored as
    infer.py scores pairs (`predict_pair` on the panels at their own size) and measured by the
    protocol `dup_sift` is measured by (`evaluation.protocols.duplication.duplication_metrics`).
    `given_duplicated` holds the operation and mask figures of the duplicated pairs as if each had
    been judged duplicated (the heads alone, without the pair decision)."""
    from evaluation.protocols.duplication import cmo_set, duplication_metrics, pair_pixel_counts, rates_by_kind

    was_training = net.training
    net.eval()
    described = {key: net.describe(panel) for key, panel in pair_set.panels.items()}
    rows, counts, oracle_rows, oracle_counts = [], [], [], []
    for pair in pair_set.pairs:
        found = net.predict_pair(described[pair.id_a], described[pair.id_b], -1.0)  # heads read at any score
        duplicated = found.score >= threshold
        truth = cmo_set(pair.operations) if pair.label else set()
        row = {"kind": pair.kind, "label": pair.label, "score": found.score, "truth": truth}
        rows.append({**row, "predicted": set(found.operations) if duplicated else set()})
        if pair.mask_a is None or pair.mask_b is None:
            counts.append(None)
            continue
        empty_a, empty_b = np.zeros_like(found.mask_a), np.zeros_like(found.mask_b)
        masks = (found.mask_a, found.mask_b) if duplicated else (empty_a, empty_b)
        counts.append(pair_pixel_counts(pair.mask_a, pair.mask_b, *masks))
        if pair.label:
            oracle_rows.append({**row, "score": 1.0, "predicted": set(found.operations)})
            oracle_counts.append(pair_pixel_counts(pair.mask_a, pair.mask_b, found.mask_a, found.mask_b))
    net.train(was_training)
    metrics = duplication_metrics(rows, threshold, counts)
    metrics["by_kind"] = rates_by_kind(rows, threshold)
    if oracle_rows:
        given = duplication_metrics(oracle_rows, 0.5, oracle_counts)
        metrics["given_duplicated"] = {
            key: given[key] for key in ("operations", "by_operation", "pixel_f1", "n_mask_pairs") if key in given
        }
    return metrics
