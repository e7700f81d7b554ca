"""Tiled localization: overlapping tiles cover the image and blend back into one seamless map."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.preprocess import Preprocess
from inference.runtime import ModelLoadError
from inference.tiling import TiledLocalizer, blend_window, overlapping_positions


class PixelwiseLocalizer:
    """A stand-in runtime whose map depends on each pixel alone, so tiling must not change it."""

    name, threshold, is_localizer = "pixelwise", 0.5, True
    trained_preprocess = Preprocess(size=32, mode="center_crop")
    preprocess = Preprocess(size=None, mode="none")

    def __init__(self) -> None:
        self.tile_shapes: list[tuple[int, ...]] = []

    def predict(self, images: np.ndarray) -> dict[str, np.ndarray]:
        self.tile_shapes.append(images.shape)
        maps = images[:, :1] ** 2
        return {"score": maps.reshape(len(images), -1).max(1), "mask": maps}


def test_positions_cover_the_length_with_the_requested_overlap():
    for length, size, overlap in [(100, 32, 8), (33, 32, 8), (32, 32, 8), (257, 64, 16)]:
        starts = overlapping_positions(length, size, overlap)
        assert starts[0] == 0 and starts[-1] == max(0, length - size)
        assert all(b - a <= size - overlap for a, b in zip(starts, starts[1:]))
        covered = np.zeros(length, bool)
        for start in starts:
            covered[start : start + size] = True
        assert covered.all()


def test_blend_window_is_lowest_at_the_tile_border_and_positive_everywhere():
    window = blend_window(32, 8)
    assert window.min() > 0 and window[16, 16] == 1.0 and window[0, 0] < window[4, 4] < window[8, 8]


def test_tiled_map_of_a_pixelwise_model_equals_the_whole_image_map_and_the_score_is_the_top_tile():
    runtime = PixelwiseLocalizer()
    tiled = TiledLocalizer(runtime, overlap=0.25, batch_size=4)
    image = np.random.default_rng(0).random((1, 3, 75, 101)).astype(np.float32)
    out = tiled.predict(image)
    assert out["mask"].shape == (1, 1, 75, 101)
    np.testing.assert_allclose(out["mask"][0, 0], image[0, 0] ** 2, rtol=1e-5, atol=1e-6)
    assert out["score"][0] == pytest.approx(float((image[0, 0] ** 2).max()))
    assert all(shape[0] <= 4 and shape[2:] == (32, 32) for shape in runtime.tile_shapes)  # memory bound


def test_small_images_are_scored_whole_and_classifiers_are_refused():
    runtime = PixelwiseLocalizer()
    out = TiledLocalizer(runtime).predict(np.ones((1, 3, 20, 30), np.float32))
    assert out["mask"].shape == (1, 1, 20, 30) and runtime.tile_shapes == [(1, 3, 20, 30)]
    runtime.is_localizer = False
    with pytest.raises(ModelLoadError, match="not a localizer"):
        TiledLocalizer(runtime)


def test_whole_image_localizers_batch_images_of_one_size_and_score_mixed_sizes_one_by_one():
    from inference.batches import collate_samples
    from inference.scoring import effective_batch_size, predict_batch

    runtime = PixelwiseLocalizer()
    assert effective_batch_size(runtime, 8) == 8
    same = collate_samples(
        [
            {"index": i, "path": f"{i}.png", "image": np.full((20, 30, 3), 10 * i, np.uint8), "size": (20, 30)}
            for i in range(3)
        ]
    )
    out = predict_batch(runtime, same["image"])
    assert runtime.tile_shapes == [(3, 3, 20, 30)] and out["mask"].shape == (3, 1, 20, 30)
    mixed = collate_samples(
        [
            {"index": i, "path": f"{i}.png", "image": np.zeros((20 + i, 30, 3), np.uint8), "size": (20 + i, 30)}
            for i in range(2)
        ]
    )
    out = predict_batch(runtime, mixed["image"])
    assert runtime.tile_shapes[1:] == [(1, 3, 20, 30), (1, 3, 21, 30)]
    assert out["score"].shape == (2,) and [m.shape for m in out["mask"]] == [(1, 20, 30), (1, 21, 30)]
