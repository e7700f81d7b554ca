"""Low-texture fallback: a panel's copy found by normalized correlation under the 8 flips / quarter
turns at a few scales, where blots and plots give SIFT too few keypoints to fit a map."""

from __future__ import annotations

import cv2
import numpy as np

from detectors.matching import Panel, homogeneous

DIHEDRAL = tuple((flip, k) for flip in (False, True) for k in range(4))  # the 8 flips / quarter turns


def dihedral(image: np.ndarray, flip: bool, quarter_turns: int) -> np.ndarray:
    out = image[:, ::-1] if flip else image
    return np.ascontiguousarray(np.rot90(out, quarter_turns))


def dihedral_to_original(shape: tuple[int, int], flip: bool, quarter_turns: int) -> np.ndarray:
    """3 x 3 map from pixel coordinates of `dihedral(image)` back to those of `image` (h x w)."""
    height, width = shape
    xs = dihedral(np.tile(np.arange(width, dtype=np.float32), (height, 1)), flip, quarter_turns)
    ys = dihedral(np.tile(np.arange(height, dtype=np.float32)[:, None], (1, width)), flip, quarter_turns)
    h, w = xs.shape
    source = np.float32([[0, 0], [w - 1, 0], [0, h - 1]])
    target = np.float32([[xs[v, u], ys[v, u]] for u, v in source.astype(int)])
    return homogeneous(cv2.getAffineTransform(source, target))


def correlation_search(
    panel_a: Panel, panel_b: Panel, side: int = 128, scales: tuple[float, ...] = (1.0, 0.8, 1.25), crop: float = 0.7
) -> tuple[np.ndarray | None, float]:
    """Low-texture fallback: the central part of B, under each of the 8 flips / quarter turns and a
    few scales, searched in A by normalized correlation. Returns (A -> B map, peak correlation)."""
    if min(panel_a.shape) < 8 or min(panel_b.shape) < 8:
        return None, 0.0
    factor = side / max(panel_a.shape)
    small_a = cv2.resize(panel_a.gray, None, fx=factor, fy=factor, interpolation=cv2.INTER_AREA)
    best: tuple[float, np.ndarray | None] = (0.0, None)
    for flip, turns in DIHEDRAL:
        turned = dihedral(panel_b.gray, flip, turns)
        back = dihedral_to_original(panel_b.shape, flip, turns)
        for scale in scales:
            f_b = factor * scale
            small_b = cv2.resize(turned, None, fx=f_b, fy=f_b, interpolation=cv2.INTER_AREA)
            th, tw = max(4, int(small_b.shape[0] * crop)), max(4, int(small_b.shape[1] * crop))
            if th > small_a.shape[0] or tw > small_a.shape[1]:
                continue
            oy, ox = (small_b.shape[0] - th) // 2, (small_b.shape[1] - tw) // 2
            template = small_b[oy : oy + th, ox : ox + tw]
            if template.std() < 1.0:
                continue
            scores = cv2.matchTemplate(small_a, template, cv2.TM_CCOEFF_NORMED)
            _, peak, _, (x0, y0) = cv2.minMaxLoc(scores)
            if peak > best[0]:
                # A_work -> small A -> small turned B (shift) -> turned B (1 / f_b) -> B.
                to_small = np.diag([factor, factor, 1.0])
                shift = np.array([[1, 0, ox - x0], [0, 1, oy - y0], [0, 0, 1.0]])
                unscale = np.diag([1 / f_b, 1 / f_b, 1.0])
                best = (float(peak), (back @ unscale @ shift @ to_small)[:2])
    return best[1], best[0]
