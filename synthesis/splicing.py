"""Splicing forgeries (THEMIS App. A.3.2): an object from one panel composited onto a similar one.

Pairs are ranked by the seed's similarity so that spliced content is plausible (a detector should
learn seams and statistics, not "a cat on a micrograph"); the mask is the pasted object.

By default the donor has the host's history (the seed splices panels of one dataset as they are).
`donor_chains` gives the donor another processing history first (JPEG, resampling, denoising, blur;
the chain names of `datamodules.io.apply_chain`), as a splice from another camera or file has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Sequence

import cv2
import numpy as np

from datamodules.io import apply_chain
from synthesis.common import as_bool_mask, as_rgb_uint8, composite, inner_alpha
from synthesis.segment import otsu_object_mask

__all__ = ["SpliceResult", "pair_similarity", "rank_pairs", "splice", "splice_both_ways"]

_SIM_SIZE = 224
_C1, _C2 = 0.01**2, 0.03**2


@dataclass
class SpliceResult:
    image: np.ndarray  # uint8 H x W x 3, the background's size
    mask: np.ndarray  # bool, the pasted object
    meta: dict[str, Any] = field(default_factory=dict)


def _grey224(image: np.ndarray) -> np.ndarray:
    grey = cv2.cvtColor(as_rgb_uint8(image), cv2.COLOR_RGB2GRAY)
    return cv2.resize(grey, (_SIM_SIZE, _SIM_SIZE), interpolation=cv2.INTER_AREA)


def pair_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """0.4 x histogram correlation (mapped to [0, 1]) + 0.4 x max(SSIM, 0) + 0.2 x size similarity.

    As in THEMIS: 224 x 224 greyscale, 256-bin histograms compared with correlation, the simplified
    global SSIM (c1 = 0.01^2, c2 = 0.03^2 on [0, 1] intensities), and the size term
    (1 - |h1 - h2| / max h) (1 - |w1 - w2| / max w) on the original sizes.
    """
    ga, gb = _grey224(a), _grey224(b)
    ha = cv2.calcHist([ga], [0], None, [256], [0, 256])
    hb = cv2.calcHist([gb], [0], None, [256], [0, 256])
    hist = (cv2.compareHist(ha, hb, cv2.HISTCMP_CORREL) + 1.0) / 2.0
    x, y = ga.astype(np.float64) / 255.0, gb.astype(np.float64) / 255.0
    mx, my = x.mean(), y.mean()
    cov = ((x - mx) * (y - my)).mean()
    ssim = ((2 * mx * my + _C1) * (2 * cov + _C2)) / ((mx**2 + my**2 + _C1) * (x.var() + y.var() + _C2))
    (h1, w1), (h2, w2) = np.asarray(a).shape[:2], np.asarray(b).shape[:2]
    size = (1 - abs(h1 - h2) / max(h1, h2)) * (1 - abs(w1 - w2) / max(w1, w2))
    return float(0.4 * hist + 0.4 * max(ssim, 0.0) + 0.2 * size)


def rank_pairs(images: Sequence[np.ndarray]) -> list[tuple[int, int, float]]:
    """Exhaustive pairwise similarity, most similar pair first: [(i, j, score), ...] with i < j."""
    scores = [(i, j, pair_similarity(images[i], images[j])) for i, j in combinations(range(len(images)), 2)]
    scores.sort(key=lambda t: (-t[2], t[0], t[1]))
    return scores


def splice(
    object_image: np.ndarray,
    background: np.ndarray,
    rng: np.random.Generator,
    *,
    object_mask: np.ndarray | None = None,
    min_fraction: float = 0.02,
    max_fraction: float = 0.7,
    max_shift: float = 0.1,
    feather: tuple[float, float] = (1.5, 4.0),
    donor_chains: Sequence[str] = (),
) -> SpliceResult:
    """Composite the foreground object of `object_image` onto `background`.

    With `donor_chains`, one chain drawn from it is applied to `object_image` after its object is
    segmented and before it is resized (`meta["donor_chain"]`); the geometry (shift, feather) is
    the one the same `rng` gives without chains.

    The object (Otsu + morphology + largest component unless `object_mask` is given) and its image
    are resized to the background's size with nearest-neighbour masks, as in the seed, then shifted by
    up to `max_shift` of the frame (random, kept inside) and blended with an inward feather of
    `feather` px so the seam is soft yet no pixel outside the mask changes. Raises ValueError when
    the object covers less than `min_fraction` or more than `max_fraction` of the frame (the seed's
    quality control discards those).
    Kept in one piece: the splicing recipe's steps in order (donor, mask, blend, record), as the seed paper lists them.
    """
    obj = as_rgb_uint8(object_image, "object_image")
    bg = as_rgb_uint8(background, "background")
    for chain in donor_chains:  # a mistyped chain fails on the first splice, not on the one that draws it
        apply_chain(np.zeros((8, 8, 3), np.uint8), chain)
    mask = otsu_object_mask(obj) if object_mask is None else as_bool_mask(object_mask, obj.shape[:2])
    h, w = bg.shape[:2]
    mask_r = cv2.resize(mask.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST).astype(bool)
    frac = float(mask_r.mean())
    if not min_fraction <= frac <= max_fraction:
        raise ValueError(f"object covers {frac:.3f} of the frame; expected {min_fraction}..{max_fraction}")

    ys, xs = np.nonzero(mask_r)
    lo_x, hi_x = -int(xs.min()), w - 1 - int(xs.max())
    lo_y, hi_y = -int(ys.min()), h - 1 - int(ys.max())
    dx = int(rng.integers(max(lo_x, -int(max_shift * w)), min(hi_x, int(max_shift * w)) + 1))
    dy = int(rng.integers(max(lo_y, -int(max_shift * h)), min(hi_y, int(max_shift * h)) + 1))
    width = float(rng.uniform(*feather))
    # drawn last, so a splice with donor chains has the same geometry as one without
    chain = str(donor_chains[int(rng.integers(len(donor_chains)))]) if len(donor_chains) else None
    donor = as_rgb_uint8(apply_chain(obj, chain), "processed object_image") if chain is not None else obj

    shift = np.float32([[1, 0, dx], [0, 1, dy]])
    obj_r = cv2.resize(donor, (w, h), interpolation=cv2.INTER_LINEAR)
    obj_r = cv2.warpAffine(obj_r, shift, (w, h), flags=cv2.INTER_NEAREST, borderMode=cv2.BORDER_REFLECT)
    mask_r = cv2.warpAffine(mask_r.astype(np.uint8), shift, (w, h), flags=cv2.INTER_NEAREST).astype(bool)
    image = composite(obj_r, bg, inner_alpha(mask_r, width))
    meta = {
        "operation": "splicing",
        "area_ratio": round(frac, 6),
        "shift": [dx, dy],
        "feather": round(width, 3),
        "similarity": round(pair_similarity(obj, bg), 6),
    }
    if chain is not None:
        meta["donor_chain"] = chain
    return SpliceResult(image, mask_r, meta)


def splice_both_ways(
    a: np.ndarray, b: np.ndarray, rng: np.random.Generator, **kwargs: Any
) -> tuple[SpliceResult, SpliceResult]:
    """The seed's two variants of a pair: A's object on B, and B's object on A."""
    return splice(a, b, rng, **kwargs), splice(b, a, rng, **kwargs)
