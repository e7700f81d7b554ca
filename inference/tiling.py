"""Scoring images larger than a detector's input as the mean or max over native-resolution tiles."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from datamodules.preprocess import Preprocess
from inference.runtime import ModelLoadError, OnnxRuntime, TorchRuntime


def tile_positions(length: int, size: int) -> list[int]:
    """Offsets of `size`-long windows covering `length`: a grid from 0, plus one flush with the end."""
    if length <= size:
        return [0]
    positions = list(range(0, length - size + 1, size))
    return positions + [length - size] if positions[-1] != length - size else positions


def tile_image(image: np.ndarray, size: int) -> np.ndarray:
    """3 x H x W -> T x 3 x size x size tiles covering the image (zero-padded at the bottom/right
    when it is smaller than a tile, as the `pad` mode does)."""
    _, height, width = image.shape
    if height < size or width < size:
        image = np.pad(image, [(0, 0), (0, max(0, size - height)), (0, max(0, size - width))])
        _, height, width = image.shape
    return np.stack(
        [
            image[:, y : y + size, x : x + size]
            for y in tile_positions(height, size)
            for x in tile_positions(width, size)
        ]
    )


class TiledRuntime:
    """Scores every image as the mean (or max) over native-resolution tiles that cover all of it.

    Artifact detectors are trained on crops; cropping once at inference ignores most of a large
    image, and resizing would erase the traces. Wraps any runtime (.ckpt or .onnx); images are fed
    whole (`preprocess.mode` none), one at a time, and their tiles are batched.
    """

    REDUCTIONS = ("mean", "max")

    def __init__(self, runtime: TorchRuntime | OnnxRuntime, reduce: str = "mean", batch_size: int = 32) -> None:
        if reduce not in self.REDUCTIONS:
            raise ModelLoadError(f"tile_reduce must be one of {self.REDUCTIONS}, got {reduce!r}")
        if getattr(runtime, "input_name", "image") != "image":
            raise ModelLoadError(
                f"tiling cuts the image before the network, but {runtime.name} preprocesses inside its graph "
                "(export.py graph_preprocess=true): tile with a plain export or the checkpoint"
            )
        if runtime.is_localizer or not runtime.preprocess.size or runtime.preprocess.mode in ("resize", "resize_crop"):
            raise ModelLoadError(
                f"tiling needs a classifier with a crop or pad input size; {runtime.name} has "
                f"mode={runtime.preprocess.mode!r}, size={runtime.preprocess.size}"
            )
        self.runtime, self.reduce, self.batch_size = runtime, reduce, batch_size
        self.name, self.threshold, self.is_localizer = runtime.name, runtime.threshold, False
        # it decides as the model does: the model's per-category thresholds and calibrated target
        self.category_thresholds = getattr(runtime, "category_thresholds", None)
        self.target_fpr = getattr(runtime, "target_fpr", None)
        self.calibration = getattr(runtime, "calibration", None)
        self.tile_size = int(runtime.preprocess.size)
        self.preprocess = Preprocess(size=None, mode="none", mean=runtime.preprocess.mean, std=runtime.preprocess.std)

    def predict(self, images: np.ndarray) -> dict[str, np.ndarray]:
        scores = []
        for image in np.asarray(images):
            tiles = tile_image(image, self.tile_size)
            tile_scores = np.concatenate(
                [
                    np.asarray(self.runtime.predict(tiles[i : i + self.batch_size])["score"])
                    for i in range(0, len(tiles), self.batch_size)
                ]
            )
            scores.append(tile_scores.max() if self.reduce == "max" else tile_scores.mean())
        return {"score": np.asarray(scores, dtype=np.float32)}


def overlapping_positions(length: int, size: int, overlap: int) -> list[int]:
    """Offsets of `size`-long windows covering `length` with at least `overlap` px shared between
    neighbours: an even grid from 0 to `length - size`."""
    if length <= size:
        return [0]
    count = 1 + -(-(length - size) // max(1, size - overlap))
    return [round(i * (length - size) / (count - 1)) for i in range(count)]


def overlap_pixels(overlap: float, tile_size: int) -> int:
    """The pixels neighbouring tiles share: `overlap`, a fraction of the tile side, as tiles are cut."""
    if not 0.0 <= overlap < 1.0:
        raise ModelLoadError(f"tile overlap must be in [0, 1), got {overlap}")
    return int(round(overlap * int(tile_size)))


def blend_window(size: int, overlap: int) -> np.ndarray:
    """size x size weights ramping up over `overlap` px from each edge, so a tile's border pixels
    (where the network sees least context) count least, and seams between tiles vanish."""
    ramp = np.clip((np.minimum(np.arange(size), np.arange(size)[::-1]) + 0.5) / max(1, overlap), 1e-3, 1.0)
    return np.outer(ramp, ramp).astype(np.float32)


class TiledLocalizer:
    """Localization maps of images too large to score at once, from overlapping tiles blended together.

    Tiles of `tile_size` (the training crop size by default) overlap by `overlap` of their side;
    each tile's map is weighted by `blend_window` and the weighted maps are averaged, so seams do not
    show. The image score is the highest tile score: a manipulated region lies in some tile.
    Memory: the device holds `batch_size` tiles at a time; the host holds the image and two float32
    H x W accumulators (about 11 bytes per pixel in all), whatever the image size.
    """

    def __init__(
        self,
        runtime: TorchRuntime | OnnxRuntime,
        tile_size: int | None = None,
        overlap: float = 0.25,
        batch_size: int = 8,
    ) -> None:
        if not runtime.is_localizer:
            raise ModelLoadError(f"{runtime.name} is not a localizer; TiledRuntime scores classifiers' tiles")
        tile_size = tile_size or runtime.trained_preprocess.size
        if not tile_size:
            raise ModelLoadError(f"{runtime.name} has no training crop size: set tile_size")
        self.runtime, self.batch_size = runtime, batch_size
        self.tile_size, self.overlap = int(tile_size), overlap_pixels(overlap, tile_size)
        self.name, self.threshold, self.is_localizer = runtime.name, runtime.threshold, True
        # it decides as the model does: the model's per-category thresholds and calibrated target
        self.category_thresholds = getattr(runtime, "category_thresholds", None)
        self.target_fpr = getattr(runtime, "target_fpr", None)
        self.calibration = getattr(runtime, "calibration", None)
        self.preprocess = runtime.preprocess  # the whole image, at its own size
        self.trained_preprocess = runtime.trained_preprocess
        self.window = blend_window(self.tile_size, self.overlap)

    def predict(self, images: np.ndarray) -> dict[str, np.ndarray]:
        scores, maps = [], []
        for image in np.asarray(images, dtype=np.float32):
            score, prob = self.predict_one(image)
            scores.append(score)
            maps.append(prob[None])
        return {"score": np.asarray(scores, dtype=np.float32), "mask": np.stack(maps)}

    def predict_one(self, image: np.ndarray) -> tuple[float, np.ndarray]:
        """(score, H x W map) of one 3 x H x W image."""
        _, height, width = image.shape
        size = self.tile_size
        if height <= size and width <= size:
            out = self.runtime.predict(image[None])
            return float(out["score"][0]), np.asarray(out["mask"][0, 0], dtype=np.float32)
        window = self.window[: min(size, height), : min(size, width)]
        boxes = [
            (y, x)
            for y in overlapping_positions(height, size, self.overlap)
            for x in overlapping_positions(width, size, self.overlap)
        ]
        total = np.zeros((height, width), np.float32)
        weight = np.zeros((height, width), np.float32)
        best = 0.0
        for start in range(0, len(boxes), self.batch_size):
            chunk = boxes[start : start + self.batch_size]
            tiles = np.stack([image[:, y : y + size, x : x + size] for y, x in chunk])
            out = self.runtime.predict(tiles)
            best = max(best, float(np.max(out["score"])))
            for (y, x), prob in zip(chunk, np.asarray(out["mask"], dtype=np.float32)[:, 0]):
                total[y : y + size, x : x + size] += prob * window
                weight[y : y + size, x : x + size] += window
        return best, total / weight


def tile_settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """How images are scored, as far as tiles go (`tiles`, and with them `tile_reduce`, `tile_size`,
    `tile_overlap`): what a calibration records beside its threshold and infer.py compares, since
    scores over tiles are spread otherwise than scores of one crop."""
    if not options.get("tiles"):
        return {"tiles": False}
    defaults = {"tile_reduce": "mean", "tile_size": None, "tile_overlap": 0.25}
    return {"tiles": True, **{key: options.get(key, default) for key, default in defaults.items()}}


def scoring_tiles(settings: Mapping[str, Any], runtime: Any) -> dict[str, Any]:
    """Of `tile_settings`, those that change `runtime`'s scores, as `tiled` uses them: a classifier's
    tiles are its input size, without overlap, their scores reduced by `tile_reduce`; a localizer's
    are `tile_size` (none: the training crop) overlapping by `tile_overlap`, its score their highest.
    Calibrations and resumed runs are compared on these alone, the overlap as the pixels it comes to
    (given back as their fraction of the side: 0.25 and 0.251 of 64 px are both 16 px, 0.25)."""
    if not settings.get("tiles"):
        return {"tiles": False}
    if not runtime.is_localizer:
        return {"tiles": True, "tile_reduce": settings.get("tile_reduce", "mean")}
    size = settings.get("tile_size") or getattr(runtime, "trained_preprocess", runtime.preprocess).size
    overlap = settings.get("tile_overlap", 0.25)
    if size and isinstance(overlap, (int, float)) and 0.0 <= overlap < 1.0:  # others: `tiled` refuses them
        overlap = overlap_pixels(overlap, size) / int(size)
    return {"tiles": True, "tile_size": size, "tile_overlap": overlap}


def settings_text(settings: Mapping[str, Any]) -> str:
    if not settings.get("tiles"):
        return "without tiles"
    return "with tiles ({})".format(", ".join(f"{k}={v}" for k, v in settings.items() if k != "tiles"))


def tiled(runtime: TorchRuntime | OnnxRuntime, settings: Mapping[str, Any], batch_size: int) -> Any:
    """`runtime` scoring as `settings` (`tile_settings`) say: a localizer's maps stitched from
    overlapping tiles, a classifier's score reduced over tiles, or the runtime itself."""
    if not settings.get("tiles"):
        return runtime
    if runtime.is_localizer:
        return TiledLocalizer(
            runtime, tile_size=settings["tile_size"], overlap=settings["tile_overlap"], batch_size=batch_size
        )
    return TiledRuntime(runtime, reduce=settings["tile_reduce"], batch_size=batch_size)
