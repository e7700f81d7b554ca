"""A copy pasted over part of its own source: the covered source matches nothing, so correlation
grows only the rest of the copy; the resampling phases of the map find the part pasted from under it."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from detectors.copy_move import SelfMatchLocalizer
from detectors.self_matching import resampling_agreement
from synthesis.copy_move import copy_move


def fine_texture(seed: int, size: int = 256) -> np.ndarray:
    """A grainy grey image (fine grain over soft blobs), as micrographs and photographed surfaces are."""
    rng = np.random.default_rng(seed)
    grain = cv2.GaussianBlur(rng.normal(0, 1, (size, size)).astype(np.float32), (0, 0), 0.6)
    blobs = cv2.GaussianBlur(rng.normal(0, 1, (size, size)).astype(np.float32), (0, 0), 6)
    grey = np.clip(128 + 25 * grain / grain.std() + 30 * blobs / blobs.std(), 0, 255).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=2)


def turned_copy(seed: int, box: tuple[slice, slice]):
    """The object in `box`, turned by 8 degrees, shrunk by 5 % and pasted as far away as the frame allows."""
    image = fine_texture(seed)
    obj = np.zeros(image.shape[:2], bool)
    obj[box] = True
    forged = copy_move(image, np.random.default_rng(seed), object_mask=obj, rotation=(8, 8), scale=(0.95, 0.95))
    return forged, obj


def f1(predicted: np.ndarray, truth: np.ndarray) -> float:
    return 2 * (predicted & truth).sum() / (predicted.sum() + truth.sum())


LARGE = (slice(20, 236), slice(16, 166))  # 49 % of the frame: the copy lands on half of its source
SMALL = (slice(30, 120), slice(20, 110))  # lands apart from its source


@pytest.mark.parametrize("max_side", [256, 160])  # 160: matched at a smaller working size, the phases read at full size
@pytest.mark.parametrize("seed", [0, 1])
def test_the_part_of_a_copy_pasted_over_its_own_source_is_marked_too(seed, max_side):
    forged, source = turned_copy(seed, LARGE)
    assert (forged.mask & source).sum() > 0.4 * forged.mask.sum()
    _, grown_only, _ = SelfMatchLocalizer(max_side=max_side).locate(forged.image)
    _, logits, found = SelfMatchLocalizer(max_side=max_side, hidden_agreement=0.06).locate(forged.image)
    assert f1(grown_only > 0, forged.mask) < 0.75  # correlation alone: only the part whose source is visible
    assert f1(logits > 0, forged.mask) > 0.85
    assert (found.target & forged.mask).sum() > 0.9 * found.target.sum()  # it does not run on past the paste


def test_a_copy_apart_from_its_source_is_left_as_correlation_grew_it():
    forged, source = turned_copy(0, SMALL)
    assert not (forged.mask & source).any()
    _, _, grown_only = SelfMatchLocalizer(max_side=256).locate(forged.image)
    _, _, found = SelfMatchLocalizer(max_side=256, hidden_agreement=0.06).locate(forged.image)
    assert grown_only.target.any() and np.array_equal(found.target, grown_only.target)


def test_fine_detail_follows_the_resampling_phases_inside_the_copy_only():
    forged, _ = turned_copy(0, SMALL)
    _, _, found = SelfMatchLocalizer(max_side=256).locate(forged.image)
    gray = cv2.cvtColor(forged.image, cv2.COLOR_RGB2GRAY).astype(np.float32)
    agreement = resampling_agreement(gray, found.matrix)
    inside = cv2.erode(forged.mask.astype(np.uint8), np.ones((15, 15), np.uint8)) > 0
    outside = cv2.dilate(forged.mask.astype(np.uint8), np.ones((15, 15), np.uint8)) == 0
    assert agreement[inside].mean() > 0.1 and abs(agreement[outside].mean()) < 0.02
