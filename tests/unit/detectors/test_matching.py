"""The matching core (detectors.matching, detectors.pair_matching): mirrored descriptors, geometry
names, pairs found with their masks, fallbacks."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from detectors.low_texture import correlation_search
from detectors.matching import MIRROR_ORDER, Geometry, describe_panel, furniture_mask
from detectors.pair_matching import match_pair
from synthesis.duplication import global_duplication, local_duplication
from synthesis.figure_panels import blot_panel, chart_panel


@pytest.fixture(scope="module")
def photos() -> dict[str, np.ndarray]:
    from datamodules.io import read_image
    from synthesis.embedded import bundled_photo_paths

    return {p.name: read_image(p) for p in bundled_photo_paths() if p.name in ("astronaut.png", "coffee.png")}


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def test_mirrored_descriptors_are_those_computed_on_the_mirrored_image(photos):
    gray = cv2.cvtColor(cv2.resize(photos["astronaut.png"], (256, 256)), cv2.COLOR_RGB2GRAY)
    sift = cv2.SIFT_create(nfeatures=300)
    keypoints, descriptors = sift.detectAndCompute(gray, None)
    mirrored = [
        cv2.KeyPoint(255 - k.pt[0], k.pt[1], k.size, (180 - k.angle) % 360, k.response, k.octave) for k in keypoints
    ]
    _, on_mirror = sift.compute(np.ascontiguousarray(gray[:, ::-1]), mirrored)
    error = np.abs(descriptors[:, MIRROR_ORDER] - on_mirror).mean()
    unrelated = np.abs(descriptors - on_mirror).mean()
    assert error < 0.2 * unrelated


@pytest.mark.parametrize(
    "matrix, expected",
    [
        ([[1, 0, 5], [0, 1, 3]], []),
        ([[-1, 0, 99], [0, 1, 0]], ["hflip"]),
        ([[1, 0, 0], [0, -1, 99]], ["vflip"]),
        ([[-1, 0, 99], [0, -1, 99]], ["rotate180"]),
        ([[1.3, 0, 0], [0, 1.3, 0]], ["scaling"]),
        ([[0, -0.8, 0], [0.8, 0, 0]], ["rotation", "scaling"]),
    ],
)
def test_geometry_names_the_operations_of_a_map(matrix, expected):
    assert Geometry.of(np.asarray(matrix, float)).operations() == expected


def test_a_mirrored_brightened_copy_is_found_with_both_masks(photos):
    pair = global_duplication(
        photos["coffee.png"][:240, :320], np.random.default_rng(0), geometric="hflip", parameters=["brightness"]
    )
    found = match_pair(describe_panel(pair.panel_a, max_side=256), describe_panel(pair.panel_b, max_side=256))
    assert found.method == "sift" and found.geometry.operations() == ["hflip"]
    assert iou(found.mask_a, pair.mask_a) > 0.85 and iou(found.mask_b, pair.mask_b) > 0.85
    assert found.photometric["bias"] > 15  # the brightness change shows in the colour fit


def test_a_scaled_overlapping_crop_maps_its_shared_region(photos):
    pair = local_duplication(
        photos["astronaut.png"], np.random.default_rng(1), geometric=["scaling"], parameters=[], scale=1.3
    )
    found = match_pair(describe_panel(pair.panel_a, max_side=256), describe_panel(pair.panel_b, max_side=256))
    assert found.geometry.scale == pytest.approx(1.3, rel=0.05)
    assert iou(found.mask_a, pair.mask_a) > 0.8 and iou(found.mask_b, pair.mask_b) > 0.8


def test_unrelated_photos_share_nothing(photos):
    found = match_pair(
        describe_panel(photos["astronaut.png"], max_side=256), describe_panel(photos["coffee.png"], max_side=256)
    )
    assert found.method == "none" and not found.mask_a.any()


def test_flat_panels_have_no_keypoints_and_say_so():
    flat = np.full((64, 64, 3), 120, np.uint8)
    found = match_pair(describe_panel(flat), describe_panel(flat.copy()))
    assert found.method == "none" and "no keypoints" in found.reason


def test_the_correlation_search_finds_a_rotated_blot():
    blot = blot_panel(np.random.default_rng(3))
    turned = np.ascontiguousarray(blot[::-1, ::-1])
    matrix, peak = correlation_search(describe_panel(blot), describe_panel(turned))
    height, width = blot.shape[:2]
    point = matrix @ np.array([10.0, 20.0, 1.0])
    assert peak > 0.9
    assert point == pytest.approx([width - 1 - 10, height - 1 - 20], abs=6)


def test_chart_axes_and_labels_are_furniture_and_lose_their_keypoints():
    chart = chart_panel(np.random.default_rng(0))
    gray = cv2.cvtColor(chart, cv2.COLOR_RGB2GRAY)
    furniture = furniture_mask(gray)
    height = chart.shape[0]
    assert furniture[height - 36, 100:300].all()  # the x axis
    assert furniture[height - 24 : height - 14, 40:60].any()  # a tick label
    panel = describe_panel(chart)
    inside = furniture[panel.points[:, 1].astype(int), panel.points[:, 0].astype(int)]
    assert not inside.any()


def test_a_shift_inside_one_image_does_not_grow_over_flat_background():
    """A textured square copied 100 px to the right on a flat page: with flat pixels seeding the
    region (pairs of panels) the shift also 'copies' the page; seeded by texture only (self-matching)
    the region is the square."""
    from detectors.matching import shared_region

    rng = np.random.default_rng(0)
    page = np.full((200, 256, 3), 200, np.uint8)
    square = rng.integers(0, 256, (60, 60, 1), dtype=np.uint8).repeat(3, axis=2)
    page[70:130, 20:80] = square
    page[70:130, 120:180] = square
    panel = describe_panel(page, max_side=256, mask_furniture=False)
    shift = np.float32([[1, 0, 100], [0, 1, 0]])
    truth = np.zeros(page.shape[:2], bool)
    truth[70:130, 20:80] = True
    textured = shared_region(panel, panel, shift, exclude_near=20, flat_agrees=False).mask_a
    with_flat = shared_region(panel, panel, shift, exclude_near=20).mask_a
    near_square = cv2.dilate(truth.astype(np.uint8), np.ones((17, 17), np.uint8)) > 0  # windows straddle its edge
    assert (textured & truth).sum() > 0.95 * truth.sum() and not (textured & ~near_square).any()
    assert with_flat.sum() > 3 * truth.sum()
