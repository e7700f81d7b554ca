"""Damage edits + re-render: the C.4-derived mask recovers the drawn damage (IoU), masks are honest."""

import numpy as np
import pytest
from skimage import data

from synthesis.common import changed_pixels
from synthesis.damage import DAMAGE_KINDS, damage_edit, draw_damage, local_shading, rerender
from synthesis.masks import half_difference_mask, mask_iou, region_masks_from_pair

IMAGES = [
    data.astronaut()[::2, ::2].copy(),
    data.chelsea(),
    data.coffee()[::2, ::2].copy(),
    data.immunohistochemistry()[::2, ::2].copy(),
]


@pytest.mark.parametrize("kind", DAMAGE_KINDS)
def test_derived_mask_matches_the_drawn_damage_after_rerender(kind):
    ious = []
    for image in IMAGES:
        for seed in (0, 1):
            result = damage_edit(image, np.random.default_rng(seed), kind=kind)
            derived, regions = region_masks_from_pair(image, result.image)
            ious.append(mask_iou(derived, result.mask))
            assert regions and regions[0]["primary"]
    print(f"{kind}: C.4 IoU mean {np.mean(ious):.3f} min {np.min(ious):.3f} over {len(ious)} edits")
    assert np.mean(ious) >= 0.8, ious
    assert np.min(ious) >= 0.7, ious


@pytest.mark.parametrize("kind", DAMAGE_KINDS)
def test_drawn_mask_covers_every_changed_pixel(kind):
    image = IMAGES[2]
    drawn, mask, _ = draw_damage(image, kind, np.random.default_rng(4))
    changed = changed_pixels(drawn, image)
    assert not (changed & ~mask).any()
    assert changed[mask].mean() > 0.8  # the labelled damage is visible, not a token tint
    assert 0.01 < mask.mean() < 0.3


def test_damage_is_deterministic_per_seed_and_random_kinds_vary():
    a = damage_edit(IMAGES[0], np.random.default_rng(9))
    b = damage_edit(IMAGES[0], np.random.default_rng(9))
    assert a.kind == b.kind and np.array_equal(a.image, b.image) and np.array_equal(a.mask, b.mask)
    assert a.meta == b.meta
    kinds = {damage_edit(IMAGES[1], np.random.default_rng(s), rerender_frame=False).kind for s in range(12)}
    assert kinds == set(DAMAGE_KINDS)
    with pytest.raises(ValueError, match="unknown damage"):
        damage_edit(IMAGES[0], np.random.default_rng(0), kind="dent")


def test_rerender_is_mild_and_whole_frame():
    image = IMAGES[1]
    out, params = rerender(image, np.random.default_rng(0))
    assert out.shape == image.shape
    mse = np.mean((out.astype(float) - image) ** 2)
    psnr = 10 * np.log10(255**2 / mse)
    assert 25 < psnr < 45, psnr  # visible to forensics, invisible to a casual eye
    assert changed_pixels(out, image, tolerance=1).mean() > 0.5  # it touches the whole frame
    assert set(params) == {"scale", "gain", "offset", "jpeg_quality"}


def test_damage_follows_the_lighting():
    ramp = np.tile(np.linspace(120, 195, 320, dtype=np.float32), (240, 1))
    dim = np.repeat(ramp[..., None], 3, axis=2)
    bright = dim * 1.2  # same relative shading, so the same damage is drawn on both
    assert np.allclose(
        local_shading(dim.round().astype(np.uint8)), local_shading(bright.round().astype(np.uint8)), atol=0.02
    )
    out1, mask, _ = draw_damage(dim.round().astype(np.uint8), "stain", np.random.default_rng(2))
    out2, _, _ = draw_damage(bright.round().astype(np.uint8), "stain", np.random.default_rng(2))
    src1 = dim[..., 0].round()
    # out = (1 - a) src + a * colour * shading, so the pair gives a, then the applied damage colour
    alpha = 1 - (out2.astype(float) - out1).mean(axis=2) / (0.2 * src1)
    core = mask & (alpha > 0.4)
    applied = (out1.mean(axis=2) - (1 - alpha) * src1)[core] / alpha[core]
    xs = np.nonzero(core)[1]
    assert core.sum() > 500
    # the damage colour is darker where the surface is in shadow (left) than in light (right)
    # (a constant colour, i.e. damage that ignores the lighting, would give no trend at all)
    assert np.corrcoef(applied, xs)[0, 1] > 0.4
    left, right = applied[xs < np.percentile(xs, 30)], applied[xs > np.percentile(xs, 70)]
    assert np.median(right) > 1.03 * np.median(left)  # about 6-9 % brighter across a stain


def test_half_difference_mask_on_a_damage_edit():
    image = IMAGES[2]
    result = damage_edit(image, np.random.default_rng(3), kind="stain")
    half = half_difference_mask(image, result.image)
    # D.1.5: the damage carries most of the difference, so it is (nearly) all inside the half mask
    assert (half & result.mask).sum() / result.mask.sum() > 0.9
