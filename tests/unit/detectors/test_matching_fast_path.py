"""The matching core's fast path: keypoints found on a shrunk copy, matches from similarities, the
low-texture search turned once per panel and skipped for well-described panels."""

from __future__ import annotations

import numpy as np
import pytest

from detectors.low_texture import DIHEDRAL, MAX_CACHED_FACTORS, correlation_search, dihedral, dihedral_to_original
from detectors.matching import describe_panel, least_squares_line, mutual_matches
from detectors.pair_matching import match_pair
from synthesis.duplication import global_duplication
from synthesis.figure_panels import blot_panel


@pytest.fixture(scope="module")
def coffee() -> np.ndarray:
    from datamodules.io import read_image
    from synthesis.embedded import bundled_photo_paths

    return next(read_image(p) for p in bundled_photo_paths() if p.name == "coffee.png")[:240, :320]


def brute_force_mutual_matches(a: np.ndarray, b: np.ndarray, ratio: float) -> set[tuple[int, int]]:
    """The definition, one descriptor at a time: nearest both ways, and Lowe's ratio both ways."""
    distance = np.linalg.norm(a[:, None] - b[None], axis=2)
    found = set()
    for i in range(len(a)):
        j = int(distance[i].argmin())
        row, column = np.sort(distance[i]), np.sort(distance[:, j])
        if int(distance[:, j].argmin()) == i and row[0] < ratio * row[1] and column[0] < ratio * column[1]:
            found.add((i, j))
    return found


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_mutual_matches_are_those_of_the_definition():
    rng = np.random.default_rng(0)
    a = unit(rng.random((60, 16)))
    b = unit(np.concatenate([a[:30] + rng.normal(0, 0.03, (30, 16)), rng.random((40, 16))]))
    ia, ib = mutual_matches(a, b, 0.8)
    assert set(zip(ia.tolist(), ib.tolist())) == brute_force_mutual_matches(a, b, 0.8)
    assert len(ia) >= 25  # the perturbed copies are found


def test_the_closed_form_line_is_numpys_least_squares_fit():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 255, 5000)
    y = 0.7 * x + 12 + rng.normal(0, 4, x.size)
    assert least_squares_line(x, y) == pytest.approx(tuple(np.polyfit(x, y, 1)), rel=1e-9)
    assert least_squares_line(np.full(10, 3.0), np.full(10, 5.0)) == (1.0, 2.0)


@pytest.mark.parametrize("flip, turns", DIHEDRAL)
def test_the_dihedral_map_sends_each_turned_pixel_to_its_origin(flip, turns):
    image = np.arange(5 * 7, dtype=np.float32).reshape(5, 7)
    turned = dihedral(image, flip, turns)
    matrix = dihedral_to_original(image.shape, flip, turns)
    for v in range(turned.shape[0]):
        for u in range(turned.shape[1]):
            x, y, _ = np.rint(matrix @ [u, v, 1.0]).astype(int)
            assert turned[v, u] == image[y, x]


def test_keypoints_found_on_a_shrunk_copy_lie_at_working_coordinates(coffee):
    full = describe_panel(coffee, max_side=320)
    shrunk = describe_panel(coffee, max_side=320, detect_side=160)
    assert shrunk.shape == full.shape and 0 < len(shrunk.points) < len(full.points)
    assert shrunk.points[:, 0].max() > 0.8 * full.shape[1]  # spread over the whole working grid


def test_a_mirrored_copy_is_found_with_keypoints_from_a_shrunk_copy(coffee):
    pair = global_duplication(coffee, np.random.default_rng(0), geometric="hflip", parameters=[])
    found = match_pair(
        describe_panel(pair.panel_a, max_side=320, detect_side=160),
        describe_panel(pair.panel_b, max_side=320, detect_side=160),
    )
    assert found.method == "sift" and found.geometry.operations() == ["hflip"]
    assert found.mask_a.mean() > 0.85 and found.mask_b.mean() > 0.85


def test_the_low_texture_search_turns_a_panel_once_and_gives_the_same_answer_again():
    blot = blot_panel(np.random.default_rng(3))
    panel_a, panel_b = describe_panel(blot), describe_panel(np.ascontiguousarray(blot[::-1, ::-1]))
    first = correlation_search(panel_a, panel_b)
    cached = dict(panel_b.cache)
    again = correlation_search(panel_a, panel_b)
    assert any(key.startswith("turned:") for key in cached) and panel_b.cache.keys() == cached.keys()
    assert again[1] == first[1] and np.array_equal(again[0], first[0]) and first[1] > 0.9


def test_a_panel_keeps_its_turned_copies_for_a_few_partner_sizes_only():
    blot = describe_panel(blot_panel(np.random.default_rng(3)))
    for side in (200, 220, 240, 260, 280, 300):
        correlation_search(describe_panel(blot_panel(np.random.default_rng(4), size=(120, side))), blot)
    assert sum(key.startswith("turned:") for key in blot.cache) == MAX_CACHED_FACTORS


def test_well_described_panels_skip_the_low_texture_search(coffee):
    other = np.ascontiguousarray(np.random.default_rng(2).integers(0, 255, coffee.shape, dtype=np.uint8))
    panel_a, panel_b = describe_panel(coffee, max_side=256), describe_panel(other, max_side=256)
    found = match_pair(panel_a, panel_b, fallback_keypoints=10)
    assert found.method == "none" and found.reason == "no consistent matches"
    assert not panel_b.cache  # the search never ran
    match_pair(panel_a, panel_b)  # without the gate it does
    assert panel_b.cache


def test_a_blot_copy_still_gets_the_low_texture_search_behind_the_gate():
    blot = blot_panel(np.random.default_rng(3))
    panel_a, panel_b = describe_panel(blot), describe_panel(np.ascontiguousarray(blot[::-1, ::-1]))
    assert min(len(panel_a.points), len(panel_b.points)) < 100
    found = match_pair(panel_a, panel_b, fallback_keypoints=100)
    assert found.method == "correlation" and found.mask_a.mean() > 0.5
