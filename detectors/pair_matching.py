"""Matching a pair of panels, from the primitives of `detectors.matching`.

`match_pair` matches A with B and with B's mirror, fits and decomposes the map, finds the shared
content and its colours, and falls back on the correlation search for low-texture panels;
`match_under` describes a pair under a map chosen elsewhere. One panel matched with itself
(copy-move) is `detectors.self_matching`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from detectors.low_texture import correlation_search
from detectors.matching import (
    Geometry,
    Panel,
    fit_similarity,
    homogeneous,
    map_mask_to_b,
    mirror_matrix,
    mutual_matches,
    shared_region,
)
from detectors.photometric import photometric_fit


@dataclass
class PairMatch:
    """What matching found for one pair; `matrix` maps A's original pixels onto B's."""

    method: str  # "sift" | "correlation" | "none"
    matrix: np.ndarray | None
    geometry: Geometry | None
    n_matches: int
    n_inliers: int
    inlier_ratio: float
    spread: float  # area of the inliers' bounding box, as a fraction of A
    agreement: float
    correlation: float
    content: float
    overlap_a: float
    overlap_b: float
    peak: float  # correlation of the low-texture search (0 when not run)
    photometric: dict[str, float]
    mask_a: np.ndarray  # bool, A's original size
    mask_b: np.ndarray
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def features(self) -> np.ndarray:
        """The match statistics the score model reads."""
        geometry = self.geometry
        scale = abs(np.log(geometry.scale)) if geometry else 0.0
        return np.asarray(
            [
                np.log1p(self.n_inliers),
                self.inlier_ratio,
                np.log1p(self.n_matches),
                self.spread,
                self.agreement,
                self.correlation,
                min(self.overlap_a, self.overlap_b),
                max(self.overlap_a, self.overlap_b),
                self.peak,
                float(self.method == "correlation"),
                min(scale, 2.0),
                self.content,
            ],
            dtype=np.float64,
        )

    def parameter_features(self) -> np.ndarray:
        """What says whether colours were changed between the copies."""
        p = self.photometric
        return np.asarray(
            [
                p["gain_dev"],
                p["bias"] / 255,
                p["hue_shift"] / 90,
                p["saturation_log_ratio"],
                p["abs_diff"] / 255,
                p["residual"] / 255,
            ],
            dtype=np.float64,
        )


FEATURE_NAMES = (
    "log_inliers",
    "inlier_ratio",
    "log_matches",
    "spread",
    "agreement",
    "correlation",
    "overlap_min",
    "overlap_max",
    "peak",
    "fallback",
    "log_scale",
    "content",
)
MATCHED_POINTS_KEPT = 40  # inlier keypoints a pair keeps, for people to see the match
PARAMETER_FEATURE_NAMES = ("gain_dev", "bias", "hue_shift", "saturation_log_ratio", "abs_diff", "residual")


def to_original(matrix: np.ndarray, factor_a: float, factor_b: float) -> np.ndarray:
    """A working -> B working map as A original -> B original."""
    return (np.diag([1 / factor_b, 1 / factor_b, 1.0]) @ homogeneous(matrix) @ np.diag([factor_a, factor_a, 1.0]))[:2]


def to_working(matrix: np.ndarray, factor_a: float, factor_b: float) -> np.ndarray:
    """An A original -> B original map as A working -> B working (`to_original` undone)."""
    return to_original(matrix, 1 / factor_a, 1 / factor_b)


def resize_mask(mask: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    if mask.shape == tuple(shape):
        return mask
    return cv2.resize(mask.astype(np.uint8), (shape[1], shape[0]), interpolation=cv2.INTER_NEAREST) > 0


def no_match(panel_a: Panel, panel_b: Panel, reason: str, **stats: Any) -> PairMatch:
    values = {"n_matches": 0, "n_inliers": 0, "peak": 0.0, **stats}
    return PairMatch(
        "none",
        None,
        None,
        values["n_matches"],
        values["n_inliers"],
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        values["peak"],
        photometric_fit(panel_a, panel_b, np.eye(2, 3), np.zeros(panel_a.shape, bool)),
        np.zeros(panel_a.original_shape, bool),
        np.zeros(panel_b.original_shape, bool),
        reason,
    )


def match_pair(
    panel_a: Panel,
    panel_b: Panel,
    ratio: float = 0.8,
    min_inliers: int = 8,
    ransac_threshold: float = 0.01,
    min_peak: float = 0.6,
    fallback_keypoints: int | None = None,
) -> PairMatch:
    """Match A with B and with B's mirror; fit, decompose, find the shared content and its colours.

    `ransac_threshold` is a fraction of the working size's longer side. Below `min_inliers` SIFT
    inliers the low-texture correlation search is tried; its peak must reach `min_peak`. With
    `fallback_keypoints` it is tried only when a panel has fewer keypoints than that: panels SIFT
    describes well gain nothing from it (their copies have inliers), and most pairs of a figure
    are such pairs with nothing shared, where the search is the largest cost.

    The direct and mirrored fits and the fallback choose the map; `match_under` describes the
    pair under it.
    """
    threshold = max(2.0, ransac_threshold * max(panel_a.shape + panel_b.shape))
    best: tuple[int, np.ndarray | None, np.ndarray, np.ndarray, int] = (0, None, np.zeros(0, bool), np.zeros((0, 2)), 0)
    mirror_points, mirror_descriptors = panel_b.mirrored()
    for mirrored, points_b, desc_b in (
        (False, panel_b.points, panel_b.descriptors),
        (True, mirror_points, mirror_descriptors),
    ):
        ia, ib = mutual_matches(panel_a.descriptors, desc_b, ratio)
        matrix, inliers = fit_similarity(panel_a.points[ia], points_b[ib], threshold)
        if matrix is not None and inliers.sum() > best[0]:
            if mirrored:
                matrix = (mirror_matrix(panel_b.shape[1]) @ homogeneous(matrix))[:2]
            best = (int(inliers.sum()), matrix, inliers, panel_a.points[ia][inliers], len(ia))
    n_inliers, matrix, inliers, inlier_points, n_matches = best
    method, peak = "sift", 0.0
    if n_inliers < min_inliers:
        described = min(len(panel_a.points), len(panel_b.points))
        if fallback_keypoints is not None and described >= fallback_keypoints:
            return no_match(panel_a, panel_b, "no consistent matches", n_matches=n_matches, n_inliers=n_inliers)
        if not len(panel_a.points) and not len(panel_b.points) and panel_a.texture < 0.01 and panel_b.texture < 0.01:
            return no_match(panel_a, panel_b, "no keypoints and no texture in either panel", n_matches=n_matches)
        fallback, peak = correlation_search(panel_a, panel_b)
        if fallback is None or peak < min_peak:
            reason = (
                "no keypoints in panel " + ("A" if not len(panel_a.points) else "B")
                if not len(panel_a.points) or not len(panel_b.points)
                else "no consistent matches"
            )
            return no_match(panel_a, panel_b, reason, n_matches=n_matches, n_inliers=n_inliers, peak=peak)
        matrix, method, inlier_points = fallback, "correlation", np.zeros((0, 2))
    return match_under(panel_a, panel_b, matrix, method, n_matches, n_inliers, inlier_points, peak)


def match_under(
    panel_a: Panel,
    panel_b: Panel,
    matrix: np.ndarray,
    method: str,
    n_matches: int = 0,
    n_inliers: int = 0,
    inlier_points: np.ndarray | None = None,
    peak: float = 0.0,
) -> PairMatch:
    """The pair described under a map already chosen (A working -> B working px): its shared
    content in both panels, their colours and the match statistics. `match_pair` chooses the map
    from keypoints or the correlation search; a collection search may bring its own."""
    inlier_points = np.zeros((0, 2)) if inlier_points is None else inlier_points
    region = shared_region(panel_a, panel_b, matrix)
    mask_b = map_mask_to_b(region.mask_a, matrix, panel_b.shape)
    spread = 0.0
    if len(inlier_points) >= 2:
        extent = inlier_points.max(0) - inlier_points.min(0)
        spread = float(extent[0] * extent[1] / (panel_a.shape[0] * panel_a.shape[1]))
    original = to_original(matrix, panel_a.factor, panel_b.factor)
    return PairMatch(
        method,
        original,
        Geometry.of(original),  # of the panels as they are: two sizes at work would read as scaling
        n_matches,
        n_inliers,
        n_inliers / max(1, n_matches),
        spread,
        region.agreement,
        region.correlation,
        region.content,
        float(region.mask_a.mean()),
        float(mask_b.mean()),
        peak,
        photometric_fit(panel_a, panel_b, matrix, region.mask_a),
        resize_mask(region.mask_a, panel_a.original_shape),
        resize_mask(mask_b, panel_b.original_shape),
        extra={"points_a": inlier_points[:MATCHED_POINTS_KEPT] / panel_a.factor},  # A's original pixels
    )
