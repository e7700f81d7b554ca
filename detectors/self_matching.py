"""Copy-move inside one panel: the panel matched with itself, from the primitives of `detectors.matching`.

`match_self` finds the map from one copy onto the other, `self_match_regions` grows both copies
and tells the copy from its source by the resampling trace (`copy_residual`), `hidden_copy` adds
the part of a copy pasted over its own source (`resampling_agreement`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import cv2
import numpy as np

from detectors.matching import (
    Geometry,
    Panel,
    fit_similarity,
    homogeneous,
    local_correlation,
    local_std,
    map_mask_to_b,
    mirror_matrix,
    mutual_matches,
    shared_region,
    warp_into_a,
)
from detectors.pair_matching import resize_mask, to_original


@dataclass
class SelfMatch:
    """Copy-move found by matching a panel with itself: `matrix` maps source onto target in the
    image's own pixels (not the working size), and the regions have the image's size."""

    matrix: np.ndarray | None
    n_inliers: int
    source: np.ndarray  # bool, original size
    target: np.ndarray
    ordered: bool  # whether the resampling trace told which copy is the target
    reason: str = ""
    method: str = "sift"  # "sift" | "dense" (`detectors.dense_copy_move`) | "none"
    residual: float = float("inf")  # median grey difference of the copy from its resampled source
    overlap: float = 0.0  # shared part of the two copies, as a fraction of the smaller
    repeat: float = 0.0  # share of a shifted copy's texture repeated once more along the shift (`repeats_again`)
    detail_residual: float = float("nan")  # `residual` on the copy's detailed pixels only (`detail_residual`)


def rotates(matrix: np.ndarray, angle: float = 2.0) -> bool:
    """Whether a map rotates by more than `angle` degrees, whatever its scale and mirroring."""
    return abs(Geometry.of(matrix).rotation) > angle


def turns(matrix: np.ndarray, angle: float = 2.0) -> bool:
    """Whether a map turns (by more than `angle` degrees) or flips, whatever its scale."""
    return Geometry.of(matrix).flipped or rotates(matrix, angle)


def is_pure_shift(matrix: np.ndarray, angle: float = 2.0, scale: float = 0.03) -> bool:
    """Whether a map neither turns (by `angle` degrees), flips nor rescales (by `scale`)."""
    return not turns(matrix, angle) and abs(np.log(max(Geometry.of(matrix).scale, 1e-6))) <= np.log1p(scale)


def missed(found: SelfMatch, reason: str) -> SelfMatch:
    """No copy: `found`'s evidence (its inlier count) kept, its map and regions dropped."""
    empty = np.zeros(found.target.shape, bool)
    return SelfMatch(None, found.n_inliers, empty, empty, False, reason, "none")


def match_self(panel: Panel, **options: Any) -> SelfMatch:
    """Copy-move: match the panel's keypoints with each other and with its mirror, excluding pairs
    closer than `min_distance` of the longer side (a keypoint's own neighbourhood), fit the map
    from one copy onto the other, and grow both regions by local correlation.

    Which copy is the target is told by the resampling trace (`copy_residual`): a rotated or scaled
    copy is reproduced by resampling its source through the map, not the other way round. When the
    two residuals differ by less than `order_margin` (a pure shift by whole pixels copies exactly
    both ways), both regions are returned as targets, `ordered` False. `options`: `self_matches`'.
    """
    return next(self_matches(panel, **options))


def self_matches(
    panel: Panel,
    ratio: float = 0.8,
    min_distance: float = 0.05,
    min_inliers: int = 6,
    ransac_threshold: float = 0.01,
    order_margin: float = 0.1,
    border_band: int = 6,
    max_maps: int = 1,
) -> Iterator[SelfMatch]:
    """`match_self`'s match, then (up to `max_maps` in all) the maps the matches left over fit, most
    inliers first: a panel's best map may be a symmetry or a repeated structure (a bar matching
    itself turned by 180 degrees), and the copy the next one. Yields one miss when no map has
    `min_inliers`; regions are grown only for the maps a caller asks for."""
    empty = np.zeros(panel.original_shape, bool)
    if len(panel.points) < 4:
        yield SelfMatch(None, 0, empty, empty, False, "too few keypoints", "none")
        return
    gap = min_distance * max(panel.shape)
    maps = candidate_maps(panel, ratio, gap, max(2.0, ransac_threshold * max(panel.shape)), max_maps)
    if not maps or maps[0][0] < min_inliers:
        count = maps[0][0] if maps else 0
        yield SelfMatch(None, count, empty, empty, False, "no consistent self-matches", "none")
        return
    for count, matrix in maps:
        if count >= min_inliers:
            yield self_match_regions(panel, matrix, count, gap, order_margin, border_band=border_band)


def candidate_maps(
    panel: Panel, ratio: float, gap: float, threshold: float, max_maps: int
) -> list[tuple[int, np.ndarray]]:
    """(inlier count, map) pairs, most inliers first: RANSAC on the panel's matches with itself and
    with its mirror, refitted up to `max_maps` times on each set without the inliers of its earlier
    maps.

    Kept in one piece: matching both ways and fitting turn on one set of keypoints and its mirror."""
    near = np.linalg.norm(panel.points[:, None] - panel.points[None], axis=2) < gap
    mirror_points, mirror_descriptors = panel.mirrored()
    maps: list[tuple[int, np.ndarray]] = []
    for mirrored, desc in ((False, panel.descriptors), (True, mirror_descriptors)):
        ia, ib = mutual_matches(panel.descriptors, desc, ratio, forbidden=near if not mirrored else None)
        if mirrored:  # a keypoint matching its own mirror image is symmetry, not a copy
            far = np.linalg.norm(panel.points[ia] - panel.points[ib], axis=1) >= gap
            ia, ib = ia[far], ib[far]
        for _ in range(max_maps):
            if mirrored:
                src, dst = panel.points[ia], mirror_points[ib]
            else:  # unordered pairs: both directions, so RANSAC can settle on either copy as the source
                src = np.concatenate([panel.points[ia], panel.points[ib]])
                dst = np.concatenate([panel.points[ib], panel.points[ia]])
            matrix, inliers = fit_similarity(src, dst, threshold)
            if matrix is None:
                break
            if mirrored:
                matrix = (mirror_matrix(panel.shape[1]) @ homogeneous(matrix))[:2]
            maps.append((int(inliers.sum()) // (1 if mirrored else 2), matrix))
            used = inliers if mirrored else inliers[: len(ia)] | inliers[len(ia) :]
            if not used.any():
                break
            ia, ib = ia[~used], ib[~used]
    return sorted(maps, key=lambda found: -found[0])[:max_maps]


def self_match_regions(
    panel: Panel,
    matrix: np.ndarray,
    count: int,
    gap: float,
    order_margin: float = 0.1,
    method: str = "sift",
    fill_hull: bool = True,
    border_band: int = 6,
) -> SelfMatch:
    """Both copies of a self-match map (working px, one copy onto the other), grown by local
    correlation, and which one is the target (see `match_self`). `fill_hull`: flat pixels inside a
    copy's convex hull whose level its partner repeats join it (`fill_flat_in_hull`).
    `border_band` > 0: each copy's outline traced to the pixel within that many px (`trace_copy_border`)."""
    # Only correlating texture seeds the regions: inside one image a shift maps flat background onto
    # flat background (charts, documents), which is no evidence of a copy.
    region = shared_region(panel, panel, matrix, exclude_near=gap, flat_agrees=False)  # x sees x' = M x
    inverse = cv2.invertAffineTransform(matrix)
    back = shared_region(panel, panel, inverse, exclude_near=gap, flat_agrees=False)
    # `region.mask_a` holds x whose M-image matches: the source under M; `back` the target.
    source, target = region.mask_a, back.mask_a
    ordered, forward, backward, overlap = False, float("inf"), float("inf"), 0.0
    if source.any() and target.any():
        overlap = float((source & target).sum() / min(source.sum(), target.sum()))
        forward = copy_residual(panel.gray, target, matrix)  # target as a resampled copy of source
        backward = copy_residual(panel.gray, source, inverse)  # or the other way round
        # Two equal residuals (0 for a shift by whole pixels, which copies exactly both ways) tell nothing.
        ordered = bool(np.isfinite(forward + backward)) and abs(forward - backward) > order_margin * min(
            forward, backward
        )
    repeat = repeats_again(panel.gray, source, target, matrix) if is_pure_shift(matrix) else 0.0
    if fill_hull:  # after ordering: filled flat pixels repeat exactly both ways and would hide the trace
        source, target = fill_flat_in_hull(panel.gray, source, matrix), fill_flat_in_hull(panel.gray, target, inverse)
    if border_band > 0:
        source = trace_copy_border(panel.gray, source, matrix, border_band)
        target = trace_copy_border(panel.gray, target, inverse, border_band)
    if ordered and backward < forward:  # the map runs from the copy to the original
        source, target, matrix = target, source, inverse
    detail = detail_residual(panel.gray, target, matrix) if target.any() else float("nan")
    if not ordered:
        source = target = source | target
    return SelfMatch(
        to_original(matrix, panel.factor, panel.factor),
        count,
        resize_mask(source, panel.original_shape),
        resize_mask(target, panel.original_shape),
        ordered,
        method=method,
        residual=min(forward, backward),
        overlap=overlap,
        repeat=repeat,
        detail_residual=detail,
    )


def repeats_again(
    gray: np.ndarray,
    source: np.ndarray,
    target: np.ndarray,
    to_target: np.ndarray,
    min_correlation: float = 0.6,
    min_cover: float = 0.25,
) -> float:
    """The share of a shifted copy's textured pixels that the image repeats once more along the
    shift (beyond the target, or before the source; the larger): a region pasted once is repeated
    by its source only, whereas what is drawn at a period (bars, legend rows, lines of text, a tiled
    texture) repeats again one period further. A pixel repeats when its window correlates with its
    partner's as a copy's does (`min_correlation`, as `shared_region` grows copies). A direction
    counts only where textured partners inside the image cover `min_cover` of the copy: a few
    pixels at its edge (a straight edge along the shift repeats itself) tell nothing."""
    shares = [0.0]
    for region, step in ((target, to_target), (source, cv2.invertAffineTransform(to_target))):
        partner, covered = partner_view(gray, step)
        correlation, spread = local_correlation(gray, partner)
        chosen = region & covered & (spread > 3.0)
        if chosen.sum() >= max(50, min_cover * region.sum()):
            shares.append(float((correlation[chosen] > min_correlation).mean()))
    return max(shares)


def partner_view(gray: np.ndarray, to_partner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What each pixel's partner through `to_partner` shows, and where that partner lies inside the image."""
    partner = warp_into_a(gray, to_partner, gray.shape)
    covered = warp_into_a(np.ones(gray.shape, np.uint8), to_partner, gray.shape, cv2.INTER_NEAREST) > 0
    return partner, covered


def fill_flat_in_hull(
    gray: np.ndarray, region: np.ndarray, to_partner: np.ndarray, max_step: float = 10.0
) -> np.ndarray:
    """`region` with the pixels of its convex hull whose smoothed level the partner copy (through
    `to_partner`) repeats within `max_step` grey levels. Correlation seeds a copy only where it has
    texture, so the flat parts of a copied gel band or chart cell at its edge were left out; inside
    the hull, a flat pixel equal to its partner is part of the same copy, whereas flat background
    anywhere else repeats by chance."""
    if not region.any():
        return region
    hull = np.zeros(region.shape, np.uint8)
    cv2.fillConvexPoly(hull, cv2.convexHull(cv2.findNonZero(region.astype(np.uint8))), 1)
    partner, inside = partner_view(gray, to_partner)
    level = np.abs(cv2.blur(gray, (7, 7)) - cv2.blur(partner, (7, 7))) < max_step
    return region | ((hull > 0) & inside & level)


def trace_copy_border(
    gray: np.ndarray,
    region: np.ndarray,
    to_partner: np.ndarray,
    band: int = 6,
    seam: int = 2,
    min_tolerance: float = 6.0,
    tolerance_factor: float = 3.0,
) -> np.ndarray:
    """`region` with its outline traced to the pixel. Correlation windows (11 px) straddling the
    outline decide it only to within half a window, and the closing after them rounds it: on
    generated copies about half the copy pixels a region missed lay within 3 px inside the true
    outline, and a quarter of the pixels it wrongly took within 3 px outside. Within `band` px of
    the outline, a textured pixel belongs to the copy when its partner (through `to_partner`)
    repeats it: the 3 x 3 mean absolute grey difference under `tolerance_factor` x the difference
    deep inside the region (resampling and recompression raise both), at least `min_tolerance`.
    Flat pixels repeat anywhere and keep the region's decision. What stays connected to the inside
    is grown by `seam` px: a feathered paste's outer ring blends copy and background, so it repeats
    its source in no pixel, and still belongs to the paste."""
    if not region.any():
        return region
    marked = region.astype(np.uint8)
    inside = cv2.erode(marked, np.ones((5, 5), np.uint8)) > 0
    if inside.sum() < 20:
        return region
    partner, covered = partner_view(gray, to_partner)
    difference = cv2.blur(np.abs(gray - partner), (3, 3))
    tolerance = max(min_tolerance, tolerance_factor * float(np.median(difference[inside])))
    textured = local_std(gray, 5) > 3.0
    width = np.ones((2 * band + 1, 2 * band + 1), np.uint8)
    near, deep = cv2.dilate(marked, width) > 0, cv2.erode(marked, width) > 0
    repeated = np.where(textured, difference < tolerance, region)
    kept = deep | (near & covered & repeated)
    _, labels = cv2.connectedComponents(kept.astype(np.uint8), connectivity=8)
    anchored = np.unique(labels[inside & kept])
    traced = np.isin(labels, anchored[anchored > 0])
    return (cv2.dilate(traced.astype(np.uint8), np.ones((2 * seam + 1, 2 * seam + 1), np.uint8)) > 0) & near


def copy_residual(gray: np.ndarray, copy: np.ndarray, to_copy: np.ndarray, erode: int = 9) -> float:
    """How exactly `copy` (a region, eroded past the pasted seam) is the image resampled through
    `to_copy` (a map onto the copy), after refining that map by ECC on the region: the mean absolute
    grey difference. A pasted copy that was rotated or rescaled is one bilinear resampling of its
    source, so resampling the source again reproduces it up to rounding; the source read back from
    the copy went through two resamplings and lost detail. The smaller residual tells the direction.
    The median, not the mean: edges a tenth of a pixel off and the feathered seam are a minority of
    the region. Infinite when the region is too small to tell."""
    inner, inside = copy_interior(copy, to_copy, erode)
    if inner.sum() < 50 or inside.sum() < 50:
        return float("inf")
    initial = cv2.invertAffineTransform(to_copy).astype(np.float32)

    def residual(to_source: np.ndarray) -> float:
        return float(np.median(np.abs(gray - resampled_through(gray, to_source))[inside]))

    criteria = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 50, 1e-6)
    try:
        _, refined = cv2.findTransformECC(gray, gray, initial.copy(), cv2.MOTION_AFFINE, criteria, inner, 1)
    except cv2.error:  # no convergence: the RANSAC map alone
        return residual(initial)
    return min(residual(initial), residual(refined))  # a refinement that drifted away is not taken


def detail_residual(
    gray: np.ndarray, copy: np.ndarray, to_copy: np.ndarray, erode: int = 9, min_std: float = 3.0, min_pixels: int = 50
) -> float:
    """`copy_residual` read on the copy's detailed pixels only (local grey std over `min_std` in 5 px),
    without refinement: the median grey difference there from the image resampled through
    `to_copy`. Flat fills reproduce under any map, so where most of a copy is flat (a chart's bars
    and background) its median over all pixels is 0 whether or not the map is right; its edges,
    text and texture tell. NaN where fewer than `min_pixels` detailed pixels lie inside."""
    detailed = copy_interior(copy, to_copy, erode)[1] & (local_std(gray, 5) > min_std)
    if detailed.sum() < min_pixels:
        return float("nan")
    to_source = cv2.invertAffineTransform(to_copy).astype(np.float32)
    return float(np.median(np.abs(gray - resampled_through(gray, to_source))[detailed]))


def copy_interior(copy: np.ndarray, to_copy: np.ndarray, erode: int) -> tuple[np.ndarray, np.ndarray]:
    """(the copy eroded past its pasted seam, as uint8; the part of it whose source under
    `to_copy` lies inside the image, as bool)."""
    inner = cv2.erode(copy.astype(np.uint8), np.ones((erode, erode), np.uint8))
    to_source = cv2.invertAffineTransform(to_copy).astype(np.float32)
    covered = cv2.warpAffine(np.ones_like(inner), to_source, inner.shape[::-1], flags=cv2.WARP_INVERSE_MAP)
    return inner, (inner > 0) & (covered > 0)


def resampled_through(gray: np.ndarray, to_source: np.ndarray) -> np.ndarray:
    """`gray` resampled (bilinear) at the source of each pixel under `to_source` (copy -> source)."""
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    return cv2.warpAffine(gray, to_source, gray.shape[::-1], flags=flags, borderMode=cv2.BORDER_REPLICATE)


def resampling_agreement(gray: np.ndarray, to_copy: np.ndarray, window: int = 15) -> np.ndarray:
    """Per pixel, how closely the local fine detail follows the smoothing that bilinear resampling
    through `to_copy` (a map onto the copy, not a pure shift) leaves: each copy pixel interpolates
    its source at a sub-pixel phase, and a pixel halfway between source pixels averages their noise
    away, one on a source pixel keeps it. The windowed correlation of the log Laplacian energy with
    that predicted attenuation is near 0 outside the copy, where the phases mean nothing."""
    height, width = gray.shape
    to_source = cv2.invertAffineTransform(to_copy)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    kept = np.ones((height, width), np.float32)
    for row in to_source:
        phase = row[0] * xs + row[1] * ys + row[2]
        phase -= np.floor(phase)
        kept *= (1 - phase) ** 2 + phase**2  # share of white noise a linear interpolation at this phase keeps
    energy = np.log1p(cv2.Laplacian(gray.astype(np.float32), cv2.CV_32F, ksize=1) ** 2)
    correlation, _ = local_correlation(energy, kept, window)
    return correlation


def hidden_copy(
    gray: np.ndarray,
    target: np.ndarray,
    source: np.ndarray,
    to_target: np.ndarray,
    min_agreement: float = 0.06,
    min_area: int = 100,
    steps: int = 8,
) -> np.ndarray:
    """`target` with the part of the paste that covered its own source. Where a copy overlaps its
    source, the source under it is gone, so what was pasted from there matches nothing and
    correlation grows only the rest. That part lies where the map carries the copy found so far
    (the source continued under the paste): step by step, the pixels there whose fine detail follows
    the resampling phases of the map (`resampling_agreement` over `min_agreement`) join the copy,
    in pieces of at least `min_area` px."""
    agreement = resampling_agreement(gray, to_target)
    grown = target.copy()
    for _ in range(steps):
        carried = map_mask_to_b(grown, to_target, target.shape)
        candidates = carried & ~grown & ~source & (agreement > min_agreement)
        count, pieces = cv2.connectedComponents(candidates.astype(np.uint8))
        added = np.bincount(pieces.ravel(), minlength=count) >= min_area
        added[0] = False  # the background
        if not added.any():
            break
        grown |= added[pieces]
    return grown
