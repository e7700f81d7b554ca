"""Splicing, copy-move and inpainting: masks cover every changed pixel, results repeat per seed."""

import cv2
import numpy as np
import pytest
from skimage import data

from synthesis.common import changed_pixels
from synthesis.copy_move import content_share, copy_move, farthest_grid_position, inpaint_region
from synthesis.segment import object_candidates, otsu_object_mask
from synthesis.splicing import pair_similarity, rank_pairs, splice, splice_both_ways

ASTRONAUT = data.astronaut()[::2, ::2].copy()  # 256 x 256
COFFEE = data.coffee()[::2, ::2].copy()  # 200 x 300
CHELSEA = data.chelsea()[::2, ::2].copy()  # 150 x 226


def _disk_image() -> np.ndarray:
    image = np.full((120, 160, 3), 40, np.uint8)
    cv2.circle(image, (50, 60), 25, (220, 200, 180), -1)
    return image


def test_pair_similarity_follows_the_seed_weights():
    a = ASTRONAUT
    assert pair_similarity(a, a) == pytest.approx(1.0, abs=1e-6)
    flipped = a[::-1].copy()  # same histogram and size, different structure
    s = pair_similarity(a, flipped)
    assert 0.6 - 1e-6 <= s < 1.0
    half = cv2.resize(a, (128, 256))
    assert pair_similarity(a, half) < pair_similarity(a, cv2.resize(a, (250, 256)))
    ranked = rank_pairs([a, COFFEE, a.copy()])
    assert (ranked[0][0], ranked[0][1]) == (0, 2) and len(ranked) == 3


def test_otsu_object_picks_the_enclosed_side():
    mask = otsu_object_mask(_disk_image())
    expected = np.zeros((120, 160), np.uint8)
    cv2.circle(expected, (50, 60), 25, 1, -1)
    assert (mask == expected.astype(bool)).mean() > 0.99


@pytest.mark.parametrize("pair", [(ASTRONAUT, COFFEE), (_disk_image(), CHELSEA)])
def test_splice_mask_covers_changes(pair):
    obj, bg = pair
    result = splice(obj, bg, np.random.default_rng(0))
    assert result.image.shape == bg.shape and result.mask.shape == bg.shape[:2]
    changed = changed_pixels(result.image, bg)
    assert changed.any() and not (changed & ~result.mask).any()
    assert changed[result.mask].mean() > 0.5  # the object really replaced the background
    assert result.meta["area_ratio"] == pytest.approx(result.mask.mean(), abs=1e-6)


def test_splice_both_ways_and_determinism():
    ab, ba = splice_both_ways(ASTRONAUT, COFFEE, np.random.default_rng(3))
    assert ab.image.shape == COFFEE.shape and ba.image.shape == ASTRONAUT.shape
    again, _ = splice_both_ways(ASTRONAUT, COFFEE, np.random.default_rng(3))
    assert np.array_equal(ab.image, again.image) and np.array_equal(ab.mask, again.mask)
    with pytest.raises(ValueError, match="covers"):
        splice(np.zeros((64, 64, 3), np.uint8), COFFEE, np.random.default_rng(0))


def test_object_candidates_respect_area_bounds():
    for mask in object_candidates(COFFEE):
        assert 0.10 <= mask.mean() <= 0.60


@pytest.mark.parametrize("image", [ASTRONAUT, COFFEE, CHELSEA])
def test_copy_move_mask_is_the_pasted_region(image):
    result = copy_move(image, np.random.default_rng(1))
    changed = changed_pixels(result.image, image)
    assert changed.any() and not (changed & ~result.mask).any()
    x0, y0, x1, y1 = result.meta["source_bbox"]
    tx, ty, tx1, ty1 = result.meta["target_bbox"]
    assert 0 <= tx and 0 <= ty and tx1 <= image.shape[1] and ty1 <= image.shape[0]
    assert (tx, ty) != (x0, y0)
    # the core of the pasted region is an exact copy of the source object
    core = cv2.erode(result.mask.astype(np.uint8), np.ones((11, 11), np.uint8)).astype(bool)
    ys, xs = np.nonzero(core)
    assert np.array_equal(result.image[ys, xs], image[ys - ty + y0, xs - tx + x0])
    assert 0.10 <= result.mask.mean() <= 0.60
    again = copy_move(image, np.random.default_rng(1))
    assert np.array_equal(again.image, result.image) and np.array_equal(again.mask, result.mask)


def test_farthest_grid_position_goes_to_the_far_corner():
    rng = np.random.default_rng(0)
    x, y = farthest_grid_position((10, 10, 40, 30), (200, 300), rng, jitter=0.0)
    assert (x, y) == (260, 170)
    for seed in range(20):
        x, y = farthest_grid_position((10, 10, 40, 30), (200, 300), np.random.default_rng(seed))
        assert 0 <= x <= 260 and 0 <= y <= 170 and x >= 260 - 20 and y >= 170 - 20


def test_copy_move_never_copies_blank_background_as_the_seeds_quality_control_asks():
    """A chart whose object candidates include its empty plot area: the copy is always the one with
    content (THEMIS A.3.3 excludes copies of blank margins); a uniform bar still counts as content."""
    from synthesis.genuine_kinds import GENUINE_KINDS

    chart = GENUINE_KINDS["chart"](np.random.default_rng(8)).pixels
    shares = sorted(content_share(chart, mask) for mask in object_candidates(chart))
    assert shares[0] < 0.1 <= shares[-1]  # blank candidates are there to be picked
    for seed in range(8):
        result = copy_move(chart, np.random.default_rng(seed))
        core = cv2.erode(result.mask.astype(np.uint8), np.ones((11, 11), np.uint8)).astype(bool)
        assert content_share(result.image, core) >= 0.1  # the pasted pixels are the copied object's
    bar = np.full((100, 160, 3), 255, np.uint8)
    bar[30:80, 40:70] = (40, 90, 200)
    inside = np.zeros((100, 160), bool)
    inside[30:80, 40:70] = True
    assert content_share(bar, inside) == 1.0 and content_share(bar, ~inside) == 0.0
    with pytest.raises(ValueError, match="no object with content"):
        copy_move(np.full((100, 160, 3), 255, np.uint8), np.random.default_rng(0))


def test_copy_move_rejects_a_frame_filling_object():
    with pytest.raises(ValueError):
        copy_move(COFFEE, np.random.default_rng(0), object_mask=np.ones(COFFEE.shape[:2], bool))


@pytest.mark.parametrize("method", ["telea", "ns"])
def test_inpainting_changes_only_the_region(method):
    result = inpaint_region(COFFEE, np.random.default_rng(2), method=method)
    changed = changed_pixels(result.image, COFFEE)
    assert changed.any() and not (changed & ~result.mask).any()
    assert 0.005 < result.mask.mean() < 0.2
    again = inpaint_region(COFFEE, np.random.default_rng(2), method=method)
    assert np.array_equal(again.image, result.image)
    given = np.zeros(COFFEE.shape[:2], bool)
    given[50:80, 100:150] = True
    removed = inpaint_region(COFFEE, np.random.default_rng(0), mask=given)
    assert np.array_equal(removed.mask, given)
    assert not changed_pixels(removed.image, COFFEE)[~given].any()


def _textured_frame_with_bar() -> tuple[np.ndarray, np.ndarray]:
    """A 120 x 160 noise texture and a 24 x 60 bar as the object (even sides: a quarter turn about
    the bar's centre lands on whole pixels)."""
    image = np.random.default_rng(5).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    bar = np.zeros((120, 160), bool)
    bar[10:34, 8:68] = True
    return image, bar


def test_copy_move_quarter_turn_pastes_the_rotated_object():
    image, bar = _textured_frame_with_bar()
    result = copy_move(
        image,
        np.random.default_rng(0),
        object_mask=bar,
        min_fraction=0.05,
        rotation=(90.0, 90.0),
        interpolation="nearest",
    )
    assert not (changed_pixels(result.image, image) & ~result.mask).any()
    assert result.meta["rotation"] == 90.0 and result.meta["scale"] == 1.0
    tx, ty, tx1, ty1 = result.meta["target_bbox"]
    assert (ty1 - ty, tx1 - tx) == (60, 24)  # the bar stands upright
    ys, xs = np.nonzero(result.mask)
    assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (tx, ty, tx1, ty1)
    # away from the feathered seam, the pixels are the source turned counter-clockwise, exactly
    rotated = np.rot90(image[10:34, 8:68])
    assert np.array_equal(result.image[ty + 5 : ty1 - 5, tx + 5 : tx1 - 5], rotated[5:-5, 5:-5])


@pytest.mark.parametrize(("scale", "rotation"), [((1.4, 1.4), (0.0, 0.0)), ((0.8, 1.25), (-30.0, 30.0))])
def test_copy_move_scaled_copy_is_resampled_and_masked(scale, rotation):
    image, bar = _textured_frame_with_bar()
    result = copy_move(
        image,
        np.random.default_rng(1),
        object_mask=bar,
        min_fraction=0.05,
        scale=scale,
        rotation=rotation,
        interpolation="bilinear",
    )
    changed = changed_pixels(result.image, image)
    assert changed.any() and not (changed & ~result.mask).any()
    factor = result.meta["scale"]
    assert scale[0] <= factor <= scale[1] and rotation[0] <= result.meta["rotation"] <= rotation[1]
    assert result.mask.sum() == pytest.approx(bar.sum() * factor**2, rel=0.08)
    tx, ty, tx1, ty1 = result.meta["target_bbox"]
    assert 0 <= tx and 0 <= ty and tx1 <= 160 and ty1 <= 120
    # interpolation smooths the noise texture: the copy is no exact duplicate of any source pixels
    core = cv2.erode(result.mask.astype(np.uint8), np.ones((11, 11), np.uint8)).astype(bool)
    assert result.image[core].std() < 0.9 * image[bar].std()
    again = copy_move(
        image,
        np.random.default_rng(1),
        object_mask=bar,
        min_fraction=0.05,
        scale=scale,
        rotation=rotation,
        interpolation="bilinear",
    )
    assert np.array_equal(again.image, result.image) and np.array_equal(again.mask, result.mask)


def test_copy_move_refuses_a_copy_too_large_and_an_unknown_kernel():
    image, bar = _textured_frame_with_bar()
    with pytest.raises(ValueError, match="does not fit"):
        copy_move(image, np.random.default_rng(0), object_mask=bar, min_fraction=0.05, scale=(3.0, 3.0))
    with pytest.raises(ValueError, match="interpolation must be one of"):
        copy_move(image, np.random.default_rng(0), object_mask=bar, min_fraction=0.05, interpolation="area")


def test_splice_donor_chain_changes_the_donor_history_only():
    plain = splice(ASTRONAUT, COFFEE, np.random.default_rng(0))
    blurred = splice(ASTRONAUT, COFFEE, np.random.default_rng(0), donor_chains=["blur2.0"])
    assert "donor_chain" not in plain.meta and blurred.meta["donor_chain"] == "blur2.0"
    # same geometry as without chains; outside the mask the host is untouched
    assert np.array_equal(plain.mask, blurred.mask) and plain.meta["shift"] == blurred.meta["shift"]
    assert not changed_pixels(blurred.image, COFFEE)[~blurred.mask].any()
    core = cv2.erode(blurred.mask.astype(np.uint8), np.ones((9, 9), np.uint8)).astype(bool)

    def detail(image):
        return np.abs(cv2.Laplacian(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY), cv2.CV_64F))[core].mean()

    assert detail(blurred.image) < 0.5 * detail(plain.image)
    chains = ("jpeg50", "resize0.5_area")
    drawn = {
        splice(ASTRONAUT, COFFEE, np.random.default_rng(seed), donor_chains=chains).meta["donor_chain"]
        for seed in range(8)
    }
    assert drawn == set(chains)
    with pytest.raises(ValueError, match="unknown processing chain"):
        splice(ASTRONAUT, COFFEE, np.random.default_rng(0), donor_chains=["jpeg50", "sharpen"])
