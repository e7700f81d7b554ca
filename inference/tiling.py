"""Scoring images larger than a detector's input as the mean or max over native-resolution tiles."""
from __future__ import annotations

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
    return np.stack([image[:, y:y + size, x:x + size]
                     for y in tile_positions(height, size) for x in tile_positions(width, size)])


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
        if runtime.is_localizer or not runtime.preprocess.size or runtime.preprocess.mode == "resize":
            raise ModelLoadError(f"tiling needs a classifier with a crop or pad input size; {runtime.name} has "
                                 f"mode={runtime.preprocess.mode!r}, size={runtime.preprocess.size}")
        self.runtime, self.reduce, self.batch_size = runtime, reduce, batch_size
        self.name, self.threshold, self.is_localizer = runtime.name, runtime.threshold, False
        self.tile_size = int(runtime.preprocess.size)
        self.preprocess = Preprocess(size=None, mode="none", mean=runtime.preprocess.mean, std=runtime.preprocess.std)

    def predict(self, images: np.ndarray) -> dict[str, np.ndarray]:
        scores = []
        for image in np.asarray(images):
            tiles = tile_image(image, self.tile_size)
            tile_scores = np.concatenate([np.asarray(self.runtime.predict(tiles[i:i + self.batch_size])["score"])
                                          for i in range(0, len(tiles), self.batch_size)])
            scores.append(tile_scores.max() if self.reduce == "max" else tile_scores.mean())
        return {"score": np.asarray(scores, dtype=np.float32)}
