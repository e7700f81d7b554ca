"""Low-texture fallback: a panel's copy found by normalized correlation under the 8 flips / quarter
turns at a few scales, where blots and plots give SIFT too few keypoints to fit a map."""

from __future__ import annotations

import cv2
import numpy as np

from detectors.matching import Panel, homogeneous

DIHEDRAL = tuple((flip, k) for flip in (False, True) for k in range(4))  # the 8 flips / quarter turns
MAX_CACHED_FACTORS = 4  # a panel keeps its turned copies for this many partner sizes (about 1 MB each)


def dihedral(image: np.ndarray, flip: bool, quarter_turns: int) -> np.ndarray:
    out = image[:, ::-1] if flip else image
    return np.ascontiguousarray(np.rot90(out, quarter_turns))


def dihedral_to_original(shape: tuple[int, int], flip: bool, quarter_turns: int) -> np.ndarray:
    """3 x 3 map from pixel coordinates of `dihedral(image)` back to those of `image` (h x w): the
    corners of the turned image are corners of the image, found by turning a 2 x 2 table of them."""
    height, width = shape
    corners = np.array([[[0, 0], [width - 1, 0]], [[0, height - 1], [width - 1, height - 1]]], np.float32)
    turned = np.stack([dihedral(corners[..., axis], flip, quarter_turns) for axis in (0, 1)], axis=-1)
    h, w = (height, width) if quarter_turns % 2 == 0 else (width, height)
    source = np.float32([[0, 0], [w - 1, 0], [0, h - 1]])
    target = np.float32([turned[0, 0], turned[0, 1], turned[1, 0]])
    return homogeneous(cv2.getAffineTransform(source, target))


def turned_templates(
    panel: Panel, factor: float, scales: tuple[float, ...], crop: float
) -> list[tuple[np.ndarray, np.ndarray, int, int]]:
    """The central part of `panel` under each flip / quarter turn and scale, shrunk by `factor`:
    (template, 3 x 3 map from the shrunk turned copy to the panel's pixels, x and y offset of the
    template in that copy), in the order they are searched; flat templates (nothing to correlate)
    are left out. Cached on the panel: a panel in many pairs is turned once."""
    key = f"turned:{factor:.6f}:{scales}:{crop}"
    if key in panel.cache:
        return panel.cache[key]
    templates = []
    for flip, turns in DIHEDRAL:
        turned = dihedral(panel.gray, flip, turns)
        back = dihedral_to_original(panel.shape, flip, turns)
        for scale in scales:
            f_b = factor * scale
            small = cv2.resize(turned, None, fx=f_b, fy=f_b, interpolation=cv2.INTER_AREA)
            th, tw = max(4, int(small.shape[0] * crop)), max(4, int(small.shape[1] * crop))
            oy, ox = (small.shape[0] - th) // 2, (small.shape[1] - tw) // 2
            template = np.ascontiguousarray(small[oy : oy + th, ox : ox + tw])
            if template.std() >= 1.0:
                templates.append((template, back @ np.diag([1 / f_b, 1 / f_b, 1.0]), ox, oy))
    kept = [k for k in panel.cache if k.startswith("turned:")]
    for stale in kept[: max(0, len(kept) - MAX_CACHED_FACTORS + 1)]:  # panels of many sizes: keep the latest
        del panel.cache[stale]
    panel.cache[key] = templates
    return templates


def correlation_search(
    panel_a: Panel, panel_b: Panel, side: int = 128, scales: tuple[float, ...] = (1.0, 0.8, 1.25), crop: float = 0.7
) -> tuple[np.ndarray | None, float]:
    """Low-texture fallback: the central part of B, under each of the 8 flips / quarter turns and a
    few scales, searched in A by normalized correlation. Returns (A -> B map, peak correlation)."""
    if min(panel_a.shape) < 8 or min(panel_b.shape) < 8:
        return None, 0.0
    factor = side / max(panel_a.shape)
    key = f"small:{factor:.6f}"
    if key not in panel_a.cache:
        panel_a.cache[key] = cv2.resize(panel_a.gray, None, fx=factor, fy=factor, interpolation=cv2.INTER_AREA)
    small_a = panel_a.cache[key]
    best: tuple[float, np.ndarray | None] = (0.0, None)
    for template, back, ox, oy in turned_templates(panel_b, factor, scales, crop):
        th, tw = template.shape
        if th > small_a.shape[0] or tw > small_a.shape[1]:
            continue
        scores = cv2.matchTemplate(small_a, template, cv2.TM_CCOEFF_NORMED)
        _, peak, _, (x0, y0) = cv2.minMaxLoc(scores)
        if peak > best[0]:
            # A_work -> small A -> small turned B (shift) -> turned B -> B (`back`).
            to_small = np.diag([factor, factor, 1.0])
            shift = np.array([[1, 0, ox - x0], [0, 1, oy - y0], [0, 0, 1.0]])
            best = (float(peak), (back @ shift @ to_small)[:2])
    return best[1], best[0]
