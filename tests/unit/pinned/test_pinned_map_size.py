"""Saved localization maps keep the input image's geometry: height stays height and width stays
width for non-square, odd-sized images, whatever size the model saw; 0.5 stays on the positive side
of the 8-bit encoding."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.io import read_image
from inference.masks import read_map, save_mask, save_overlay, to_uint8_map


def half_map(shape: tuple[int, int], axis: int) -> np.ndarray:
    """A probability map that is 1 on the first half along `axis` (rows 0, columns 1), else 0."""
    prob = np.zeros(shape, np.float32)
    if axis == 0:
        prob[: shape[0] // 2] = 1.0
    else:
        prob[:, : shape[1] // 2] = 1.0
    return prob


@pytest.mark.parametrize(
    "network, image", [((8, 12), (37, 53)), ((12, 8), (53, 37)), ((16, 16), (23, 61))]
)
@pytest.mark.parametrize("axis", [0, 1])
def test_a_map_is_resized_to_the_image_height_and_width(network, image, axis):
    out = to_uint8_map(half_map(network, axis), image)
    assert out.shape == image and out.dtype == np.uint8
    expected = half_map(image, axis) * 255
    interior = (
        np.abs(np.arange(image[axis]) - image[axis] / 2) > image[axis] / 8
    )  # away from the edge ramp
    index = (interior, slice(None)) if axis == 0 else (slice(None), interior)
    np.testing.assert_array_equal(out[index], expected[index])


def test_saved_maps_read_back_at_the_original_size(tmp_path):
    path = save_mask(tmp_path, 3, "../odd name.jpg", half_map((9, 14), 1), (41, 67))
    assert path.parent == tmp_path
    back = read_map(str(path))
    assert back.shape == (41, 67)
    assert back[:, :30].min() == 1.0 and back[:, 38:].max() == 0.0


def test_an_overlay_is_drawn_over_a_non_square_picture_in_place(tmp_path):
    picture = np.zeros((3, 21, 34), np.float32)  # as the network saw it: 3 x H x W in [0, 1]
    save_overlay(tmp_path, 0, "a.png", picture, half_map((7, 10), 0))
    [written] = list(tmp_path.glob("*.jpg"))
    overlay = read_image(written)
    assert overlay.shape == (21, 34, 3)
    assert (
        overlay[:7, :, 0].mean() > 100 and overlay[14:, :, 0].mean() < 20
    )  # red on the top half only


def test_probability_one_half_stays_positive_through_the_8_bit_map(tmp_path):
    prob = np.array([[0.5, np.nextafter(np.float32(0.498), np.float32(0)), 1.0, 0.0]], np.float32)
    pixels = to_uint8_map(prob, prob.shape)
    assert pixels.tolist() == [[128, 127, 255, 0]]
    back = read_map(str(save_mask(tmp_path, 0, "x.png", prob, prob.shape)))
    assert (back >= 0.5).tolist() == [[True, False, True, False]]
