"""Copy-move and object-removal forgeries within one panel (THEMIS App. A.3.3, inpainting).

Copy-move duplicates an object inside its own image; the label is the pasted region only (the
original stays authentic content). Segmentation: THEMIS uses SAM, which cannot be loaded offline, so
objects come from `synthesis.segment.object_candidates` (Felzenszwalb graph segments + Otsu sides,
refined with opening/closing/hole filling), filtered to 10-60 % of the frame as in the seed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from synthesis.common import as_bool_mask, as_rgb_uint8, composite, inner_alpha, random_ellipse
from synthesis.segment import largest_component, object_candidates

__all__ = ["ForgeryResult", "farthest_grid_position", "copy_move", "inpaint_region"]


@dataclass
class ForgeryResult:
    image: np.ndarray  # uint8 H x W x 3
    mask: np.ndarray  # bool H x W, every changed pixel is inside
    meta: dict[str, Any] = field(default_factory=dict)


def farthest_grid_position(bbox: tuple[int, int, int, int], frame: tuple[int, int],
                           rng: np.random.Generator, jitter: float = 0.5) -> tuple[int, int]:
    """Top-left (x, y) for the copy: the grid position whose centroid is farthest from the source's.

    `bbox` is (x0, y0, w, h) and `frame` (height, width). The copy's centroid moves with its bbox, so
    the farthest centroid is the largest bbox shift.

    Grid step = max(20, min(w, h) / 2) of the object's bbox (THEMIS); the chosen position is jittered
    by up to `jitter` x step in each direction and clamped so the object stays inside the frame.
    """
    x0, y0, bw, bh = bbox
    height, width = frame
    step = max(20, min(bw, bh) // 2)
    xs = sorted(set(range(0, width - bw + 1, step)) | {width - bw})
    ys = sorted(set(range(0, height - bh + 1, step)) | {height - bh})
    best, best_d = (x0, y0), -1.0
    for y in ys:
        for x in xs:
            d = float((x - x0) ** 2 + (y - y0) ** 2)
            if d > best_d:
                best, best_d = (x, y), d
    j = int(jitter * step)
    x = int(np.clip(best[0] + rng.integers(-j, j + 1), 0, width - bw))
    y = int(np.clip(best[1] + rng.integers(-j, j + 1), 0, height - bh))
    return x, y


def copy_move(
    image: np.ndarray,
    rng: np.random.Generator,
    *,
    object_mask: np.ndarray | None = None,
    min_fraction: float = 0.10,
    max_fraction: float = 0.60,
    min_shift: int = 8,
    feather: tuple[float, float] = (1.5, 4.0),
) -> ForgeryResult:
    """Copy an object to the farthest grid position of the same image; mask = the pasted region.

    The object is `object_mask` or one of `object_candidates` (chosen by `rng`, compact ones more
    likely). Raises ValueError when no object fits `min_fraction`..`max_fraction`, or when the frame
    leaves no room to move it by at least `min_shift` px.
    """
    rgb = as_rgb_uint8(image)
    h, w = rgb.shape[:2]
    if object_mask is not None:
        mask = largest_component(as_bool_mask(object_mask, (h, w)))
        if not min_fraction <= mask.mean() <= max_fraction:
            raise ValueError(f"object covers {mask.mean():.3f} of the frame; "
                             f"expected {min_fraction}..{max_fraction}")
    else:
        candidates = object_candidates(rgb, min_fraction, max_fraction)
        if not candidates:
            raise ValueError(f"no object covering {min_fraction}..{max_fraction} of the frame")
        weights = 1.0 / np.arange(1, len(candidates) + 1)
        mask = candidates[int(rng.choice(len(candidates), p=weights / weights.sum()))]

    ys, xs = np.nonzero(mask)
    x0, y0 = int(xs.min()), int(ys.min())
    bw, bh = int(xs.max()) - x0 + 1, int(ys.max()) - y0 + 1
    tx, ty = farthest_grid_position((x0, y0, bw, bh), (h, w), rng)
    if max(abs(tx - x0), abs(ty - y0)) < min_shift:
        raise ValueError("object spans the frame; no room to move it")

    pasted = np.zeros((h, w), dtype=bool)
    pasted[ty:ty + bh, tx:tx + bw] = mask[y0:y0 + bh, x0:x0 + bw]
    moved = rgb.copy()
    moved[ty:ty + bh, tx:tx + bw] = rgb[y0:y0 + bh, x0:x0 + bw]
    width = float(rng.uniform(*feather))
    out = composite(moved, rgb, inner_alpha(pasted, width))
    meta = {"operation": "copy_move", "source_bbox": [x0, y0, x0 + bw, y0 + bh],
            "target_bbox": [tx, ty, tx + bw, ty + bh], "area_ratio": round(float(mask.mean()), 6),
            "feather": round(width, 3), "segmentation": "felzenszwalb+otsu" if object_mask is None else "given"}
    return ForgeryResult(out, pasted, meta)


def inpaint_region(
    image: np.ndarray,
    rng: np.random.Generator,
    *,
    mask: np.ndarray | None = None,
    fraction: tuple[float, float] = (0.01, 0.08),
    method: str | None = None,
    radius: int = 5,
) -> ForgeryResult:
    """Object removal: fill a region from its surroundings with OpenCV inpainting.

    The region is `mask` or, by default, a smallish segmented object (1-8 % of the frame) or, when
    none exists, a random ellipse of that size. It is dilated by 3 px so object edges vanish too, and
    filled with `method` ("telea" or "ns"; random when None). cv2.inpaint only writes inside the
    mask, so the mask covers every changed pixel.
    """
    rgb = as_rgb_uint8(image)
    h, w = rgb.shape[:2]
    if mask is not None:
        region = as_bool_mask(mask, (h, w))
        source = "given"
    else:
        candidates = object_candidates(rgb, *fraction)
        if candidates:
            region = candidates[int(rng.integers(len(candidates)))]
            source = "segment"
        else:
            region = random_ellipse((h, w), rng, float(rng.uniform(*fraction)))
            source = "ellipse"
        region = cv2.dilate(region.astype(np.uint8), np.ones((7, 7), np.uint8)).astype(bool)
    if not region.any():
        raise ValueError("empty region: nothing to inpaint")
    if method is None:
        method = "telea" if rng.random() < 0.5 else "ns"
    flag = {"telea": cv2.INPAINT_TELEA, "ns": cv2.INPAINT_NS}.get(method)
    if flag is None:
        raise ValueError(f"method must be 'telea' or 'ns', got {method!r}")
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    filled = cv2.inpaint(bgr, region.astype(np.uint8) * 255, radius, flag)
    out = cv2.cvtColor(filled, cv2.COLOR_BGR2RGB)
    out[~region] = rgb[~region]
    meta = {"operation": "inpainting", "method": method, "region": source,
            "area_ratio": round(float(region.mean()), 6)}
    return ForgeryResult(out, region, meta)
