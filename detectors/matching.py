"""The matching core's primitives: what content two panels share and how it was transformed.

SIFT keypoints (OpenCV) with RootSIFT descriptors; mutual ratio-test matches between A and B and
between A and the mirror of B (SIFT is not mirror-invariant: the mirror's descriptors are a fixed
permutation of the original's, so a panel is described once); a RANSAC similarity fit
(`cv2.estimateAffinePartial2D`), decomposed into rotation, scale and flip; the photometric fit on
the warped overlap (`detectors.photometric`); and masks of the shared content in both panels (the
overlap where the warped panels agree by local correlation).

Panels with too little texture for keypoints (blots, plots) fall back on normalized correlation over
the eight flips / quarter rotations at a few scales. What every figure panel of a kind shares (axes,
tick labels, legends, scale bars, lettering) is masked before matching: thin rulings and small
uniform glyphs drop their keypoints and do not count as agreeing content. `detectors.pair_matching`
puts these together for a pair of panels and for copy-move inside one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import cv2
import numpy as np

from detectors.figure_furniture import furniture_mask

# why a detector built on this matching has no ONNX export (`Detector.onnx_export_refusal`)
EXPORT_REFUSAL = (
    "it matches keypoints with OpenCV, which an ONNX graph cannot hold; score with its .ckpt (infer.py model=...ckpt)"
)
# Mirror (x -> -x) of a SIFT descriptor laid out 4 x 4 x 8 (row, column, orientation): in the
# keypoint's own frame the patch is reflected about its orientation axis (rows reversed) and every
# gradient orientation o becomes -o. Checked against descriptors computed on the mirrored image.
MIRROR_ORDER = np.arange(128).reshape(4, 4, 8)[::-1][:, :, (-np.arange(8)) % 8].reshape(-1)


@dataclass
class Panel:
    """One panel at working size with its keypoints, described once and reused for every pair."""

    rgb: np.ndarray  # uint8 h x w x 3, working size
    gray: np.ndarray  # float32 h x w
    factor: float  # working size / original size
    original_shape: tuple[int, int]
    points: np.ndarray  # (N, 2) float32, working coordinates
    descriptors: np.ndarray  # (N, 128) float32 RootSIFT, unit length
    furniture: np.ndarray  # bool h x w: rulings and glyphs (axes, labels, scale bars)
    texture: float  # fraction of pixels with local contrast
    # What a pair computes from this panel alone (the low-texture search's small turned copies),
    # kept so that a panel in many pairs computes it once.
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def shape(self) -> tuple[int, int]:
        return self.gray.shape[:2]

    def mirrored(self) -> tuple[np.ndarray, np.ndarray]:
        """Keypoints and descriptors of the horizontally mirrored panel, in its own coordinates."""
        points = self.points.copy()
        points[:, 0] = self.shape[1] - 1 - points[:, 0]
        return points, self.descriptors[:, MIRROR_ORDER]


def to_working_size(image: np.ndarray, max_side: int) -> tuple[np.ndarray, float]:
    """Shrink (never enlarge) so the longer side is at most `max_side`; returns (image, factor)."""
    height, width = image.shape[:2]
    factor = min(1.0, max_side / max(height, width))
    if factor < 1.0:
        size = (max(1, round(width * factor)), max(1, round(height * factor)))
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    return image, factor


def resized_to_side(gray: np.ndarray, side: int) -> np.ndarray:
    """`gray` shrunk (area) or enlarged (bicubic) so its longer side is `side`; itself when it is."""
    if side < max(gray.shape):
        return to_working_size(gray, side)[0]
    if side > max(gray.shape):
        enlarge = side / max(gray.shape)
        return cv2.resize(gray, None, fx=enlarge, fy=enlarge, interpolation=cv2.INTER_CUBIC)
    return gray


def describe_panel(
    image: np.ndarray,
    max_side: int = 512,
    n_features: int = 1000,
    mask_furniture: bool = True,
    sift: Any = None,
    min_keypoints: int = 100,
    detect_side: int | None = None,
    keep_unmasked: bool = False,
) -> Panel:
    """Keypoints and RootSIFT descriptors of an RGB uint8 panel at working size; a panel with fewer
    than `min_keypoints` is described again with a lower contrast threshold. `keep_unmasked` also
    keeps the keypoints on the furniture, for `unmasked_view`.

    `detect_side` (px) finds the keypoints on a copy resized to that longer side and scales their
    coordinates back to working size, where masks and colours are still measured. OpenCV's SIFT
    doubles its input first, so 256 px keeps the scales a 512 px panel's keypoints mostly come from
    at about a third of the cost; a copy enlarged (bicubic) gives small text and marks keypoints.
    """
    original_shape = image.shape[:2]
    rgb, factor = to_working_size(np.ascontiguousarray(image[..., :3]), max_side)
    gray_u8 = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    furniture = furniture_mask(gray_u8) if mask_furniture else np.zeros(gray_u8.shape, bool)
    detected = gray_u8 if detect_side is None else resized_to_side(gray_u8, detect_side)
    detector = sift if sift is not None else cv2.SIFT_create(nfeatures=n_features)
    keypoints, descriptors = detector.detectAndCompute(detected, None)
    if len(keypoints) < min_keypoints:  # faint texture (fundus, blots): ask for weaker extrema too
        faint = cv2.SIFT_create(nfeatures=n_features, contrastThreshold=0.01)
        keypoints, descriptors = faint.detectAndCompute(detected, None)
    if descriptors is None or not keypoints:
        points, descriptors = np.zeros((0, 2), np.float32), np.zeros((0, 128), np.float32)
    else:
        points = np.asarray([kp.pt for kp in keypoints], dtype=np.float32)
        if detected is not gray_u8:  # pixel centres of the resized copy back onto the working grid
            stretch = np.float32([gray_u8.shape[1] / detected.shape[1], gray_u8.shape[0] / detected.shape[0]])
            points = (points + 0.5) * stretch - 0.5
        descriptors = np.sqrt(descriptors / np.maximum(descriptors.sum(1, keepdims=True), 1e-7))  # RootSIFT
        descriptors = descriptors / np.maximum(np.linalg.norm(descriptors, axis=1, keepdims=True), 1e-7)
    descriptors = descriptors.astype(np.float32)
    inside = ~furniture[
        np.clip(points[:, 1].round().astype(int), 0, gray_u8.shape[0] - 1),
        np.clip(points[:, 0].round().astype(int), 0, gray_u8.shape[1] - 1),
    ]
    gray = gray_u8.astype(np.float32)
    local_var = cv2.blur(gray**2, (7, 7)) - cv2.blur(gray, (7, 7)) ** 2
    panel = Panel(
        rgb=rgb,
        gray=gray,
        factor=factor,
        original_shape=original_shape,
        points=points[inside],
        descriptors=descriptors[inside],
        furniture=furniture,
        texture=float(np.mean(local_var > 25.0)),
    )
    if keep_unmasked:
        panel.cache["unmasked"] = (points, descriptors)
    return panel


def unmasked_view(panel: Panel) -> Panel:
    """`panel` as `describe_panel(..., mask_furniture=False)` describes it, from the keypoints it
    kept (`keep_unmasked=True`): no second detection."""
    points, descriptors = panel.cache["unmasked"]
    return replace(panel, points=points, descriptors=descriptors, furniture=np.zeros_like(panel.furniture), cache={})


def mutual_matches(
    desc_a: np.ndarray, desc_b: np.ndarray, ratio: float = 0.8, forbidden: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (ia, ib) of mutual nearest neighbours that also pass Lowe's ratio test both ways.

    `forbidden` (bool, len(a) x len(b)) removes candidate pairs first (self-matching: a keypoint and
    its own neighbourhood).
    """
    if len(desc_a) < 2 or len(desc_b) < 2:
        return np.zeros(0, int), np.zeros(0, int)
    similarity = desc_a @ desc_b.T
    if forbidden is not None:
        similarity = np.where(forbidden, -1.0, similarity)
    # Unit descriptors: distance = sqrt(2 - 2 similarity), so the nearest is the most similar. The
    # ratio test needs the second best only where the nearest neighbours are mutual: a few rows
    # and columns, not the whole matrix.
    best_b, best_a = similarity.argmax(1), similarity.argmax(0)
    rows = np.flatnonzero(best_a[best_b] == np.arange(len(desc_a)))
    cols = best_b[rows]
    first = similarity[rows, cols]
    picked = np.arange(len(rows))
    in_rows = similarity[rows]
    in_rows[picked, cols] = -np.inf
    in_cols = similarity[:, cols]
    in_cols[rows, picked] = -np.inf

    def distance(values: np.ndarray) -> np.ndarray:
        return np.sqrt(np.maximum(2.0 - 2.0 * values, 0.0))

    nearest = distance(first)
    keep = (nearest < ratio * distance(in_rows.max(1, initial=-np.inf))) & (
        nearest < ratio * distance(in_cols.max(0, initial=-np.inf))
    )
    return rows[keep], cols[keep]


def fit_similarity(
    points_a: np.ndarray, points_b: np.ndarray, threshold: float
) -> tuple[np.ndarray | None, np.ndarray]:
    """RANSAC similarity (rotation, uniform scale, translation) mapping A points onto B points."""
    if len(points_a) < 3:
        return None, np.zeros(len(points_a), bool)
    matrix, inliers = cv2.estimateAffinePartial2D(
        points_a,
        points_b,
        method=cv2.RANSAC,
        ransacReprojThreshold=threshold,
        maxIters=2000,
        confidence=0.995,
        refineIters=10,
    )
    if matrix is None or inliers is None:
        return None, np.zeros(len(points_a), bool)
    return matrix, inliers.ravel().astype(bool)


def homogeneous(matrix: np.ndarray) -> np.ndarray:
    return np.vstack([matrix, [0.0, 0.0, 1.0]])


def mirror_matrix(width: int) -> np.ndarray:
    """x -> width - 1 - x, as a 3 x 3 matrix (its own inverse)."""
    return np.array([[-1.0, 0.0, width - 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])


@dataclass
class Geometry:
    """A 2 x 3 map from A to B decomposed as B = R(rotation) * scale * [mirror] * A + t."""

    rotation: float  # degrees in (-180, 180]
    scale: float
    flipped: bool

    @classmethod
    def of(cls, matrix: np.ndarray) -> "Geometry":
        linear = np.asarray(matrix, dtype=np.float64)[:, :2]
        flipped = bool(np.linalg.det(linear) < 0)
        if flipped:
            linear = linear @ np.diag([-1.0, 1.0])
        return cls(
            rotation=float(np.degrees(np.arctan2(linear[1, 0], linear[0, 0]))),
            scale=float(np.sqrt(abs(np.linalg.det(linear)))),
            flipped=flipped,
        )

    def operations(self, scale_tolerance: float = 0.06, angle_tolerance: float = 5.0) -> list[str]:
        """Fine geometric operations: rotate180, hflip, vflip, rotation (other angles), scaling."""
        ops = []
        angle = abs(self.rotation)
        near_zero, near_half = angle <= angle_tolerance, angle >= 180 - angle_tolerance
        if self.flipped:
            ops.append("hflip" if near_zero else "vflip" if near_half else "flip_rotation")
        elif near_half:
            ops.append("rotate180")
        elif not near_zero:
            ops.append("rotation")
        if abs(np.log(max(self.scale, 1e-6))) > np.log1p(scale_tolerance):
            ops.append("scaling")
        return ops


def warp_into_a(
    image_b: np.ndarray, matrix: np.ndarray, shape_a: tuple[int, int], interpolation: int = cv2.INTER_LINEAR
) -> np.ndarray:
    """B resampled on A's grid: pixel x of A gets B at matrix @ x (matrix maps A onto B)."""
    return cv2.warpAffine(
        image_b,
        matrix,
        (shape_a[1], shape_a[0]),
        flags=interpolation | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=0,
    )


def local_std(gray: np.ndarray, window: int) -> np.ndarray:
    """Standard deviation of `gray` (float32) in a `window` x `window` box around each pixel: texture."""
    box = (window, window)
    return np.sqrt(np.maximum(cv2.blur(gray * gray, box) - cv2.blur(gray, box) ** 2, 0.0))


def local_correlation(a: np.ndarray, b: np.ndarray, window: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """Windowed normalized cross-correlation of two aligned grey images, and the lower local std."""
    box = (window, window)
    mean_a, mean_b = cv2.blur(a, box), cv2.blur(b, box)
    var_a = np.maximum(cv2.blur(a * a, box) - mean_a**2, 0)
    var_b = np.maximum(cv2.blur(b * b, box) - mean_b**2, 0)
    cov = cv2.blur(a * b, box) - mean_a * mean_b
    return cov / np.sqrt(var_a * var_b + 1e-3), np.sqrt(np.minimum(var_a, var_b))


def fill_holes(mask: np.ndarray) -> np.ndarray:
    """Fill the mask's interior holes (a shared region's flat parts show no correlation)."""
    padded = np.pad(mask.astype(np.uint8), 1)
    flood = padded.copy()
    cv2.floodFill(flood, None, (0, 0), 1)
    return mask | (flood[1:-1, 1:-1] == 0)


@dataclass
class Agreement:
    mask_a: np.ndarray  # bool, working size of A
    valid: np.ndarray  # bool: the part of A that B covers under the transform
    agreement: float  # fraction of textured, non-furniture overlap pixels whose windows correlate
    correlation: float  # median correlation over those pixels
    content: float  # textured, non-furniture overlap pixels, as a fraction of A


def shared_region(
    panel_a: Panel,
    panel_b: Panel,
    matrix: np.ndarray,
    min_correlation: float = 0.6,
    exclude_near: float = 0.0,
    flat_agrees: bool = True,
) -> Agreement:
    """Where A and B (warped onto A) show the same content: the overlap's pixels whose windows
    correlate, plus flat pixels of equal (gain/bias-corrected) level, cleaned and hole-filled.

    `exclude_near` (px): drop pixels that the transform moves by less (self-matching).
    `flat_agrees` False: only correlating textured pixels seed the region (flat parts inside it are
    still filled); inside one figure a shift maps flat background onto flat background.
    """
    shape = panel_a.shape
    warped = warp_into_a(panel_b.gray, matrix, shape)
    valid = warp_into_a(np.ones(panel_b.shape, np.uint8), matrix, shape, cv2.INTER_NEAREST) > 0
    valid = cv2.erode(valid.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    if exclude_near > 0:
        ys, xs = np.mgrid[0 : shape[0], 0 : shape[1]].astype(np.float32)
        moved_x = matrix[0, 0] * xs + matrix[0, 1] * ys + matrix[0, 2] - xs
        moved_y = matrix[1, 0] * xs + matrix[1, 1] * ys + matrix[1, 2] - ys
        valid &= np.hypot(moved_x, moved_y) >= exclude_near
    if valid.sum() < 50:
        empty = np.zeros(shape, bool)
        return Agreement(empty, valid, 0.0, 0.0, 0.0)
    correlation, spread = local_correlation(panel_a.gray, warped)
    textured = valid & (spread > 3.0)
    a_values, b_values = panel_a.gray[valid].astype(np.float64), warped[valid].astype(np.float64)
    gain, bias = least_squares_line(b_values, a_values)
    level = np.abs(cv2.blur(panel_a.gray, (7, 7)) - (gain * cv2.blur(warped, (7, 7)) + bias))
    agree = valid & (correlation > min_correlation) & textured
    if flat_agrees:
        agree |= valid & ~textured & (level < 10)
    agree = cv2.morphologyEx(agree.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    agree = cv2.morphologyEx(agree, cv2.MORPH_CLOSE, np.ones((9, 9), np.uint8)) > 0
    count, labels, stats, _ = cv2.connectedComponentsWithStats(agree.astype(np.uint8), connectivity=8)
    big = stats[:, cv2.CC_STAT_AREA] >= max(64, 0.01 * agree.size)
    big[0] = False
    mask = fill_holes(big[labels]) & valid
    content = textured & ~panel_a.furniture
    n_content = int(content.sum())
    agreeing = correlation[content] > min_correlation
    return Agreement(
        mask,
        valid,
        float(agreeing.mean()) if n_content else 0.0,
        float(np.median(correlation[content])) if n_content else 0.0,
        n_content / agree.size,
    )


def least_squares_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(gain, bias) of y ~ gain * x + bias, as `np.polyfit(x, y, 1)` gives them, in closed form
    (a tenth of its time on a panel's pixels); a flat x gives gain 1 and the mean offset."""
    if np.ptp(x) <= 1e-3:
        return 1.0, float(np.mean(y - x))
    x_mean, y_mean = float(x.mean()), float(y.mean())
    centred = x - x_mean
    gain = float(centred @ (y - y_mean) / (centred @ centred))
    return gain, y_mean - gain * x_mean


def map_mask_to_b(mask_a: np.ndarray, matrix: np.ndarray, shape_b: tuple[int, int]) -> np.ndarray:
    """A's mask carried onto B's grid by the A -> B map."""
    return cv2.warpAffine(mask_a.astype(np.uint8), matrix, (shape_b[1], shape_b[0]), flags=cv2.INTER_NEAREST) > 0
