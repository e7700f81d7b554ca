"""Copy-move in small panels: where nothing else found a copy, keypoints are found again on a copy
of the panel enlarged twice, so small turned text and marks match; only a turned or rescaled copy
whose detail is its source resampled is kept, since enlarged charts repeat exactly too."""

from __future__ import annotations

import string

import cv2
import numpy as np
import pytest

from detectors.copy_move import SelfMatchLocalizer
from detectors.matching import describe_panel
from detectors.self_matching import SelfMatch
from synthesis.copy_move import copy_move


def small_text_panel(seed: int, size: int = 160) -> np.ndarray:
    """A small panel of short labels in small type, as a chart's ticks and legends are."""
    rng = np.random.default_rng(seed)
    image = np.full((size, size, 3), 255, np.uint8)
    for _ in range(60):
        x, y = int(rng.integers(0, size - 10)), int(rng.integers(8, size))
        label = "".join(rng.choice(list(string.ascii_letters + string.digits), 3))
        colour = tuple(int(c) for c in rng.integers(0, 160, 3))
        cv2.putText(image, label, (x, y), cv2.FONT_HERSHEY_SIMPLEX, 0.3, colour, 1, cv2.LINE_AA)
    return image


def f1(predicted: np.ndarray, truth: np.ndarray) -> float:
    return 2 * (predicted & truth).sum() / (predicted.sum() + truth.sum())


def test_enlarged_detection_gives_a_small_panel_more_keypoints_on_its_own_grid():
    panel = small_text_panel(1)
    own, enlarged = describe_panel(panel, max_side=512), describe_panel(panel, max_side=512, detect_side=320)
    assert len(enlarged.points) > 1.5 * len(own.points)
    assert enlarged.shape == own.shape and enlarged.points.max() < 160


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_turned_copy_of_small_text_is_found_only_by_the_enlarged_retry(seed):
    genuine = small_text_panel(seed)
    blob = np.zeros(genuine.shape[:2], np.uint8)
    cv2.ellipse(blob, (45, 45), (32, 26), 0, 0, 360, 1, -1)
    forged = copy_move(genuine, np.random.default_rng(seed), object_mask=blob > 0, scale=(1.1, 1.1), rotation=(20, 20))
    settings = dict(max_side=512, max_maps=3, max_detail_residual=5.5)
    _, own_size, _ = SelfMatchLocalizer(**settings).locate(forged.image)
    retry = SelfMatchLocalizer(**settings, enlarged_retry_side=300)
    _, logits, found = retry.locate(forged.image)
    assert not (own_size > 0).any()
    assert f1(logits > 0, forged.mask) > 0.6 and found.detail_residual <= 2.0
    _, genuine_logits, _ = retry.locate(genuine)
    assert not (genuine_logits > 0).any()


@pytest.mark.parametrize(
    ("matrix", "detail", "kept"),
    [
        (cv2.getRotationMatrix2D((32.0, 32.0), 20.0, 1.0), 1.0, True),
        (np.float64([[1.0, 0.0, 30.0], [0.0, 1.0, 30.0]]), 1.0, False),  # a pure shift: a repeat
        (cv2.getRotationMatrix2D((32.0, 32.0), 20.0, 1.0), 3.0, False),  # detail not reproduced
        (cv2.getRotationMatrix2D((32.0, 32.0), 20.0, 1.0), float("nan"), False),  # too flat to read
    ],
)
def test_the_enlarged_retry_keeps_only_a_turned_or_rescaled_copy_whose_detail_is_reproduced(
    monkeypatch, matrix, detail, kept
):
    import detectors.copy_move as localizer_module

    target = np.zeros((64, 64), bool)
    target[40:60, 40:60] = True
    match = SelfMatch(matrix, 20, np.roll(target, -30, (0, 1)), target, True, residual=0.5, detail_residual=detail)
    monkeypatch.setattr(localizer_module, "self_matches", lambda *args, **kwargs: iter([match]))
    nothing = SelfMatch(None, 0, np.zeros((64, 64), bool), np.zeros((64, 64), bool), False, "nothing", "none")
    image = np.random.default_rng(0).integers(0, 256, (64, 64, 3)).astype(np.uint8)
    found = SelfMatchLocalizer(max_side=64, enlarged_retry_side=300).enlarged_retry(image, nothing)
    assert (found is match) == kept and (found is nothing) != kept
