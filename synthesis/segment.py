"""Object masks without a learned segmenter.

THEMIS segments splicing objects with Otsu thresholding and copy-move objects with SAM. SAM weights
cannot be downloaded here, so copy-move uses Felzenszwalb graph segmentation merged with the Otsu
components instead; both are refined with the same opening/closing/hole filling the seeds apply.
"""

from __future__ import annotations

import cv2
import numpy as np
from scipy import ndimage
from skimage.segmentation import felzenszwalb

from synthesis.common import as_rgb_uint8

__all__ = ["largest_component", "refine_mask", "otsu_object_mask", "object_candidates"]


def largest_component(mask: np.ndarray) -> np.ndarray:
    """The largest 8-connected component of a binary mask (empty in, empty out)."""
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    if n <= 1:
        return np.zeros(mask.shape, dtype=bool)
    best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    return labels == best


def refine_mask(mask: np.ndarray, kernel_size: int = 5) -> np.ndarray:
    """Close (fill gaps), open (drop specks), fill holes: the seeds' mask clean-up."""
    kernel = np.ones((kernel_size, kernel_size), np.uint8)
    m = cv2.morphologyEx(mask.astype(np.uint8), cv2.MORPH_CLOSE, kernel)
    m = cv2.morphologyEx(m, cv2.MORPH_OPEN, kernel)
    return ndimage.binary_fill_holes(m)


def otsu_object_mask(image: np.ndarray) -> np.ndarray:
    """Foreground object of a panel (THEMIS A.3.2): Otsu, 5x5 close then open, largest component.

    Otsu splits the grey levels in two but does not say which side is the object; the side that
    touches the frame border less is taken as foreground (backgrounds surround objects), ties going
    to the smaller side.
    """
    grey = cv2.cvtColor(as_rgb_uint8(image), cv2.COLOR_RGB2GRAY)
    _, binary = cv2.threshold(grey, 0, 1, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    binary = binary.astype(bool)

    def border_share(m: np.ndarray) -> float:
        edge = np.concatenate([m[0], m[-1], m[:, 0], m[:, -1]])
        return float(edge.mean())

    candidates = [binary, ~binary]
    candidates.sort(key=lambda m: (round(border_share(m), 2), m.mean()))
    return largest_component(refine_mask(candidates[0]))


def object_candidates(image: np.ndarray, min_fraction: float = 0.10, max_fraction: float = 0.60) -> list[np.ndarray]:
    """Plausible objects covering `min_fraction`..`max_fraction` of the frame, most object-like first.

    Object-like = compact and clear of the frame border (segments along the border are usually
    background). Stand-in for SAM's automatic masks: Felzenszwalb segments (scale tied to the image size) and both
    Otsu sides, each refined and reduced to its largest component; near-duplicates are dropped.
    """
    rgb = as_rgb_uint8(image)
    h, w = rgb.shape[:2]
    area = float(h * w)
    scale = max(100.0, 0.002 * area)
    segments = felzenszwalb(rgb, scale=scale, sigma=0.8, min_size=int(0.02 * area))
    raw = [segments == s for s in np.unique(segments)]
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    _, binary = cv2.threshold(grey, 0, 1, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    raw += [binary.astype(bool), ~binary.astype(bool)]

    out: list[np.ndarray] = []
    scores: list[float] = []
    for m in raw:
        m = largest_component(refine_mask(m))
        frac = m.mean()
        if not min_fraction <= frac <= max_fraction:
            continue
        if any((m & o).sum() / (m | o).sum() > 0.9 for o in out):
            continue
        contours, _ = cv2.findContours(m.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        perimeter = sum(cv2.arcLength(c, True) for c in contours)
        compact = 4 * np.pi * m.sum() / max(perimeter, 1.0) ** 2  # isoperimetric compactness
        border = np.concatenate([m[0], m[-1], m[:, 0], m[:, -1]]).mean()  # backgrounds touch the frame
        scores.append(compact / (1.0 + 10.0 * border))
        out.append(m)
    order = np.argsort(scores)[::-1]
    return [out[i] for i in order]
