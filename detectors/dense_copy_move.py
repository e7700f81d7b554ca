"""Dense copy-move fallback: block matching where SIFT finds too few keypoints to self-match.

Charts, blots, gels and smooth photographs give SIFT a handful of keypoints, so a copy in them has
no consistent self-matches. As in the classic block-matching detectors, every small overlapping
block on a grid is described instead: by the magnitudes of its Zernike moments (Ryu et al. 2010),
which a rotation of the block leaves unchanged (the m = 0 moments are kept signed), computed for all
blocks at once as one matrix product. Each block's nearest neighbour outside its own
neighbourhood is found by an exact FAISS search. Where Ryu et al. (and Fridrich et al. 2003)
sort blocks lexicographically and vote on one shift vector, which only holds for a pure shift, the
matches here go to the same RANSAC similarity fit as the keypoints (a rotated or scaled copy has no
single shift vector), and the copy is grown and ordered by
`detectors.self_matching.self_match_regions`, as a SIFT match is.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from math import factorial

import numpy as np

from detectors.matching import Panel, fit_similarity, local_std

# (n, m) with m <= n and n - m even, up to order 5: 12 moments.
ZERNIKE_ORDERS = tuple((n, m) for n in range(6) for m in range(n + 1) if (n - m) % 2 == 0)


@lru_cache(maxsize=8)
def zernike_kernels(radius: int) -> tuple[tuple[np.ndarray, np.ndarray | None], ...]:
    """(real, imaginary) correlation kernels of the Zernike moments of `ZERNIKE_ORDERS` on a disc
    of `radius` px, normalized by the disc's area; the imaginary part is None for m = 0."""
    y, x = np.mgrid[-radius : radius + 1, -radius : radius + 1].astype(np.float64)
    rho, theta = np.hypot(x, y) / (radius + 0.5), np.arctan2(y, x)
    disc = rho <= 1.0
    kernels = []
    for n, m in ZERNIKE_ORDERS:
        radial = sum(
            (-1) ** k
            * factorial(n - k)
            / (factorial(k) * factorial((n + m) // 2 - k) * factorial((n - m) // 2 - k))
            * rho ** (n - 2 * k)
            for k in range((n - m) // 2 + 1)
        )
        weight = np.where(disc, radial, 0.0) / disc.sum()
        real = (weight * np.cos(m * theta)).astype(np.float32)
        kernels.append((real, None if m == 0 else (-weight * np.sin(m * theta)).astype(np.float32)))
    return tuple(kernels)


def zernike_features(gray: np.ndarray, points: np.ndarray, radius: int) -> np.ndarray:
    """(N, 12) rotation-invariant features of the discs around integer `points` (x, y), at least
    `radius` px inside the image: |Z_nm| (signed Z_n0, which is real), as one matrix product of the
    blocks' pixels with the kernels (a tenth of the time of correlating the whole image with them)."""
    offsets = np.arange(-radius, radius + 1)
    xs, ys = points[:, 0].astype(int), points[:, 1].astype(int)
    blocks = gray.astype(np.float32)[ys[:, None, None] + offsets[None, :, None], xs[:, None, None] + offsets]
    blocks = blocks.reshape(len(points), -1)
    kernels = zernike_kernels(radius)
    real = blocks @ np.stack([re.ravel() for re, _ in kernels], axis=1)
    imaginary = blocks @ np.stack(
        [np.zeros(re.size, np.float32) if im is None else im.ravel() for re, im in kernels], 1
    )
    signed = np.array([im is None for _, im in kernels])
    return np.where(signed, real, np.hypot(real, imaginary)).astype(np.float32)


def block_grid(panel: Panel, radius: int, grid: int, min_std: float) -> np.ndarray:
    """(N, 2) x, y of the block centres: a grid of at most `grid` points a side, blocks inside the
    panel, with texture (local std over `min_std`) and off the figure furniture."""
    height, width = panel.shape
    if min(height, width) <= 2 * radius:  # too small for one block
        return np.zeros((0, 2), np.float32)
    stride = max(1, int(np.ceil(max(height, width) / grid)))
    ys, xs = np.mgrid[radius : height - radius : stride, radius : width - radius : stride]
    ys, xs = ys.ravel(), xs.ravel()
    keep = (local_std(panel.gray, 2 * radius + 1)[ys, xs] > min_std) & ~panel.furniture[ys, xs]
    return np.stack([xs[keep], ys[keep]], axis=1).astype(np.float32)


def nearest_far_blocks(features: np.ndarray, points: np.ndarray, gap: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (i, j): each block's nearest neighbour in feature space (FAISS, exact L2 on features
    scaled to unit spread) among its `k` nearest that lies at least `gap` px away. The exhaustive
    search beats a k-d tree (scikit-learn) by half on Zernike features of real images."""
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # not its CPU-feature probing, which reads as errors
    import faiss

    spread = features.std(0)
    scaled = np.ascontiguousarray((features - features.mean(0)) / np.where(spread > 1e-6, spread, 1.0), np.float32)
    index = faiss.IndexFlatL2(scaled.shape[1])
    index.add(scaled)
    _, neighbours = index.search(scaled, min(k, len(scaled)))
    far = np.linalg.norm(points[np.maximum(neighbours, 0)] - points[:, None], axis=2) >= gap
    far &= neighbours >= 0
    has = far.any(1)
    first = far.argmax(1)
    rows = np.flatnonzero(has)
    return rows, neighbours[rows, first[rows]]


def dense_self_match(
    panel: Panel,
    gap: float,
    threshold: float,
    radius: int = 6,
    grid: int = 96,
    min_std: float = 4.0,
    neighbours: int = 16,
) -> tuple[np.ndarray | None, int]:
    """(map from one copy onto the other in working px, its inlier blocks) from Zernike block
    matches; (None, 0) when there are too few textured blocks to match."""
    points = block_grid(panel, radius, grid, min_std)
    if len(points) < 8:
        return None, 0
    features = zernike_features(panel.gray, points, radius)
    rows, cols = nearest_far_blocks(features, points, gap, neighbours)
    matrix, inliers = fit_similarity(points[rows], points[cols], threshold)
    return (None, 0) if matrix is None else (matrix, int(inliers.sum()))
