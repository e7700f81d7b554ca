"""Training-free duplication detectors built on `detectors.matching`.

`PairDuplicationDetector` says whether panel B reuses content of panel A, how (the THEMIS CMO-I
operation set: direct, scaling, rotation, flip, parameter), the fitted A -> B map and where (a mask
per panel). Nothing is learned by gradients: two small logistic models read the match statistics,
one for the pair score and one for "parameters were modified"; train.py fits them on generated
pairs and calibrates the threshold to a target false-positive rate on non-duplicate pairs
(`detectors.training_free`). Their coefficients are buffers, so the checkpoint is an ordinary one.

Copy-move inside one image (`SelfMatchLocalizer`, the same matching applied to an image and
itself) is a localizer and lives in `detectors.copy_move`; `detectors.duplication.SelfMatchLocalizer`
still resolves to it, so configs and checkpoints written before the move load unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import cv2
import numpy as np
import torch

from datamodules.preprocess import Preprocess
from datamodules.records import LayoutError
from detectors.base import Detector
from detectors.matching import EXPORT_REFUSAL, Geometry, Panel, describe_panel
from detectors.pair_matching import (
    FEATURE_NAMES,
    PARAMETER_FEATURE_NAMES,
    PairMatch,
    match_pair,
    match_under,
    to_working,
)
from evaluation.protocols.duplication import cmo_set

WHOLE_IMAGE = {"size": None, "mode": "none", "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}
MIN_SIDE = 32  # the smallest side (px) panels are matched at: SIFT finds little on a smaller copy


def to_uint8(image: torch.Tensor | np.ndarray) -> np.ndarray:
    """3 x H x W float RGB in [0, 1] (tensor or array) -> H x W x 3 uint8."""
    array = image.detach().float().cpu().numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    return np.ascontiguousarray((np.clip(array, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0))


class LogisticScore(torch.nn.Module):
    """A standardized logistic model whose coefficients are buffers (fitted with scikit-learn)."""

    def __init__(self, n_features: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_features, dtype=torch.float64))
        self.register_buffer("scale", torch.ones(n_features, dtype=torch.float64))
        self.register_buffer("coef", torch.zeros(n_features, dtype=torch.float64))
        self.register_buffer("intercept", torch.zeros((), dtype=torch.float64))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    def fit(self, features: np.ndarray, labels: np.ndarray, c: float = 1.0) -> None:
        from sklearn.linear_model import LogisticRegression

        labels = np.asarray(labels).astype(int)
        if len(np.unique(labels)) < 2:
            raise ValueError(f"fitting a score model needs both classes, got only {np.unique(labels).tolist()}")
        mean, scale = features.mean(0), features.std(0)
        scale = np.where(scale > 1e-9, scale, 1.0)
        model = LogisticRegression(C=c, class_weight="balanced", max_iter=1000)
        model.fit((features - mean) / scale, labels)
        fitted = {"mean": mean, "scale": scale, "coef": model.coef_[0], "intercept": model.intercept_[0]}
        for name, value in fitted.items():
            getattr(self, name).copy_(torch.as_tensor(value, dtype=torch.float64))
        self.fitted.fill_(True)

    def logit(self, features: np.ndarray) -> np.ndarray:
        if not bool(self.fitted):
            raise RuntimeError("this score model is not fitted: train the detector with train.py first")
        # the buffers sit wherever the detector was moved (infer.py: a GPU), numpy on the CPU
        mean, scale, coef = (buffer.cpu().numpy() for buffer in (self.mean, self.scale, self.coef))
        return (np.atleast_2d(features) - mean) / scale @ coef + float(self.intercept)


@dataclass
class PairPrediction:
    score: float
    duplicated: bool
    operations: list[str]  # THEMIS CMO-I answers, sorted; [] when not duplicated
    geometric: list[str]  # fine geometric operations (rotate180, hflip, vflip, rotation, scaling)
    transform: dict[str, Any]  # A -> B map in original pixels and its decomposition
    mask_a: np.ndarray
    mask_b: np.ndarray
    method: str
    reason: str


class PairDuplicationDetector(Detector):
    """Matching-based pair detector; `max_side` is the working size panels are matched at,
    `detect_side` the size keypoints are found at (None: the working size), `fallback_keypoints`
    the keypoint count below which the low-texture search is tried (None: for every pair with too
    few inliers). See `detectors.matching.describe_panel` and `detectors.pair_matching.match_pair`."""

    is_pair_detector = True
    fit_without_gradients = True
    pair_data = "duplication_pairs"  # the data config it is fitted on: pairs with their match statistics
    onnx_export_refusal = EXPORT_REFUSAL

    def __init__(
        self,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
        max_side: int = 512,
        n_features: int = 1000,
        ratio: float = 0.8,
        min_inliers: int = 8,
        mask_furniture: bool = True,
        scale_tolerance: float = 0.06,
        angle_tolerance: float = 5.0,
        min_peak: float = 0.6,
        detect_side: int | None = None,
        fallback_keypoints: int | None = None,
    ) -> None:
        super().__init__(preprocess or WHOLE_IMAGE)
        if max_side < MIN_SIDE or (detect_side is not None and detect_side < MIN_SIDE) or n_features < 1:
            given = f"max_side={max_side}, detect_side={detect_side}, n_features={n_features}"
            raise ValueError(  # a side of 0 found no keypoint and scored every pair 0, without a word
                f"the panels are matched at max_side and detect_side of at least {MIN_SIDE} px (detect_side null: "
                f"at max_side) with n_features of at least 1; got {given}"
            )
        self.detect_side = None if detect_side is None else int(detect_side)
        self.fallback_keypoints = None if fallback_keypoints is None else int(fallback_keypoints)
        self.max_side, self.n_features, self.ratio = int(max_side), int(n_features), float(ratio)
        self.min_inliers, self.mask_furniture, self.min_peak = (int(min_inliers), bool(mask_furniture), float(min_peak))
        self.scale_tolerance, self.angle_tolerance = float(scale_tolerance), float(angle_tolerance)
        self.score_model = LogisticScore(len(FEATURE_NAMES))
        self.parameter_model = LogisticScore(len(PARAMETER_FEATURE_NAMES))
        self._sift = None

    def describe(self, image: np.ndarray) -> Panel:
        """A panel (RGB uint8, any size) at working size with its keypoints, for many pairs."""
        if self._sift is None:
            self._sift = cv2.SIFT_create(nfeatures=self.n_features)
        return describe_panel(
            image, self.max_side, self.n_features, self.mask_furniture, self._sift, detect_side=self.detect_side
        )

    def match(self, panel_a: Panel, panel_b: Panel) -> PairMatch:
        return match_pair(
            panel_a,
            panel_b,
            self.ratio,
            self.min_inliers,
            min_peak=self.min_peak,
            fallback_keypoints=self.fallback_keypoints,
        )

    def score(self, match: PairMatch) -> float:
        """Probability that the pair shares content (0 when matching found nothing to fit)."""
        if match.method == "none":
            return 0.0
        return float(1.0 / (1.0 + np.exp(-self.score_model.logit(match.features())[0])))

    def operations(self, match: PairMatch) -> tuple[list[str], list[str]]:
        """(THEMIS CMO-I answers, fine geometric operations) of a duplicated pair."""
        geometric = match.geometry.operations(self.scale_tolerance, self.angle_tolerance) if match.geometry else []
        fine = list(geometric)
        if self.parameter_model.logit(match.parameter_features())[0] >= 0:
            fine.append("parameter")
        return sorted(cmo_set(fine or ["direct"])), geometric

    def predict_pair(self, panel_a: Panel, panel_b: Panel, threshold: float) -> PairPrediction:
        match = self.match(panel_a, panel_b)
        score = self.score(match)
        duplicated = score >= threshold
        return self.prediction(
            match, score, duplicated, match.reason or ("" if duplicated else "score below threshold")
        )

    def predict_under(
        self, panel_a: Panel, panel_b: Panel, matrix: np.ndarray, score: float, reason: str
    ) -> PairPrediction:
        """A pair found duplicated by evidence other than this detector's score (a collection search's
        map whose mapped content correlates with the query): operations, transform and masks
        described under `matrix` (A's original pixels -> B's); `score` stays this detector's own."""
        working = to_working(np.asarray(matrix, np.float64), panel_a.factor, panel_b.factor)
        return self.prediction(match_under(panel_a, panel_b, working, "retrieval_map"), score, True, reason)

    def prediction(self, match: PairMatch, score: float, duplicated: bool, reason: str) -> PairPrediction:
        operations, geometric = self.operations(match) if duplicated else ([], [])
        transform: dict[str, Any] = {}
        if match.matrix is not None:
            geometry: Geometry = match.geometry
            transform = {
                "matrix": np.round(match.matrix, 4).tolist(),
                "rotation": round(geometry.rotation, 2),
                "scale": round(geometry.scale, 4),
                "flipped": geometry.flipped,
                "inliers": match.n_inliers,
                "matches": match.n_matches,
                "brightness": round(match.photometric.get("brightness", 0.0), 4),
                "points": matched_points(match),
            }
        empty_a, empty_b = np.zeros(match.mask_a.shape, bool), np.zeros(match.mask_b.shape, bool)
        return PairPrediction(
            score,
            duplicated,
            operations,
            geometric,
            transform,
            match.mask_a if duplicated else empty_a,
            match.mask_b if duplicated else empty_b,
            match.method,
            reason,
        )

    def forward(self, image_a: torch.Tensor, image_b: torch.Tensor) -> dict[str, torch.Tensor]:
        """Pairs of N x 3 x H x W RGB in [0, 1] -> `{"logit": (N,)}` (masks: `predict_pair`)."""
        logits = []
        for a, b in zip(image_a, image_b):
            match = self.match(self.describe(to_uint8(a)), self.describe(to_uint8(b)))
            logits.append(-30.0 if match.method == "none" else float(self.score_model.logit(match.features())[0]))
        return {"logit": torch.tensor(logits, dtype=torch.float32, device=image_a.device)}

    def fit(
        self, matches: Sequence[PairMatch], labels: Sequence[int], parameter_labels: Sequence[int | None]
    ) -> dict[str, int]:
        """Fit the score model on all pairs that matching could fit a map to, and the parameter
        model on the duplicated ones with a known operation set."""
        usable = [i for i, m in enumerate(matches) if m.method != "none"]
        known = [i for i in usable if labels[i] == 1 and parameter_labels[i] is not None]
        fitted = {
            "duplicated and not": {labels[i] for i in usable},
            "with and without changed parameters": {parameter_labels[i] for i in known},
        }
        for kinds, found in fitted.items():  # a model of one class is no model: said as the data's lack
            if len(found) < 2:
                raise LayoutError(
                    f"too few training pairs to fit {type(self).__name__}: it needs pairs {kinds} that matching "
                    f"could map ({len(usable)} of {len(matches)} could); add photos or raise the pairs per photo"
                )
        features = np.stack([matches[i].features() for i in usable])
        self.score_model.fit(features, np.asarray([labels[i] for i in usable]))
        self.parameter_model.fit(
            np.stack([matches[i].parameter_features() for i in known]), np.asarray([parameter_labels[i] for i in known])
        )
        return {"score_pairs": len(usable), "parameter_pairs": len(known)}


def matched_points(match: PairMatch) -> list[list[float]]:
    """The kept inlier keypoints as [x_a, y_a, x_b, y_b] in original pixels (B's through the fitted map)."""
    points_a = np.asarray(match.extra.get("points_a", np.zeros((0, 2))), dtype=np.float64).reshape(-1, 2)
    if match.matrix is None or not len(points_a):
        return []
    points_b = points_a @ np.asarray(match.matrix)[:, :2].T + np.asarray(match.matrix)[:, 2]
    return np.round(np.concatenate([points_a, points_b], axis=1), 1).tolist()


def __getattr__(name: str) -> Any:
    """The copy-move localizer under its former path (configs and checkpoints that name it here)."""
    if name == "SelfMatchLocalizer":
        from detectors.copy_move import SelfMatchLocalizer

        return SelfMatchLocalizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
