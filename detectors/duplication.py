"""Training-free duplication detectors built on `detectors.matching`.

`PairDuplicationDetector` says whether panel B reuses content of panel A, how (the THEMIS CMO-I
operation set: direct, scaling, rotation, flip, parameter), the fitted A -> B map and where (a mask
per panel). Nothing is learned by gradients: two small logistic models read the match statistics,
one for the pair score and one for "parameters were modified"; train.py fits them on generated
pairs and calibrates the threshold to a target false-positive rate on non-duplicate pairs
(`detectors.training_free`). Their coefficients are buffers, so the checkpoint is an ordinary one.

`SelfMatchLocalizer` finds copy-move inside one image by matching it with itself and is a
localizer like any other (`forward(image)` -> image logit and pixel map).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import cv2
import numpy as np
import torch

from datamodules.preprocess import Preprocess
from detectors.base import Detector
from detectors.dense_copy_move import dense_self_match
from detectors.localizer import Localizer
from detectors.matching import Geometry, Panel, describe_panel, unmasked_view
from detectors.pair_matching import (
    FEATURE_NAMES,
    PARAMETER_FEATURE_NAMES,
    PairMatch,
    match_pair,
    match_under,
    to_working,
)
from detectors.self_matching import SelfMatch, is_pure_shift, match_self, missed, self_match_regions, turns
from evaluation.protocols.duplication import cmo_set
from imageops import noise_sigma

WHOLE_IMAGE = {"size": None, "mode": "none", "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}


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
        z = (np.atleast_2d(features) - self.mean.numpy()) / self.scale.numpy()
        return z @ self.coef.numpy() + float(self.intercept)


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
    onnx_export_refusal = (
        "it matches keypoints with OpenCV, which an ONNX graph cannot hold; score with its .ckpt "
        "(infer.py model=...ckpt)"
    )

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
        return {"logit": torch.tensor(logits, dtype=torch.float32)}

    def fit(
        self, matches: Sequence[PairMatch], labels: Sequence[int], parameter_labels: Sequence[int | None]
    ) -> dict[str, int]:
        """Fit the score model on all pairs that matching could fit a map to, and the parameter
        model on the duplicated ones with a known operation set."""
        usable = [i for i, m in enumerate(matches) if m.method != "none"]
        features = np.stack([matches[i].features() for i in usable])
        self.score_model.fit(features, np.asarray([labels[i] for i in usable]))
        known = [i for i in usable if labels[i] == 1 and parameter_labels[i] is not None]
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


class SelfMatchLocalizer(Localizer):
    """Copy-move by self-matching: the image matched with itself (and its mirror), a keypoint's own
    neighbourhood excluded. The map marks the target (logit +`confidence`) and the source (logit -1:
    probability 0.27, visible in saved maps, under the 0.5 cut) when the resampling trace tells
    which copy is which (`mark: target`); `mark: both` marks both copies as manipulated. A pure
    shift carries no such trace, so both copies are marked then. The image logit is the evidence:
    inliers above `min_inliers`.

    A match whose two copies overlap by more than `max_copy_overlap` of the smaller is a repeated
    structure matching itself one period away (lines of text, a brick wall), not a copy: dropped, as
    is a shift whose copy repeats once more along it (bars, legend rows; `max_shift_repeat`).
    So is a match whose copy its resampled source reproduces only to more than the residual gate
    (median grey levels): look-alike content, such as the same words typeset twice. The gate is
    `max_copy_residual`, raised to `copy_residual_noise_factor` x the image's noise level
    (`noise_sigma`; JPEG recompression raises a real copy's residual with it), at most
    `copy_residual_ceiling` (look-alike text and texture sit above it however noisy the image).
    Where SIFT finds no consistent self-matches, `dense_min_inliers` > 0 tries the dense block
    fallback (`detectors.dense_copy_move`: Zernike blocks of `dense_radius` px on a grid of at most
    `dense_grid` a side, partners at least `dense_min_distance` of the longer side apart). Smooth
    content resembles itself everywhere, so its map is kept only with `dense_min_inliers` inlier
    blocks, a copy that its resampled source reproduces to `dense_max_residual` grey levels, and a
    turn or rescaling: rendered content (bars, ticks, lanes, letters) repeats exactly by pure shifts.
    `border_band` > 0: each copy's outline is traced to the pixel within that many px
    (`detectors.self_matching.trace_copy_border`); 0 keeps the correlation windows' outline.
    `furniture_retry`: where no copy was found, the keypoints of text and rulings (masked so far, as
    every chart has them) are matched too, and only a turned or flipped copy that resampling
    reproduces is kept: a turned legend or bar group has no other keypoints."""

    has_image_head = True
    fit_without_gradients = True
    onnx_export_refusal = PairDuplicationDetector.onnx_export_refusal

    def __init__(
        self,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
        max_side: int = 512,
        n_features: int = 1000,
        ratio: float = 0.8,
        min_distance: float = 0.05,
        min_inliers: int = 6,
        mark: str = "target",
        image_score: str = "head",
        confidence: float = 6.0,
        max_copy_overlap: float = 0.5,
        max_shift_repeat: float = 0.5,
        max_copy_residual: float = 4.0,
        copy_residual_noise_factor: float = 3.0,
        copy_residual_ceiling: float = 5.0,
        dense_min_inliers: int = 30,
        dense_radius: int = 6,
        dense_grid: int = 96,
        dense_min_distance: float = 0.15,
        dense_max_residual: float = 1.0,
        border_band: int = 6,
        furniture_retry: bool = True,
    ) -> None:
        super().__init__(preprocess or WHOLE_IMAGE, image_score=image_score)
        self.border_band, self.furniture_retry = int(border_band), bool(furniture_retry)
        self.max_copy_overlap, self.dense_min_inliers = float(max_copy_overlap), int(dense_min_inliers)
        self.max_shift_repeat = float(max_shift_repeat)
        self.max_copy_residual = float(max_copy_residual)
        self.copy_residual_noise_factor, self.copy_residual_ceiling = (
            float(copy_residual_noise_factor),
            float(copy_residual_ceiling),
        )
        self.dense_radius, self.dense_grid = int(dense_radius), int(dense_grid)
        self.dense_min_distance, self.dense_max_residual = float(dense_min_distance), float(dense_max_residual)
        if mark not in ("target", "both"):
            raise ValueError(f"mark must be target or both, got {mark!r}")
        self.max_side, self.n_features, self.ratio = int(max_side), int(n_features), float(ratio)
        self.min_distance, self.min_inliers, self.mark = float(min_distance), int(min_inliers), mark
        self.confidence = float(confidence)
        self._sift = None

    def locate(self, image: np.ndarray) -> tuple[float, np.ndarray, Any]:
        """(image logit, pixel logits H x W, SelfMatch) of one RGB uint8 image."""
        if self._sift is None:
            self._sift = cv2.SIFT_create(nfeatures=self.n_features)
        panel = first = describe_panel(
            image,
            self.max_side,
            self.n_features,
            mask_furniture=True,
            sift=self._sift,
            keep_unmasked=self.furniture_retry,
        )
        found = match_self(panel, self.ratio, self.min_distance, self.min_inliers, border_band=self.border_band)
        if found.matrix is None:  # a copy in faint texture: weaker extrema give it keypoints
            faint = cv2.SIFT_create(nfeatures=self.n_features, contrastThreshold=0.01)
            panel = describe_panel(image, self.max_side, self.n_features, True, faint, 0)
            found = match_self(panel, self.ratio, self.min_distance, self.min_inliers, border_band=self.border_band)
        found = self.checked(found, panel)
        if found.matrix is None and self.furniture_retry:
            found = self.furniture_fallback(first, found)
        if found.matrix is None and self.dense_min_inliers > 0:
            found = self.dense_fallback(panel, found)
        logits = np.full(image.shape[:2], -self.confidence, np.float32)
        if found.matrix is not None:
            marked_source = self.confidence if (self.mark == "both" or not found.ordered) else -1.0
            logits[found.source] = marked_source
            logits[found.target] = self.confidence
        evidence = -self.confidence
        if found.target.any():  # a dense match counts blocks: put them on the keypoints' scale
            floor = self.dense_min_inliers if found.method == "dense" else self.min_inliers
            evidence = (found.n_inliers - floor) / 2.0 * self.min_inliers / floor
        return float(np.clip(evidence, -self.confidence, 3 * self.confidence)), logits, found

    def checked(self, found: SelfMatch, panel: Any) -> SelfMatch:
        """`found`, or no copy where its copies overlap or repeat again along a shift (a repeated
        structure) or its copy is not its source resampled (look-alike content)."""
        if found.matrix is not None and found.overlap > self.max_copy_overlap:
            return missed(found, "the copies overlap: a repeated structure")
        if found.matrix is not None and found.repeat > self.max_shift_repeat:
            return missed(found, "the copy repeats again one shift further: a repeated structure")
        if found.matrix is not None and np.isfinite(found.residual) and found.residual > self.residual_gate(panel):
            return missed(found, "the copy is not its source resampled: look-alike content")
        return found

    def furniture_fallback(self, described: Panel, keypoints: SelfMatch) -> SelfMatch:
        """The keypoints of text and rulings matched too, for a panel (`described` with
        `keep_unmasked`) whose other keypoints found no copy (`keypoints` when this finds none
        either): a turned legend, label or bar group. Rendered marks repeat by shifts and at other
        sizes (bars, error bars, letters), so only a turn or a flip that resampling reproduces (a
        residual measured, and within the gate) counts."""
        panel = unmasked_view(described)
        found = match_self(panel, self.ratio, self.min_distance, self.min_inliers, border_band=self.border_band)
        if found.matrix is None or not turns(found.matrix) or not np.isfinite(found.residual):
            return keypoints
        found = self.checked(found, panel)
        return keypoints if found.matrix is None else found

    def residual_gate(self, panel: Any) -> float:
        """The most grey levels (median) by which a copy may differ from its resampled source."""
        relative = self.copy_residual_noise_factor * noise_sigma(panel.gray) if self.copy_residual_noise_factor else 0.0
        return max(self.max_copy_residual, min(self.copy_residual_ceiling, relative))

    def dense_fallback(self, panel: Any, keypoints: SelfMatch) -> SelfMatch:
        """The dense block match of a panel whose keypoints found no copy (`keypoints` when it finds none)."""
        gap = self.dense_min_distance * max(panel.shape)
        threshold = max(2.0, 0.01 * max(panel.shape))
        matrix, count = dense_self_match(panel, gap, threshold, self.dense_radius, self.dense_grid)
        if matrix is None or count < self.dense_min_inliers:
            return keypoints
        if is_pure_shift(matrix):
            return missed(keypoints, "dense match is a pure shift: a repeated structure")
        found = self_match_regions(panel, matrix, count, gap, method="dense", border_band=self.border_band)
        if not found.target.any() or found.residual > self.dense_max_residual:
            return missed(keypoints, "dense match not reproduced by resampling")
        if found.overlap > self.max_copy_overlap:
            return missed(keypoints, "the copies overlap: a repeated structure")
        return found

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        heads, maps = [], []
        for single in image:
            logit, logits, _ = self.locate(to_uint8(single))
            heads.append(logit)
            maps.append(torch.from_numpy(logits))
        mask_logit = torch.stack(maps)[:, None].to(image.device)
        return {"mask_logit": mask_logit, "head_logit": torch.tensor(heads, dtype=torch.float32, device=image.device)}
