"""C.4 region masks and D.1.5 half-difference masks derived from (source, edited) pairs."""

import json

import cv2
import numpy as np
import pytest
from skimage import data

from synthesis.masks import half_difference_mask, mask_iou, match_gain_offset, region_masks_from_pair


def _jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    ok, buf = cv2.imencode(".jpg", image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1]


def _edited_pair():
    """Coffee photo with an elliptical darkened stain, then a whole-frame tone shift and JPEG."""
    source = data.coffee()[:320, :400].copy()
    truth = np.zeros(source.shape[:2], np.uint8)
    cv2.ellipse(truth, (260, 110), (60, 40), 20, 0, 360, 1, -1)
    truth = truth.astype(bool)
    edited = source.astype(np.float32)
    edited[truth] = edited[truth] * np.array([0.55, 0.45, 0.35]) + 10
    edited = np.clip(edited * 1.04 + 3, 0, 255).astype(np.uint8)
    return source, _jpeg(edited, 90), truth


def test_region_mask_recovers_edit_after_global_shift():
    source, edited, truth = _edited_pair()
    mask, regions = region_masks_from_pair(source, edited)
    assert mask.shape == source.shape[:2] and mask.dtype == bool
    iou = mask_iou(mask, truth)
    assert iou >= 0.8, iou
    assert len(regions) >= 1
    primary = regions[0]
    assert primary["primary"] and primary["machine_derived"]
    ys, xs = np.nonzero(truth)
    expected = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
    assert np.abs(np.array(primary["bbox"]) - expected).max() <= 6, (primary["bbox"], expected)
    assert primary["bbox_norm"][2] == pytest.approx(primary["bbox"][2] / source.shape[1], abs=1e-5)
    assert primary["peak_z"] >= primary["mean_z"] > 4
    assert abs(primary["area_fraction"] - truth.mean()) < 0.3 * truth.mean()
    assert len(primary["polygon"]) >= 4
    json.dumps(regions)  # must be serializable as written beside the mask
    areas = [r["area_fraction"] for r in regions]
    assert areas == sorted(areas, reverse=True)


def test_region_mask_is_deterministic_and_handles_resized_edit():
    source, edited, truth = _edited_pair()
    a = region_masks_from_pair(source, edited)
    b = region_masks_from_pair(source, edited)
    assert np.array_equal(a.mask, b.mask) and a.regions == b.regions
    bigger = cv2.resize(edited, (600, 480), interpolation=cv2.INTER_CUBIC)
    mask, _ = region_masks_from_pair(source, bigger)
    assert mask.shape == source.shape[:2]
    assert mask_iou(mask, truth) >= 0.8


def test_identical_pair_gives_no_regions():
    source = data.chelsea()
    mask, regions = region_masks_from_pair(source, source.copy())
    assert not mask.any() and regions == []
    assert not half_difference_mask(source, source.copy()).any()


def test_gain_offset_match_undoes_global_tone():
    source = data.astronaut()[::4, ::4].astype(np.float32)
    shifted = source * 0.8 + 20
    matched = match_gain_offset(shifted, source)
    assert np.abs(matched - source).max() < 1e-2


def test_half_difference_mask_carries_the_requested_fraction():
    source, edited, truth = _edited_pair()
    sizes = []
    for fraction in (0.3, 0.5, 0.7):
        mask = half_difference_mask(source, edited, fraction=fraction)
        assert mask.shape == source.shape[:2]
        sizes.append(int(mask.sum()))
    assert sizes[0] < sizes[1] < sizes[2]
    half = half_difference_mask(source, edited)
    # the strong local edit is the largest difference, so it is taken first: the stain is covered,
    # and the rest of the half is the diffuse tone-shift residual (as FraudBench D.1.5 notes)
    assert (half & truth).sum() / truth.sum() > 0.95
    # and it is the smallest such set: every unselected pixel differs no more than any selected one
    diff = cv2.GaussianBlur(np.abs(edited.astype(np.float32) - source).mean(axis=2), (5, 5), 1.6)
    assert diff[half].sum() >= 0.45 * diff.sum()
    for bad in (0.2, 0.8):
        with pytest.raises(ValueError, match="0.3, 0.7"):
            half_difference_mask(source, edited, fraction=bad)
