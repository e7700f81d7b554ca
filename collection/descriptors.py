"""What a panel is reduced to for collection search: five descriptors, compared (docs/collection_index.md).

- `local_sift` (the default): the panel's 64 strongest RootSIFT keypoints, each a vector; a query's
  keypoints and their mirrors vote for the panels holding a near neighbour. Local features survive
  a crop to 30 % of a panel, which a vector of the whole panel does not.

The three global descriptors map an RGB uint8 panel to one unit vector per region (`REGIONS`: the whole panel
and a 3 x 3 grid of half-side windows at quarter-side steps), so a copy cropped to 30 % of a panel
meets a region of its source and a panel that holds an indexed one meets it with one of its
regions. Inner product is the similarity (FAISS `METRIC_INNER_PRODUCT`).

- `phash`: the DCT perceptual hash (8 x 8 low frequencies of a 32 x 32 grey thumbnail, signs
  against their median) as a +-1 vector. Brightness and contrast changes leave it unchanged.
- `pooled_sift`: RootSIFT descriptors (as the matching core computes them) made mirror-invariant
  (a descriptor plus its mirror permutation) and pooled per region as a bag of visual words over a
  128-word codebook (k-means on scikit-image's sample photographs, stored with the index). SIFT is rotation-
  invariant and the pooling ignores positions, so the flips and the 180 degree rotation describe
  alike: the query needs no variants.
- `cnn`: a timm ResNet-18 trunk with seeded random weights (nothing is downloaded; no pretrained
  weights are present here), regions max-pooled from its stride-16 feature map (R-MAC style).
  Random convolutions keep some texture statistics, but it is the weakest by construction.
- `pairnet` (collection/learned_descriptor.py): the encoder of a trained `pairnet` checkpoint given
  by the user, pooled the same way: features learned to recur between copies of the same content.

The flips and the 180 degree rotation of THEMIS are handled at query time for `phash`, `cnn` and `pairnet`:
the query is described in its four variants (`VARIANTS`) and the best similarity counts.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

from detectors.matching import MIRROR_ORDER

# (x0, y0, x1, y1) as fractions of the panel: the whole panel, then a 3 x 3 grid of half-side windows
REGIONS = ((0.0, 0.0, 1.0, 1.0),) + tuple((x, y, x + 0.5, y + 0.5) for y in (0.0, 0.25, 0.5) for x in (0.0, 0.25, 0.5))
SPREAD_CELLS = 4  # a stored panel's keypoints are spread over 4 x 4 cells
SPREAD_POOL = 4  # ... chosen from 4 times as many detected
SLOTS = 256  # vector id = panel id * SLOTS + row: at most SLOTS vectors per panel
VARIANTS = ("identity", "hflip", "vflip", "rotate180")


def variant(image: np.ndarray, name: str) -> np.ndarray:
    if name == "identity":
        return image
    if name == "hflip":
        return np.ascontiguousarray(image[:, ::-1])
    if name == "vflip":
        return np.ascontiguousarray(image[::-1])
    if name == "rotate180":
        return np.ascontiguousarray(image[::-1, ::-1])
    raise ValueError(f"unknown variant {name!r}; expected one of {VARIANTS}")


def region_boxes(height: int, width: int) -> list[tuple[int, int, int, int]]:
    """`REGIONS` in pixels (x0, y0, x1, y1), each at least one pixel."""
    boxes = []
    for x0, y0, x1, y1 in REGIONS:
        left, top = int(round(x0 * width)), int(round(y0 * height))
        boxes.append((left, top, max(left + 1, int(round(x1 * width))), max(top + 1, int(round(y1 * height)))))
    return boxes


def unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


class Descriptor(Protocol):
    name: str  # stored in the index and checked: vectors of another descriptor are not comparable
    dim: int
    aggregate: str  # "max": a panel's best region similarity; "votes": query vectors that find the panel
    invariant: bool  # True: flips and 180 degree rotation describe alike (no query variants)

    def describe(self, image: np.ndarray) -> np.ndarray:
        """(len(REGIONS), dim) float32 unit vectors of an RGB uint8 panel."""
        ...


class PerceptualHash:
    name, dim, invariant, aggregate = "phash-v1", 64, False, "max"

    def describe(self, image: np.ndarray) -> np.ndarray:
        gray = cv2.cvtColor(np.ascontiguousarray(image[..., :3]), cv2.COLOR_RGB2GRAY).astype(np.float32)
        rows = []
        for x0, y0, x1, y1 in region_boxes(*gray.shape):
            thumb = cv2.resize(gray[y0:y1, x0:x1], (32, 32), interpolation=cv2.INTER_AREA)
            low = cv2.dct(thumb)[:9, :9].ravel()[1:65]  # 64 low frequencies, the mean (DC) left out
            rows.append(np.where(low > np.median(low), 1.0, -1.0))
        return unit(np.stack(rows))


class PooledSift:
    """Bag of mirror-invariant RootSIFT words per region; `codebook` (words x 128) travels with the index."""

    dim, invariant, words, aggregate = 128, True, 128, "max"
    min_words = 8

    def __init__(self, codebook: np.ndarray | None = None, max_side: int = 256, n_features: int = 600) -> None:
        self.name = f"pooled_sift-v1-{self.words}w-{max_side}px"
        self.max_side, self.n_features = max_side, n_features
        self._codebook = None if codebook is None else np.asarray(codebook, np.float32)
        self.dim = self.words

    @cached_property
    def sift(self) -> cv2.SIFT:
        return cv2.SIFT_create(nfeatures=self.n_features)

    def local_features(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """(points (N, 2) in working px, mirror-invariant RootSIFT (N, 128), working shape)."""
        from detectors.matching import to_working_size

        rgb = np.ascontiguousarray(image[..., :3])
        factor = self.max_side / max(rgb.shape[:2])  # small panels and crops enlarged: more keypoints
        if factor > 1.0:
            size = (round(rgb.shape[1] * factor), round(rgb.shape[0] * factor))
            rgb = cv2.resize(rgb, size, interpolation=cv2.INTER_CUBIC)
        rgb, _ = to_working_size(rgb, self.max_side)
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        keypoints, raw = self.sift.detectAndCompute(gray, None)
        if len(keypoints) < 100:  # faint texture (fundus, blots): weaker extrema too, as the matching core does
            faint = cv2.SIFT_create(nfeatures=self.n_features, contrastThreshold=0.01)
            keypoints, raw = faint.detectAndCompute(gray, None)
        if raw is None or not keypoints:
            return np.zeros((0, 2), np.float32), np.zeros((0, 128), np.float32), gray.shape
        root = np.sqrt(raw / np.maximum(raw.sum(1, keepdims=True), 1e-7))
        symmetric = unit(root + root[:, MIRROR_ORDER])
        return np.asarray([k.pt for k in keypoints], np.float32), symmetric, gray.shape

    @property
    def codebook(self) -> np.ndarray:
        if self._codebook is None:
            self._codebook = fit_codebook(self)
        return self._codebook

    def describe(self, image: np.ndarray) -> np.ndarray:
        points, features, (height, width) = self.local_features(image)
        rows = np.zeros((len(REGIONS), self.words), np.float32)
        if len(features):
            words = np.argmax(features @ self.codebook.T, axis=1)
            for r, (x0, y0, x1, y1) in enumerate(region_boxes(height, width)):
                inside = (points[:, 0] >= x0) & (points[:, 0] < x1) & (points[:, 1] >= y0) & (points[:, 1] < y1)
                if inside.sum() >= self.min_words:  # a handful of words is no evidence: an empty region
                    rows[r] = np.bincount(words[inside], minlength=self.words)
        rows = np.sqrt(rows)  # burstiness: a repeated texture should not drown the rest
        return unit(rows - rows.mean(1, keepdims=True) * (rows.sum(1, keepdims=True) > 0))


def fit_codebook(descriptor: PooledSift, seed: int = 0) -> np.ndarray:
    """k-means words of scikit-image's sample photographs' mirror-invariant RootSIFT (deterministic for a seed)."""
    from skimage import data
    from sklearn.cluster import MiniBatchKMeans

    photos = [getattr(data, name)() for name in ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry")]
    features = [descriptor.local_features(np.dstack([p] * 3) if p.ndim == 2 else p)[1] for p in photos]
    stacked = np.concatenate([f for f in features if len(f)])
    model = MiniBatchKMeans(descriptor.words, random_state=seed, n_init=3, batch_size=2048).fit(stacked)
    return unit(model.cluster_centers_)


class RandomCnn:
    """A seeded, randomly initialised timm ResNet-18 trunk, region-pooled (R-MAC style)."""

    dim, invariant, aggregate = 256, False, "max"

    def __init__(self, size: int = 128, seed: int = 0, device: str = "cpu") -> None:
        from inference.runtime import resolve_device

        self.size, self.seed, self.device = size, seed, resolve_device(device)
        self.name = f"cnn-resnet18-random{seed}-v1-{size}px"

    @cached_property
    def net(self):
        import timm
        import torch

        state = torch.random.get_rng_state()
        torch.manual_seed(self.seed)
        net = timm.create_model("resnet18", pretrained=False, features_only=True, out_indices=(3,)).eval()
        torch.random.set_rng_state(state)
        return net.to(self.device)

    def describe(self, image: np.ndarray) -> np.ndarray:
        import torch

        rgb = cv2.resize(np.ascontiguousarray(image[..., :3]), (self.size, self.size), interpolation=cv2.INTER_AREA)
        tensor = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255.0
        tensor = (tensor.to(self.device) - 0.45) / 0.25
        with torch.no_grad():
            features = self.net(tensor)[0][0].cpu().numpy()  # 256 x 8 x 8
        _, height, width = features.shape
        rows = [features[:, y0:y1, x0:x1].max(axis=(1, 2)) for x0, y0, x1, y1 in region_boxes(height, width)]
        return unit(np.stack(rows))


class LocalSift:
    """The panel's RootSIFT keypoints, each a vector of its own; a query votes per panel.

    Not one vector per panel but `keypoints` of them: a 30 % crop still shares dozens of keypoints
    with its source where a pooled vector of the whole has changed. The stored keypoints are spread
    over the panel (`spread_over_cells`): the strongest alone gather where the contrast is, and a
    crop of the quieter rest would find few of them. The query keeps its own strongest and also
    asks with their mirror permutation (flips; SIFT is rotation-invariant already).
    """

    dim, invariant, aggregate = 128, True, "votes"

    def __init__(self, keypoints: int = 64, query_keypoints: int = 128, working_side: int = 256) -> None:
        self.keypoints, self.query_keypoints, self.working_side = keypoints, query_keypoints, working_side
        self.name = f"local_sift-v2-{keypoints}kp-{working_side}px"

    def located(
        self, image: np.ndarray, count: int, spread: bool = False
    ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """(points (N, 2) in working px, RootSIFT (N, 128), working (height, width)) of the `count`
        strongest, or with `spread` of `count` chosen over the panel's cells from SPREAD_POOL times as many."""
        rgb = np.ascontiguousarray(image[..., :3])
        factor, (height, width) = self.working_size(rgb.shape)
        interpolation = cv2.INTER_AREA if factor < 1 else cv2.INTER_CUBIC
        rgb = cv2.resize(rgb, (width, height), interpolation=interpolation)
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        detected = count * SPREAD_POOL if spread else count
        keypoints, raw = cv2.SIFT_create(nfeatures=detected).detectAndCompute(gray, None)
        if raw is None or len(keypoints) < count // 2:  # faint texture: weaker extrema too
            keypoints, raw = cv2.SIFT_create(nfeatures=detected, contrastThreshold=0.01).detectAndCompute(gray, None)
        if raw is None or not len(keypoints):
            return np.zeros((0, 2), np.float32), np.zeros((0, 128), np.float32), gray.shape
        points = np.asarray([k.pt for k in keypoints], np.float32)
        if spread:
            chosen = spread_over_cells(points, np.asarray([k.response for k in keypoints]), count, gray.shape)
        else:
            chosen = np.arange(min(count, len(points)))
        vectors = unit(np.sqrt(raw / np.maximum(raw.sum(1, keepdims=True), 1e-7)))
        return points[chosen], vectors[chosen], gray.shape

    def working_size(self, shape: tuple[int, ...]) -> tuple[float, tuple[int, int]]:
        """(factor, (height, width)) of a panel of `shape` at the working size: every panel is
        described at one size, crops enlarged."""
        factor = self.working_side / max(shape[:2])
        return factor, (max(1, round(shape[0] * factor)), max(1, round(shape[1] * factor)))

    def describe(self, image: np.ndarray) -> np.ndarray:
        return self.describe_located(image)[0]

    def describe_located(self, image: np.ndarray) -> tuple[np.ndarray, bytes]:
        """The stored vectors and their keypoints' positions, packed for the panel table (`unpack_points`)."""
        points, vectors, _ = self.located(image, self.keypoints, spread=True)
        return vectors, self.pack_points(points)

    def pack_points(self, points: np.ndarray) -> bytes:
        """Working-size positions as one byte per coordinate (1 px steps at 256 px): 2 B per keypoint."""
        return np.clip(np.round(points * (255 / self.working_side)), 0, 255).astype(np.uint8).tobytes()

    def unpack_points(self, packed: bytes | None) -> np.ndarray:
        if not packed:
            return np.zeros((0, 2), np.float32)
        return np.frombuffer(packed, np.uint8).reshape(-1, 2).astype(np.float32) * (self.working_side / 255)

    def query_located(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(vectors, points, mirrored): the query's keypoints then their mirror permutations; a mirrored
        row's point is mirrored too (x -> width - 1 - x), so both halves fit a similarity to a source."""
        points, vectors, (_, width) = self.located(image, self.query_keypoints)
        flipped = points.copy()
        flipped[:, 0] = width - 1 - flipped[:, 0]
        mirrored = np.repeat([False, True], len(points))
        return np.concatenate([vectors, vectors[:, MIRROR_ORDER]]), np.concatenate([points, flipped]), mirrored

    def query(self, image: np.ndarray) -> np.ndarray:
        return self.query_located(image)[0]


def spread_over_cells(
    points: np.ndarray, responses: np.ndarray, count: int, shape: tuple[int, int], cells: int = SPREAD_CELLS
) -> np.ndarray:
    """Indices of `count` keypoints taken in turn from each of `cells` x `cells` cells of the panel,
    the strongest of each cell first: each cell's best, then each cell's second best, and so on
    (a cell with fewer keypoints than its turn is passed over). Returned in detection order."""
    height, width = shape
    row = np.minimum(points[:, 1] * cells // height, cells - 1)
    column = np.minimum(points[:, 0] * cells // width, cells - 1)
    cell = (row * cells + column).astype(np.int64)
    turn = np.zeros(len(points), np.int64)
    taken: dict[int, int] = {}
    for index in np.argsort(-responses, kind="stable").tolist():
        turn[index] = taken.get(cell[index], 0)
        taken[cell[index]] = turn[index] + 1
    return np.sort(np.lexsort((-responses, turn))[:count])


DESCRIPTORS = ("local_sift", "pooled_sift", "phash", "cnn", "pairnet")


def make_descriptor(
    name: str, index_dir: str | Path | None = None, checkpoint: str | Path | None = None, device: str = "cpu"
) -> Descriptor:
    """A descriptor by its short name; `pooled_sift` reads its codebook from `index_dir` when stored
    there; `pairnet` embeds with `checkpoint`, else with the one recorded in `index_dir`'s meta.json.
    The networks (`cnn`, `pairnet`) run on `device` (auto: the GPU when there is one)."""
    if checkpoint is not None and name != "pairnet":
        raise ValueError(f"descriptor_checkpoint is the weights of the pairnet descriptor; {name} takes none")
    if name == "phash":
        return PerceptualHash()
    if name == "cnn":
        return RandomCnn(device=device)
    if name == "local_sift":
        return LocalSift()
    if name == "pooled_sift":
        path = Path(index_dir) / "codebook.npy" if index_dir is not None else None
        return PooledSift(np.load(path) if path is not None and path.is_file() else None)
    if name == "pairnet":
        from collection.learned_descriptor import pairnet_descriptor

        return pairnet_descriptor(checkpoint, index_dir, device)
    raise ValueError(f"unknown descriptor {name!r}; expected one of {', '.join(DESCRIPTORS)}")


def query_vectors(descriptor: Descriptor, image: np.ndarray) -> np.ndarray:
    """The query's vectors: its own (local features), or its regions in four variants unless invariant."""
    if hasattr(descriptor, "query"):
        return descriptor.query(image)
    if descriptor.invariant:
        return descriptor.describe(image)
    return np.concatenate([descriptor.describe(variant(image, name)) for name in VARIANTS])
