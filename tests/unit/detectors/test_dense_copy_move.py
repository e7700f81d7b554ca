"""The dense copy-move fallback: rotation-invariant block features, block matches that skip a block's
own neighbourhood, copies in smooth images that SIFT cannot self-match, and genuine images whose
structures repeat (bars, ticks, labels, smooth shading) left unmarked."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from detectors.copy_move import SelfMatchLocalizer
from detectors.dense_copy_move import nearest_far_blocks, zernike_features
from detectors.matching import describe_panel
from detectors.self_matching import fill_flat_in_hull, is_pure_shift, repeats_again
from synthesis.copy_move import copy_move


def smooth_field(seed: int, size: int = 256, sigma: float = 8.0) -> np.ndarray:
    """A low-texture RGB image: blurred noise, no corners or edges for SIFT to hold on to."""
    noise = np.random.default_rng(seed).normal(0, 1, (size, size)).astype(np.float32)
    field = cv2.GaussianBlur(noise, (0, 0), sigma)
    grey = np.clip(128 + 40 * field / field.std(), 0, 255).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=2)


def bar_chart(size: int = 256) -> np.ndarray:
    """A genuine chart: six bars of two heights, tick marks, repeated labels, a little noise."""
    image = np.full((size, size, 3), 255, np.uint8)
    cv2.line(image, (30, 220), (245, 220), (0, 0, 0), 2)
    cv2.line(image, (30, 20), (30, 220), (0, 0, 0), 2)
    for i, height in enumerate((120, 150, 120, 150, 120, 150)):
        x = 45 + i * 33
        cv2.rectangle(image, (x, 220 - height), (x + 20, 219), (60, 110, 200), -1)
        cv2.line(image, (x + 10, 220), (x + 10, 226), (0, 0, 0), 1)
        cv2.putText(image, "ctrl", (x - 2, 240), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (0, 0, 0), 1, cv2.LINE_AA)
    for j in range(5):
        y = 220 - j * 40
        cv2.line(image, (25, y), (30, y), (0, 0, 0), 1)
        cv2.putText(image, str(j * 10), (4, y + 4), cv2.FONT_HERSHEY_SIMPLEX, 0.3, (0, 0, 0), 1, cv2.LINE_AA)
    noise = np.random.default_rng(0).normal(0, 2, image.shape).round().astype(int)
    return np.clip(image.astype(int) + noise, 0, 255).astype(np.uint8)


def f1(predicted: np.ndarray, truth: np.ndarray) -> float:
    return 2 * (predicted & truth).sum() / (predicted.sum() + truth.sum())


def test_a_blocks_zernike_features_do_not_change_when_the_block_turns():
    image = smooth_field(0, size=96, sigma=3.0)[..., 0].astype(np.float32)
    grid = np.stack(np.meshgrid(np.arange(20, 77, 8), np.arange(20, 77, 8)), axis=-1).reshape(-1, 2)
    centre = zernike_features(image, np.array([[48, 48]]), radius=6)[0]
    quarter = zernike_features(np.ascontiguousarray(np.rot90(image)), np.array([[48, 47]]), radius=6)[0]
    turn = cv2.getRotationMatrix2D((48.0, 48.0), 30.0, 1.0)
    turned_image = cv2.warpAffine(image, turn, (96, 96), flags=cv2.INTER_LINEAR)
    turned = zernike_features(turned_image, np.array([[48, 48]]), radius=6)[0]
    elsewhere = np.median(np.linalg.norm(zernike_features(image, grid, radius=6) - centre, axis=1))
    assert np.allclose(quarter, centre, atol=1e-3 * np.abs(centre).max())
    assert np.linalg.norm(turned - centre) < 0.2 * elsewhere


def test_a_block_is_never_matched_with_one_of_its_own_neighbourhood():
    rng = np.random.default_rng(0)
    points = rng.uniform(0, 100, (300, 2)).astype(np.float32)
    features = points[:, :1] + rng.normal(0, 0.01, (300, 12))  # nearest in features = nearest in x
    rows, cols = nearest_far_blocks(features.astype(np.float32), points, gap=20.0, k=32)
    assert len(rows) > 100
    assert np.all(np.linalg.norm(points[rows] - points[cols], axis=1) >= 20.0)


def turned_copy_in_smooth_image():
    """A smooth image with an ellipse copied, turned by 20 degrees and enlarged by 1.1."""
    object_mask = np.zeros((256, 256), np.uint8)
    cv2.ellipse(object_mask, (72, 72), (52, 40), 0, 0, 360, 1, -1)
    rng = np.random.default_rng(0)
    return copy_move(smooth_field(2), rng, object_mask=object_mask > 0, scale=(1.1, 1.1), rotation=(20, 20))


def test_a_turned_rescaled_copy_in_a_smooth_image_is_found_by_the_dense_fallback_and_marked():
    forged = turned_copy_in_smooth_image()
    _, keypoint_logits, keypoints_only = SelfMatchLocalizer(max_side=256, dense_min_inliers=0).locate(forged.image)
    assert keypoints_only.matrix is None and not (keypoint_logits > 0).any()  # SIFT alone finds nothing
    logit, logits, found = SelfMatchLocalizer(max_side=256).locate(forged.image)
    assert found.method == "dense" and logit > 0
    assert f1(logits > 0, forged.mask) > 0.6
    assert f1(found.source & ~found.target, forged.mask) < 0.1  # the source is not marked as the copy


def test_a_dense_match_is_kept_only_when_resampling_reproduces_the_copy_to_the_set_residual():
    forged = turned_copy_in_smooth_image()
    _, _, found = SelfMatchLocalizer(max_side=256).locate(forged.image)
    assert found.method == "dense" and 0 < found.residual <= 1.0
    _, logits, strict = SelfMatchLocalizer(max_side=256, dense_max_residual=found.residual / 2).locate(forged.image)
    assert strict.matrix is None and not (logits > 0).any() and "resampling" in strict.reason


@pytest.mark.parametrize(("overlap", "kept"), [(0.0, True), (0.05, False)])
def test_a_dense_copy_apart_from_its_source_may_be_reproduced_less_exactly(monkeypatch, overlap, kept):
    """Smooth content resembles itself in overlapping neighbourhoods (a blob turned about its own
    centre); a copy that shares no pixel with its source passes the looser `dense_apart_residual`."""
    from dataclasses import replace

    import detectors.copy_move as localizer_module

    forged = turned_copy_in_smooth_image()
    _, _, found = SelfMatchLocalizer(max_side=256).locate(forged.image)
    assert found.method == "dense" and found.overlap == 0 and found.residual > 0
    real = localizer_module.self_match_regions
    monkeypatch.setattr(
        localizer_module, "self_match_regions", lambda *args, **kwargs: replace(real(*args, **kwargs), overlap=overlap)
    )
    gates = dict(dense_max_residual=found.residual / 2, dense_apart_residual=found.residual * 2)
    _, logits, gated = SelfMatchLocalizer(max_side=256, **gates).locate(forged.image)
    assert (gated.method == "dense") == kept and (logits > 0).any() == kept


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_a_genuine_smooth_image_is_left_unmarked(seed):
    logit, logits, _ = SelfMatchLocalizer(max_side=256).locate(smooth_field(seed))
    assert not (logits > 0).any() and logit < 0


def test_a_genuine_chart_with_repeated_bars_ticks_and_labels_is_not_flagged():
    chart = bar_chart()
    _, logits, found = SelfMatchLocalizer(max_side=256).locate(chart)
    assert not (logits > 0).any()
    # What keeps it clean: the bars match themselves one period away, so the two "copies" overlap
    # and each repeats again one period further; either check alone suffices.
    for check_off in ({"max_copy_overlap": 1.0}, {"max_shift_repeat": 1.0}):
        _, one_check, _ = SelfMatchLocalizer(max_side=256, **check_off).locate(chart)
        assert not (one_check > 0).any()
    _, unchecked, _ = SelfMatchLocalizer(max_side=256, max_copy_overlap=1.0, max_shift_repeat=1.0).locate(chart)
    assert (unchecked > 0).mean() > 0.1


def test_a_shifted_copy_whose_texture_repeats_once_more_along_the_shift_is_a_period_not_a_copy():
    rng = np.random.default_rng(0)
    patch = rng.uniform(0, 255, (30, 30)).astype(np.float32)
    gray = np.full((64, 160), 128.0, np.float32)
    source, target = np.zeros(gray.shape, bool), np.zeros(gray.shape, bool)
    source[17:47, 10:40], target[17:47, 50:80] = True, True
    shift = np.float32([[1, 0, 40], [0, 1, 0]])
    gray[17:47, 10:40] = gray[17:47, 50:80] = patch  # pasted once: beyond it, flat background
    assert repeats_again(gray, source, target, shift) == 0.0
    gray[17:47, 90:120] = patch  # drawn three times at a period of 40 px, as bars or legend rows are
    assert repeats_again(gray, source, target, shift) > 0.9
    gray[17:47, 90:120] = rng.uniform(0, 255, (30, 30))  # something else there: no period
    assert repeats_again(gray, source, target, shift) < 0.1
    # where the next period lies mostly outside the image, the few pixels inside tell nothing
    edge = gray[:, :95].copy()
    edge[17:47, 90:95] = patch[:, :5]
    assert repeats_again(edge, source[:, :95], target[:, :95], shift) == 0.0


def test_only_a_map_that_neither_turns_flips_nor_rescales_is_a_pure_shift():
    def similarity(angle: float, scale: float) -> np.ndarray:
        return cv2.getRotationMatrix2D((50.0, 50.0), angle, scale)

    shift = np.array([[1.0, 0.0, 40.0], [0.0, 1.0, -12.0]])
    assert is_pure_shift(shift) and is_pure_shift(similarity(1.0, 1.01))
    assert not is_pure_shift(similarity(10.0, 1.0))
    assert not is_pure_shift(similarity(0.0, 1.1))
    assert not is_pure_shift(np.array([[-1.0, 0.0, 90.0], [0.0, 1.0, 0.0]]))  # a mirror
    assert not is_pure_shift(np.zeros((2, 3)))  # degenerate: scale 0


def test_flat_pixels_join_a_copy_only_inside_its_hull_and_where_the_partner_repeats_them():
    gray = np.full((60, 120), 200.0, np.float32)
    gray[40:60, 60:120] = 120.0  # the partner of the lower part of the box is darker
    region = np.zeros((60, 120), bool)
    region[5:15, 5:45] = region[5:55, 5:10] = region[45:55, 5:45] = True  # a C: its hull is the box
    shift_right = np.array([[1.0, 0.0, 60.0], [0.0, 1.0, 0.0]])
    filled = fill_flat_in_hull(gray, region, shift_right)
    assert filled[25, 30]  # flat, inside the hull, and the partner is the same level
    assert not filled[25, 50]  # outside the hull
    assert not filled[42, 30]  # inside the hull, but its partner is 80 levels darker
    assert not fill_flat_in_hull(gray, np.zeros_like(region), shift_right).any()


def c_shaped_copy() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(image, mask of both boxes, map from one onto the other): a box whose texture forms a C
    around a flat inside of the background's level, pasted 120 px to the right, whole (a pure
    shift: nothing tells the copy from its source, so both are marked)."""
    rng = np.random.default_rng(0)
    image = np.full((200, 256), 90.0, np.float32)
    texture = rng.normal(90, 40, (60, 60)).astype(np.float32)
    texture[15:45, 15:60] = 90.0  # the C opens to the right
    image[70:130, 20:80] = texture
    image[70:130, 140:200] = texture
    mask = np.zeros(image.shape, bool)
    mask[70:130, 140:200] = mask[70:130, 20:80] = True
    shift = np.array([[1.0, 0.0, 120.0], [0.0, 1.0, 0.0]])
    return np.repeat(np.clip(image, 0, 255).astype(np.uint8)[..., None], 3, axis=2), mask, shift


def test_the_flat_inside_of_a_copy_left_open_by_its_texture_is_filled_into_the_copy():
    from detectors.self_matching import self_match_regions

    image, mask, shift = c_shaped_copy()
    panel = describe_panel(image, max_side=256)
    filled = self_match_regions(panel, shift, 50, gap=12.8)
    seeded = self_match_regions(panel, shift, 50, gap=12.8, fill_hull=False)
    recall = lambda found: (found.target & mask).sum() / mask.sum()  # noqa: E731
    assert recall(filled) > 0.9 and recall(seeded) < 0.85
    outside = lambda found: (found.target & ~mask).sum()  # noqa: E731
    assert outside(filled) - outside(seeded) < 0.1 * mask.sum()  # the flat background around stays out


def test_the_dense_fallback_never_reports_a_pure_shift(monkeypatch):
    """Rendered content (bars, lanes, letters) repeats exactly by pure shifts; a pasted copy that was
    only shifted is left to the keypoints."""
    import detectors.copy_move as localizer_module

    image, mask, shift = c_shaped_copy()
    monkeypatch.setattr(localizer_module, "dense_self_match", lambda *args, **kwargs: (shift, 500))
    monkeypatch.setattr(localizer_module, "self_matches", lambda *args, **kwargs: iter([missed_copy(image.shape[:2])]))
    _, logits, found = SelfMatchLocalizer(max_side=256).locate(image)
    assert found.matrix is None and "pure shift" in found.reason and not (logits > 0).any()


def missed_copy(shape: tuple[int, int]):
    from detectors.self_matching import SelfMatch

    empty = np.zeros(shape, bool)
    return SelfMatch(None, 0, empty, empty, False, "no consistent self-matches", "none")


@pytest.mark.parametrize(("residual", "marked"), [(1.0, True), (4.0, True), (9.0, False)])
def test_a_self_match_is_kept_only_when_its_copy_is_its_source_resampled(monkeypatch, residual, marked):
    """The same words typeset twice match by keypoints, but no resampling of one reproduces the
    other: a copy whose median residual exceeds `max_copy_residual` (4 grey levels) is dropped."""
    import detectors.copy_move as localizer_module
    from detectors.self_matching import SelfMatch

    image, mask, shift = c_shaped_copy()
    found = SelfMatch(shift, 40, mask, mask, False, residual=residual)
    monkeypatch.setattr(localizer_module, "self_matches", lambda *args, **kwargs: iter([found]))
    _, logits, kept = SelfMatchLocalizer(max_side=256).locate(image)
    assert (logits > 0).any() == marked and (kept.matrix is not None) == marked


@pytest.mark.parametrize(("blocks", "kept"), [(29, False), (30, True)])
def test_a_dense_match_needs_the_documented_floor_of_inlier_blocks(monkeypatch, blocks, kept):
    """Smooth content resembles itself everywhere: a dense map carried by fewer than
    `dense_min_inliers` (30, the config's value) blocks is chance, not a copy."""
    import yaml

    import detectors.copy_move as localizer_module

    config_file = Path(__file__).resolve().parents[3] / "configs" / "detector" / "copy_move_selfmatch.yaml"
    config = yaml.safe_load(config_file.read_text())["net"]
    assert config["dense_min_inliers"] == SelfMatchLocalizer().dense_min_inliers == 30
    forged = turned_copy_in_smooth_image()
    real = localizer_module.dense_self_match
    monkeypatch.setattr(
        localizer_module, "dense_self_match", lambda *args, **kwargs: (real(*args, **kwargs)[0], blocks)
    )
    _, logits, found = SelfMatchLocalizer(max_side=256).locate(forged.image)
    assert (found.method == "dense") == kept and (logits > 0).any() == kept


def test_the_residual_gate_rises_with_the_images_noise_up_to_its_ceiling():
    """4 grey levels on a clean image; 3 x the noise level on a noisy one; never over 5, so
    look-alike content in a noisy image is still dropped."""
    flat = np.full((128, 128, 3), 128, np.uint8)
    rng = np.random.default_rng(0)
    noisy = lambda sd: np.clip(flat + rng.normal(0, sd, flat.shape[:2])[..., None], 0, 255).astype(np.uint8)  # noqa: E731
    gate = lambda image: SelfMatchLocalizer().residual_gate(describe_panel(image, 256, 100))  # noqa: E731
    assert gate(flat) == 4.0
    assert 4.0 < gate(noisy(1.5)) < 5.0
    assert gate(noisy(10.0)) == 5.0


def test_a_turned_copy_in_gravel_recompressed_by_jpeg_75_is_kept():
    """Recompression raises a real copy's residual over 4 grey levels in a textured photo; the gate
    follows the image's noise, so the copy is still marked (a fixed gate of 4 drops it)."""
    import imageops
    from datamodules.io import read_image
    from synthesis.embedded import bundled_photo_paths

    photo = next(read_image(p) for p in bundled_photo_paths() if p.name == "gravel.png")
    photo = cv2.resize(photo, (256, 256), interpolation=cv2.INTER_AREA)
    forged = copy_move(photo, np.random.default_rng(1), scale=(0.8, 1.25), rotation=(-30.0, 30.0))
    image = imageops.jpeg(forged.image, 75)
    _, logits, found = SelfMatchLocalizer(max_side=256).locate(image)
    assert found.method == "sift" and found.residual > 4.0
    assert f1(logits > 0, forged.mask) > 0.7
    _, fixed_logits, _ = SelfMatchLocalizer(max_side=256, copy_residual_noise_factor=0.0).locate(image)
    assert not (fixed_logits > 0).any()


def test_the_same_words_typeset_twice_and_recompressed_are_not_marked():
    """Words typeset twice at slightly different positions match by keypoints; after JPEG 75 no
    resampling of one reproduces the other to the gate's ceiling, so the keypoint match is dropped
    (the dense fallback, off here, leaves pure shifts alone anyway)."""
    import imageops

    page = np.full((1024, 1024, 3), 255, np.uint8)
    results, blot = "Results and methods", "of the western blot"
    lines = [results, blot, results, "were compared with", blot]
    for i, line in enumerate(lines):
        cv2.putText(page, line, (32 + i, 120 + 180 * i), cv2.FONT_HERSHEY_SIMPLEX, 2.6, (20, 20, 20), 5, cv2.LINE_AA)
    image = imageops.jpeg(cv2.resize(page, (256, 256), interpolation=cv2.INTER_AREA), 75)
    ungated = SelfMatchLocalizer(max_side=256, max_copy_residual=1e9, copy_residual_ceiling=1e9, dense_min_inliers=0)
    _, matched, _ = ungated.locate(image)
    assert (matched > 0).any()  # the look-alike words do match
    _, logits, found = SelfMatchLocalizer(max_side=256, dense_min_inliers=0).locate(image)
    assert "look-alike" in found.reason and not (logits > 0).any()


def test_a_turned_copy_in_a_chart_whose_keypoints_are_all_text_and_rulings_is_found_by_the_furniture_retry():
    """A generated chart (seed 11) with a region copied, turned and rescaled as the benchmark makes
    them: its keypoints lie on text and rulings, which matching masks, so only the retry that
    matches them too finds the copy; the genuine chart stays unmarked."""
    from synthesis.genuine_kinds import chart

    rng = np.random.default_rng(11)
    pixels = chart(rng).pixels
    scale = 256 / max(pixels.shape[:2])
    genuine = cv2.resize(pixels, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    forged = copy_move(genuine, np.random.default_rng(11), scale=(0.8, 1.25), rotation=(-30.0, 30.0))
    _, masked_only, found = SelfMatchLocalizer(max_side=256, furniture_retry=False).locate(forged.image)
    assert not (masked_only > 0).any() and found.matrix is None
    retry = SelfMatchLocalizer(max_side=256, furniture_retry=True)
    _, logits, found = retry.locate(forged.image)
    assert f1(logits > 0, forged.mask) > 0.7 and not is_pure_shift(found.matrix)
    _, genuine_logits, _ = retry.locate(genuine)
    assert not (genuine_logits > 0).any()


def test_the_furniture_retry_keeps_only_a_turn_that_resampling_reproduces(monkeypatch):
    """Rendered marks repeat by shifts and at other sizes (error bars of two lengths), and a turn
    that resampling cannot check is no copy."""
    import detectors.copy_move as localizer_module
    from detectors.self_matching import SelfMatch

    shape = (64, 64)
    target = np.zeros(shape, bool)
    target[40:60, 40:60] = True
    turned = cv2.getRotationMatrix2D((32.0, 32.0), 20.0, 1.0)
    shifted = np.float64([[1.0, 0.0, 30.0], [0.0, 1.0, 30.0]])
    rescaled = cv2.getRotationMatrix2D((32.0, 32.0), 0.0, 0.86)
    flipped = np.float64([[-1.0, 0.0, 63.0], [0.0, 1.0, 0.0]])
    cases = [(turned, 0.5, True), (flipped, 0.5, True), (shifted, 0.5, False), (rescaled, 0.5, False)]
    for matrix, residual, kept in [*cases, (turned, np.inf, False)]:
        match = SelfMatch(matrix, 9, np.roll(target, -30, (0, 1)), target, True, residual=residual)
        monkeypatch.setattr(localizer_module, "self_matches", lambda *args, match=match, **kwargs: iter([match]))
        nothing = missed_copy(shape)
        retry = SelfMatchLocalizer(max_side=64, furniture_retry=True)
        found = retry.furniture_fallback(describe_panel(np.zeros((*shape, 3), np.uint8), keep_unmasked=True), nothing)
        assert (found is match) == kept and (found is nothing) != kept
