"""Tiled scoring looks at every tile of an image, whichever batch a tile falls in: the image score
of a localizer is the highest tile score; a classifier's is the max or the mean over all tiles."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.preprocess import Preprocess
from inference.tiling import TiledLocalizer, TiledRuntime, blend_window, tile_image, tile_positions

HOT = 0.9


class BrightestPixel:
    """A stand-in runtime: the map is the red channel, the score the brightest red pixel of the
    input."""

    name, threshold = "brightest", 0.5

    def __init__(self, localizer: bool, size: int = 32) -> None:
        self.is_localizer = localizer
        self.trained_preprocess = Preprocess(size=size, mode="center_crop")
        self.preprocess = Preprocess(size=None, mode="none") if localizer else self.trained_preprocess
        self.batches = 0

    def predict(self, images: np.ndarray) -> dict[str, np.ndarray]:
        self.batches += 1
        red = np.asarray(images)[:, :1]
        return {"score": red.reshape(len(red), -1).max(1), "mask": red}


def image_with_hot_spot(height: int, width: int, y: int, x: int) -> np.ndarray:
    image = np.full((3, height, width), 0.1, np.float32)
    image[0, y : y + 3, x : x + 3] = HOT
    return image


SPOTS = {"top left": (1, 2), "middle": (40, 50), "bottom right": (72, 98)}


@pytest.mark.parametrize("spot", SPOTS, ids=list(SPOTS))
def test_localizer_score_is_the_hot_tile_wherever_it_lies(spot):
    runtime = BrightestPixel(localizer=True)
    image = image_with_hot_spot(75, 101, *SPOTS[spot])  # odd, non-square: 3 x 4 tiles of 32 at 25 % overlap
    out = TiledLocalizer(runtime, overlap=0.25, batch_size=2).predict(image[None])
    assert runtime.batches == 6  # the 12 tiles take several batches
    assert out["score"][0] == pytest.approx(HOT)
    y, x = SPOTS[spot]
    assert out["mask"].shape == (1, 1, 75, 101)
    assert out["mask"][0, 0, y + 1, x + 1] == pytest.approx(HOT) and out["mask"][0, 0].min() == pytest.approx(0.1)


@pytest.mark.parametrize("spot", SPOTS, ids=list(SPOTS))
def test_classifier_max_over_tiles_finds_the_hot_tile_wherever_it_lies(spot):
    runtime = BrightestPixel(localizer=False)
    image = image_with_hot_spot(75, 101, *SPOTS[spot])
    out = TiledRuntime(runtime, reduce="max", batch_size=3).predict(image[None])
    assert runtime.batches == 4  # 3 x 4 tiles of 32 (no overlap, flush last row and column)
    assert out["score"][0] == pytest.approx(HOT)


def test_classifier_mean_is_over_every_tile_of_every_batch():
    runtime = BrightestPixel(localizer=False)
    image = image_with_hot_spot(75, 101, *SPOTS["top left"])
    out = TiledRuntime(runtime, reduce="mean", batch_size=5).predict(image[None])
    assert out["score"][0] == pytest.approx((HOT + 11 * 0.1) / 12)  # one hot tile of 12


def test_tiles_cover_every_pixel_of_an_odd_non_square_image():
    height, width = 45, 77
    image = np.arange(3 * height * width, dtype=np.float32).reshape(3, height, width)
    tiles = tile_image(image, 16)
    assert tiles.shape[1:] == (3, 16, 16)
    assert set(np.unique(tiles[:, 0])) == set(np.unique(image[0]))
    small = tile_image(image[:, :9, :13], 16)  # smaller than a tile: one zero-padded tile
    assert small.shape == (1, 3, 16, 16) and np.array_equal(small[0, :, :9, :13], image[:, :9, :13])


@pytest.mark.parametrize(
    "length, size, expected",
    [(64, 32, [0, 32]), (96, 32, [0, 32, 64]), (70, 32, [0, 32, 38]), (32, 32, [0]), (20, 32, [0])],
)
def test_tile_offsets_cover_the_length_once_each(length, size, expected):
    assert tile_positions(length, size) == expected


def test_an_image_of_whole_tiles_averages_each_tile_once():
    runtime = BrightestPixel(localizer=False)
    image = image_with_hot_spot(64, 96, 1, 2)  # 2 x 3 tiles of 32, exactly
    out = TiledRuntime(runtime, reduce="mean", batch_size=4).predict(image[None])
    assert out["score"][0] == pytest.approx((HOT + 5 * 0.1) / 6)


def test_blend_weights_ramp_from_the_tile_border_over_the_overlap():
    window = blend_window(32, 8)
    ramp = np.clip((np.minimum(np.arange(32), np.arange(32)[::-1]) + 0.5) / 8, 1e-3, 1.0)
    np.testing.assert_allclose(window, np.outer(ramp, ramp), rtol=1e-6)
    assert window[0, 0] == pytest.approx((0.5 / 8) ** 2) and window[8, 8] == 1.0


@pytest.mark.parametrize("shape", [(100, 20), (20, 101), (33, 31)])
def test_long_narrow_images_are_tiled_and_never_sent_whole(shape):
    runtime = BrightestPixel(localizer=True)
    runtime.shapes = []
    predict = runtime.predict
    runtime.predict = lambda images: (runtime.shapes.append(images.shape), predict(images))[1]
    image = np.random.default_rng(0).random((1, 3, *shape)).astype(np.float32)
    out = TiledLocalizer(runtime, overlap=0.25, batch_size=2).predict(image)
    assert all(h <= 32 and w <= 32 for *_, h, w in runtime.shapes)
    assert out["mask"].shape == (1, 1, *shape)
    np.testing.assert_allclose(out["mask"][0, 0], image[0, 0], rtol=1e-5, atol=1e-6)
    assert out["score"][0] == pytest.approx(float(image[0, 0].max()))


@pytest.mark.parametrize("shape", [(9, 40), (40, 9)])
def test_an_image_thinner_than_a_tile_is_zero_padded_to_whole_tiles(shape):
    image = np.ones((3, *shape), np.float32)
    tiles = tile_image(image, 16)
    assert tiles.shape[1:] == (3, 16, 16) and len(tiles) == 3
    thin = (slice(None), slice(None), slice(None, 9)) if shape[0] == 9 else (..., slice(None, 9))
    rest = (slice(None), slice(None), slice(9, None)) if shape[0] == 9 else (..., slice(9, None))
    assert (tiles[thin] == 1).all() and (tiles[rest] == 0).all()  # the image, then zeros


def test_a_model_that_preprocesses_in_its_graph_is_refused_for_what_it_is(tiny_model, tmp_path):
    """It was refused as a model of mode 'none' and size None, which it is not."""
    from exporting.variants import build_variant
    from inference.runtime import ModelLoadError, OnnxRuntime

    build_variant(tiny_model["onnx"], tmp_path / "u8.onnx", graph_preprocess=True)
    with pytest.raises(ModelLoadError, match="preprocesses inside its graph .*tile with a plain export"):
        TiledRuntime(OnnxRuntime(tmp_path / "u8.onnx"))
