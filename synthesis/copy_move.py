"""Copy-move and object-removal forgeries within one panel (THEMIS App. A.3.3, inpainting).

Copy-move duplicates an object inside its own image; the label is the pasted region only (the
original stays authentic content). Segmentation: THEMIS uses SAM, which cannot be loaded offline, so
objects come from `synthesis.segment.object_candidates` (Felzenszwalb graph segments + Otsu sides,
refined with opening/closing/hole filling), filtered to 10-60 % of the frame as in the seed.

By default the copy is a pure translation, as in the seed's pipeline: every copied pixel is an exact
duplicate, and only the feathered seam differs locally. `scale` and `rotation` resample the copy
instead (THEMIS's own prompt names shifted, rotated and scaled copies), which leaves the
interpolation trace that real copy-move edits in image editors usually carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from synthesis.common import as_bool_mask, as_rgb_uint8, composite, inner_alpha, random_ellipse
from synthesis.segment import largest_component, object_candidates

__all__ = ["ForgeryResult", "farthest_grid_position", "copy_move", "content_share", "inpaint_region", "WARP_KERNELS"]

WARP_KERNELS = {
    "nearest": cv2.INTER_NEAREST,
    "bilinear": cv2.INTER_LINEAR,
    "bicubic": cv2.INTER_CUBIC,
    "lanczos": cv2.INTER_LANCZOS4,
}


# A pixel carries content when its grey level is more than this from the image's background level.
CONTENT_LEVEL = 8


def content_pixels(image: np.ndarray) -> np.ndarray:
    """Where `image` carries content: pixels more than `CONTENT_LEVEL` grey levels from its
    background level (its commonest grey level)."""
    grey = cv2.cvtColor(as_rgb_uint8(image), cv2.COLOR_RGB2GRAY).astype(np.int16)
    background = int(np.bincount(grey.ravel(), minlength=256).argmax())
    return np.abs(grey - background) > CONTENT_LEVEL


def content_share(image: np.ndarray, mask: np.ndarray) -> float:
    """The share of `mask`'s pixels that carry content (`content_pixels`): near 0 for a blank margin
    or the empty plot area of a chart, near 1 for a bar or a cell, whether uniform or textured."""
    region = content_pixels(image)[mask]
    return float(region.mean()) if region.size else 0.0


@dataclass
class ForgeryResult:
    image: np.ndarray  # uint8 H x W x 3
    mask: np.ndarray  # bool H x W, every changed pixel is inside
    meta: dict[str, Any] = field(default_factory=dict)


def farthest_grid_position(
    bbox: tuple[int, int, int, int], frame: tuple[int, int], rng: np.random.Generator, jitter: float = 0.5
) -> tuple[int, int]:
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
    scale: tuple[float, float] = (1.0, 1.0),
    rotation: tuple[float, float] = (0.0, 0.0),
    interpolation: str = "bilinear",
    min_content: float = 0.1,
) -> ForgeryResult:
    """Copy an object to the farthest grid position of the same image; mask = the pasted region.

    The object is `object_mask` or one of `object_candidates` (chosen by `rng`, compact ones more
    likely). With `scale` (factor) or `rotation` (degrees) ranges other than the identity, the copy
    is scaled and rotated about its centre by values drawn from them and resampled with
    `interpolation` (nearest, bilinear, bicubic, lanczos). Candidates with under `min_content` of
    their pixels carrying content (`content_share`) are left out, as the seed's quality control
    excludes copies of blank background. Raises ValueError when no object fits
    `min_fraction`..`max_fraction` with that content, or when the frame leaves no room to move it by
    at least `min_shift` px.
    Kept in one piece: the forgery recipe's steps in order (copy, transform, paste, mask), as the seed paper lists them.
    """
    if interpolation not in WARP_KERNELS:
        raise ValueError(f"interpolation must be one of {sorted(WARP_KERNELS)}, got {interpolation!r}")
    rgb = as_rgb_uint8(image)
    h, w = rgb.shape[:2]
    if object_mask is not None:
        mask = largest_component(as_bool_mask(object_mask, (h, w)))
        if not min_fraction <= mask.mean() <= max_fraction:
            raise ValueError(f"object covers {mask.mean():.3f} of the frame; expected {min_fraction}..{max_fraction}")
    else:
        candidates = object_candidates(rgb, min_fraction, max_fraction)
        content = content_pixels(rgb)  # once for all candidates: `content_share` of each
        candidates = [c for c in candidates if content[c].mean() >= min_content]
        if not candidates:
            raise ValueError(f"no object with content covering {min_fraction}..{max_fraction} of the frame")
        weights = 1.0 / np.arange(1, len(candidates) + 1)
        mask = candidates[int(rng.choice(len(candidates), p=weights / weights.sum()))]

    ys, xs = np.nonzero(mask)
    x0, y0 = int(xs.min()), int(ys.min())
    bw, bh = int(xs.max()) - x0 + 1, int(ys.max()) - y0 + 1
    meta: dict[str, Any] = {"operation": "copy_move", "source_bbox": [x0, y0, x0 + bw, y0 + bh]}
    if tuple(scale) == (1.0, 1.0) and tuple(rotation) == (0.0, 0.0):
        tx, ty = farthest_grid_position((x0, y0, bw, bh), (h, w), rng)
        if max(abs(tx - x0), abs(ty - y0)) < min_shift:
            raise ValueError("object spans the frame; no room to move it")
        pasted = np.zeros((h, w), dtype=bool)
        pasted[ty : ty + bh, tx : tx + bw] = mask[y0 : y0 + bh, x0 : x0 + bw]
        moved = rgb.copy()
        moved[ty : ty + bh, tx : tx + bw] = rgb[y0 : y0 + bh, x0 : x0 + bw]
        meta["target_bbox"] = [tx, ty, tx + bw, ty + bh]
    else:
        moved, pasted = _resampled_copy(
            rgb, mask, (x0, y0, bw, bh), rng, scale, rotation, interpolation, min_shift, meta
        )
    width = float(rng.uniform(*feather))
    out = composite(moved, rgb, inner_alpha(pasted, width))
    meta.update(
        {
            "area_ratio": round(float(mask.mean()), 6),
            "feather": round(width, 3),
            "segmentation": "felzenszwalb+otsu" if object_mask is None else "given",
        }
    )
    return ForgeryResult(out, pasted, meta)


def _resampled_copy(
    rgb: np.ndarray,
    mask: np.ndarray,
    bbox: tuple[int, int, int, int],
    rng: np.random.Generator,
    scale: tuple[float, float],
    rotation: tuple[float, float],
    interpolation: str,
    min_shift: int,
    meta: dict[str, Any],
) -> tuple[np.ndarray, np.ndarray]:
    """The whole frame warped so the scaled, rotated object lands at the farthest grid position, and
    the pasted region (the warped object mask). Records the drawn values and target box in `meta`."""
    h, w = mask.shape
    x0, y0, bw, bh = bbox
    factor, angle = float(rng.uniform(*scale)), float(rng.uniform(*rotation))
    centre = (x0 + (bw - 1) / 2.0, y0 + (bh - 1) / 2.0)
    matrix = cv2.getRotationMatrix2D(centre, angle, factor)
    ys, xs = np.nonzero(mask)
    landed = np.stack([xs, ys, np.ones_like(xs)], axis=1).astype(np.float64) @ matrix.T
    low, high = np.floor(landed.min(axis=0) + 1e-6), np.ceil(landed.max(axis=0) - 1e-6)  # float noise
    nx0, ny0 = int(low[0]), int(low[1])
    nbw, nbh = int(high[0]) - nx0 + 1, int(high[1]) - ny0 + 1
    if nbw > w or nbh > h:
        raise ValueError(f"the object scaled by {factor:.2f} and rotated by {angle:.1f} degrees does not fit the frame")
    tx, ty = farthest_grid_position((nx0, ny0, nbw, nbh), (h, w), rng)
    if max(abs(tx + (nbw - 1) / 2.0 - centre[0]), abs(ty + (nbh - 1) / 2.0 - centre[1])) < min_shift:
        raise ValueError("object spans the frame; no room to move it")
    matrix[:, 2] += (tx - nx0, ty - ny0)
    moved = cv2.warpAffine(rgb, matrix, (w, h), flags=WARP_KERNELS[interpolation], borderMode=cv2.BORDER_REFLECT)
    pasted = cv2.warpAffine(mask.astype(np.float32), matrix, (w, h), flags=cv2.INTER_LINEAR) >= 0.5
    if not pasted.any():
        raise ValueError(f"the object scaled by {factor:.2f} vanished")
    meta.update(
        {
            "target_bbox": [tx, ty, tx + nbw, ty + nbh],
            "scale": round(factor, 4),
            "rotation": round(angle, 3),
            "interpolation": interpolation,
        }
    )
    return moved, pasted


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
    meta = {"operation": "inpainting", "method": method, "region": source, "area_ratio": round(float(region.mean()), 6)}
    return ForgeryResult(out, region, meta)
