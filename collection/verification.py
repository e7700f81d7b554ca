"""Verifying what retrieval found: the cheap geometric check on retrieval's own keypoint pairs,
then the pair detector, whose match must reproduce the candidate's content; for the first
candidate, retrieval's own map may confirm a pair the detector refused.

The check costs no image reading: retrieval has already paired query keypoints with indexed ones
(their positions are stored), and `retrieval_fit` fits one similarity map to those pairs. Only the
candidates it passes are read from their files and given to the pair detector (`verify`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable

import cv2
import numpy as np

from datamodules.io import ImageReadError, read_image
from detectors.figure_furniture import furniture_mask
from detectors.matching import homogeneous, mirror_matrix

log = logging.getLogger(__name__)

MIN_GEOMETRIC_INLIERS = 4  # keypoint pairs one similarity map must carry before the pair detector is asked
# ... except for the best candidate, asked whenever a map fits at all (from three pairs, `geometric_inliers`):
# a 30 % crop keeps few of its source's indexed keypoints among its neighbours, and one more
# pair-detector call per query is affordable
MIN_BEST_INLIERS = 2
REPROJECTION_PX = 8.0  # at the 256 px working size (positions are stored to 1 px)
MAX_SCALE = 4.0  # a fitted map scaling more than this (either way) is no copy
# a copy reproduces its source's content: mapped onto the query by the pair's fitted map, with a gain
# and bias fitted (brightness, contrast), through JPEG 75 and colour changes, at most this share of
# the overlap differs by more than MISMATCH_GREY_LEVELS; a panel drawn from the same template (a
# chart's axes, legend and bar positions, other bars) matches keypoints but differs in far more
MISMATCH_GREY_LEVELS = 60
MAX_MISMATCH_SHARE = 0.04
CLIPPED_GREY_LEVELS = 3  # a copy's grey levels this close to 0 or 255 may have been clipped by its edit
# the first candidate is a copy, whatever the pair detector scored, where retrieval's own map carries
# the candidate onto the query with at least this correlation (and the content check passes). On a
# kept benchmark collection, copies correlated 0.90 or more for nineteen in twenty; the first
# candidates of queries without a copy in the index at most 0.88, and that one failed the content check
CONFIRM_CORRELATION = 0.8
CONFIRM_MIN_INLIERS = 3  # ... and retrieval's map carries at least this many distinct keypoints (as chosen)


def one_to_one(query_rows: np.ndarray, panel_rows: np.ndarray, similarity: np.ndarray) -> np.ndarray:
    """Indices of the pairs kept, the most similar first, each query and each panel keypoint used
    once: a repeated texture would otherwise pile many query keypoints onto one panel keypoint, and
    RANSAC prefer the degenerate map that shrinks the query onto it."""
    used_query, used_panel, kept = set(), set(), []
    for index in np.argsort(-similarity, kind="stable").tolist():
        if query_rows[index] not in used_query and panel_rows[index] not in used_panel:
            used_query.add(query_rows[index])
            used_panel.add(panel_rows[index])
            kept.append(index)
    return np.asarray(kept, np.int64)


def geometric_inliers(correspondences: dict[str, np.ndarray]) -> int:
    """Distinct panel keypoints that one similarity map (RANSAC; rotation, scale, translation) carries
    query keypoints onto, the mirrored query's correspondences fitted apart: the query's flips."""
    return retrieval_fit(correspondences)[0]


def retrieval_fit(correspondences: dict[str, np.ndarray], query_width: int = 0) -> tuple[int, np.ndarray | None]:
    """(`geometric_inliers`, the map that carries them: query -> panel working pixels, or None). A
    mirrored query's points were flipped in its working width `query_width`: its map is composed
    with that flip, so it applies to the query's own pixels."""
    best, best_map = 0, None
    for mirrored in (False, True):
        chosen = np.flatnonzero(correspondences["mirrored"] == mirrored)
        if "similarity" in correspondences:
            rows = (correspondences[key][chosen] for key in ("query_row", "panel_row", "similarity"))
            chosen = chosen[one_to_one(*rows)]
        query, panel = correspondences["query"][chosen], correspondences["panel"][chosen]
        if len(query) < 3:  # two pairs fit any similarity; three are the fewest that can disagree
            continue
        matrix, inliers = cv2.estimateAffinePartial2D(
            query, panel, method=cv2.RANSAC, ransacReprojThreshold=REPROJECTION_PX, maxIters=2000
        )
        if matrix is None:
            continue
        scale = float(np.hypot(matrix[0, 0], matrix[1, 0]))
        if not 1 / MAX_SCALE <= scale <= MAX_SCALE:
            continue
        distinct = len({tuple(point) for point in np.round(panel[inliers.ravel() == 1]).tolist()})
        if distinct > best:
            best, best_map = distinct, (homogeneous(matrix) @ mirror_matrix(query_width))[:2] if mirrored else matrix
    return best, best_map


def agrees_geometrically(candidate: dict[str, Any], best: bool = False) -> bool:
    """The cheap check before the pair detector: do the retrieval's keypoint pairs fit one map
    (`MIN_GEOMETRIC_INLIERS`, or `MIN_BEST_INLIERS` for the `best` candidate)? A candidate without
    stored positions (the regional descriptors) is not pruned."""
    correspondences = candidate.get("correspondences")
    if correspondences is None or MIN_GEOMETRIC_INLIERS <= 0:
        return True
    minimum = min(MIN_BEST_INLIERS, MIN_GEOMETRIC_INLIERS) if best else MIN_GEOMETRIC_INLIERS
    inliers = candidate.get("geometric_inliers")
    return (geometric_inliers(correspondences) if inliers is None else inliers) >= minimum


def verify(
    detector: Any,
    query_panel: Any,
    candidate: dict[str, Any],
    threshold: float,
    query_image: np.ndarray | None = None,
    confirm: bool = False,
) -> Any:
    """The pair detector's answer for (query, candidate): its crop read again from its file. With
    `query_image`, a duplicate whose map does not reproduce the candidate's content there
    (`content_mismatch` over `MAX_MISMATCH_SHARE`) is answered not duplicated, with the reason;
    with `confirm` too, a pair the detector refused is a duplicate where retrieval's own map
    reproduces the candidate (`confirmed_by_retrieval`), described under that map by a detector
    that can (`predict_under`: the matching one, not the learned `pairnet`)."""
    x0, y0, x1, y1 = candidate["box"]
    image = read_image(candidate["path"])[y0:y1, x0:x1]
    described = detector.describe(image)
    found = detector.predict_pair(query_panel, described, threshold)
    if query_image is None:
        return found
    matrix = found.transform.get("matrix")
    if found.duplicated and matrix is not None:
        mismatch = content_mismatch(query_image, image, np.asarray(matrix))
        if mismatch <= MAX_MISMATCH_SHARE:
            return found
        found = replace(
            found,
            duplicated=False,
            operations=[],
            geometric=[],
            mask_a=np.zeros_like(found.mask_a),
            mask_b=np.zeros_like(found.mask_b),
            reason=f"the map does not reproduce the content: {mismatch:.0%} of the overlap differs (a shared layout)",
        )
    retrieval_map = candidate.get("retrieval_map")
    describes_under_a_map = hasattr(detector, "predict_under")  # the matching detector; not the learned pairnet
    carried = candidate.get("geometric_inliers", 0)  # the first candidate is checked from 2
    nothing_to_confirm = found.duplicated or not confirm or retrieval_map is None or not describes_under_a_map
    if nothing_to_confirm or carried < CONFIRM_MIN_INLIERS:
        return found
    correlation = confirmed_by_retrieval(query_image, image, retrieval_map)
    if correlation is None:
        return found
    reason = (
        f"retrieval's map carries {carried} keypoints and the panel mapped by it "
        f"correlates {correlation:.2f} with the query (pair detector score {found.score:.3f} below the threshold)"
    )
    return detector.predict_under(query_panel, described, retrieval_map, found.score, reason)


def confirmed_by_retrieval(query_image: np.ndarray, candidate_image: np.ndarray, matrix: np.ndarray) -> float | None:
    """The correlation of the query with the candidate mapped onto it by `matrix`, when it is at least
    `CONFIRM_CORRELATION` and the content check passes under the same map (None otherwise), both
    without the figure furniture of either panel: the pair detector refits a map from its own
    keypoints, and a 30 % crop, recoloured and saved as JPEG, can leave it too few; retrieval's map,
    fitted on the indexed keypoints, may still place the crop, and the pixels then say whether it
    is a copy. Lettering and scale bars in the same places are not such pixels: two different
    micrographs of one figure style, aligned on them, correlate over a dark background."""
    overlap = mapped_overlap(query_image, candidate_image, matrix, without_furniture=True)
    if overlap is None:
        return None
    target, mapped = overlap
    if target.std() < 1e-3 or mapped.std() < 1e-3:  # a flat overlap correlates with anything
        return None
    correlation = float(np.corrcoef(target, mapped)[0, 1])
    if correlation < CONFIRM_CORRELATION:
        return None
    if mismatch_share(target, mapped) > MAX_MISMATCH_SHARE:  # the same overlap, mapped once
        return None
    return correlation


def mapped_overlap(
    query_image: np.ndarray, candidate_image: np.ndarray, matrix: np.ndarray, without_furniture: bool = False
) -> tuple[np.ndarray, np.ndarray] | None:
    """(query grey levels, the candidate's mapped onto them by `matrix`: query -> candidate pixels)
    where the candidate covers the query, interpolated borders left out, and with
    `without_furniture` the lettering, scale bars and rulings of either panel
    (`detectors.figure_furniture`); None below 100 pixels."""
    query = cv2.cvtColor(np.ascontiguousarray(query_image[..., :3]), cv2.COLOR_RGB2GRAY)
    other = cv2.cvtColor(np.ascontiguousarray(candidate_image[..., :3]), cv2.COLOR_RGB2GRAY)
    size, inverse = (query.shape[1], query.shape[0]), cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    matrix = np.asarray(matrix, np.float32)
    warped = cv2.warpAffine(other.astype(np.float32), matrix, size, flags=inverse)
    inside = cv2.warpAffine(np.ones_like(other, np.uint8), matrix, size, flags=inverse)
    inside = cv2.erode(inside, np.ones((5, 5), np.uint8)) > 0
    if without_furniture:
        furniture = furniture_mask(other).astype(np.uint8)
        inside &= ~furniture_mask(query) & (cv2.warpAffine(furniture, matrix, size, flags=inverse) == 0)
    if inside.sum() < 100:
        return None
    return query.astype(np.float32)[inside], warped[inside]


def content_mismatch(
    query_image: np.ndarray, candidate_image: np.ndarray, matrix: np.ndarray, without_furniture: bool = False
) -> float:
    """Share of the overlap (`mapped_overlap`) where the candidate, mapped onto the query by `matrix`
    (query -> candidate pixels) and a least-squares gain and bias (fitted where the query is not
    clipped), differs from the query by more than `MISMATCH_GREY_LEVELS` (grey levels; 1.0 when
    they hardly overlap)."""
    overlap = mapped_overlap(query_image, candidate_image, matrix, without_furniture)
    return 1.0 if overlap is None else mismatch_share(*overlap)


def mismatch_share(target: np.ndarray, mapped: np.ndarray) -> float:
    """`content_mismatch` of an overlap already mapped (`mapped_overlap`)."""
    design = np.stack([mapped, np.ones_like(mapped)], axis=1)
    # a copy brightened or contrasted was stored in 8 bits: where it clipped, it tells nothing of the
    # gain, and the mapped source is compared clipped as the copy was
    unclipped = (target > CLIPPED_GREY_LEVELS) & (target < 255 - CLIPPED_GREY_LEVELS)
    fitted = unclipped if unclipped.sum() >= 100 else np.ones_like(unclipped)
    gain_bias, *_ = np.linalg.lstsq(design[fitted], target[fitted], rcond=None)
    if gain_bias[0] < 0:  # no edit inverts a copy: the best gain that is not negative is 0 (the mean)
        gain_bias = np.array([0.0, float(target[fitted].mean())])
    return float(np.mean(np.abs(target - np.clip(design @ gain_bias, 0, 255)) > MISMATCH_GREY_LEVELS))


def verify_candidates(
    detector: Any,
    panel: np.ndarray,
    candidates: list[tuple[dict[str, Any], float]],
    threshold: float,
    unreadable: list[tuple[dict[str, Any], str]] | None = None,
    changed: Callable[[str], bool] = lambda path: False,
) -> list[tuple[dict[str, Any], float, Any]]:
    """(candidate, similarity, pair prediction) of the candidates that pass `agrees_geometrically`
    (the first, `retrieve`'s most consistent, as the best): the pair detector decides on those alone
    (the query is described only when one passes), and for the first retrieval's own map may
    confirm a pair it refused (`confirmed_by_retrieval`). `unreadable` collects (candidate, why) of
    the indexed panels that could not be read to verify them (moved or deleted since), or whose
    file `changed` since it was indexed (its stored box may lie outside the new image)."""
    described = None
    answers = []
    for rank, (candidate, similarity) in enumerate(candidates):
        if not agrees_geometrically(candidate, best=rank == 0):
            continue
        if changed(candidate["path"]):
            log.warning("indexed panel %s: its file changed since it was indexed", candidate["path"])
            if unreadable is not None:
                unreadable.append((candidate, "its file changed since it was indexed: run index.py on it again"))
            continue
        described = detector.describe(panel) if described is None else described
        try:
            found = verify(detector, described, candidate, threshold, panel, confirm=rank == 0)
            answers.append((candidate, similarity, found))
        except (ImageReadError, OSError) as error:
            log.warning("indexed panel %s is unreadable now: %s", candidate["path"], error)
            if unreadable is not None:
                unreadable.append((candidate, str(error)))
    return answers
