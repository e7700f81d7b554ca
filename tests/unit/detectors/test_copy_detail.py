"""Copy-move: a copy's detail (edges, text, texture) must be its source's resampled. The residual
over all of a copy's pixels reads 0 for any map that lays flat fill on flat fill, so a wrong map
over a chart passes it; its detailed pixels tell."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from detectors.copy_move import SelfMatchLocalizer
from detectors.self_matching import SelfMatch, copy_residual, detail_residual
from synthesis.copy_move import copy_move
from tests.unit.detectors.test_dense_copy_move import bar_chart


def grey(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)


def test_a_wrong_map_over_flat_fills_reads_0_over_all_pixels_but_not_on_their_detail():
    chart = grey(bar_chart())
    region = np.zeros(chart.shape, bool)
    region[60:215, 40:240] = True  # bars, their gaps, ticks and labels: mostly flat
    wrong = np.float64([[1.0, 0.0, 7.0], [0.0, 1.0, 13.0]])  # no period of the bars and labels
    assert copy_residual(chart, region, wrong) < 1.0
    assert detail_residual(chart, region, wrong) > 10.0


def test_a_turned_copy_is_its_source_resampled_on_its_detail_too():
    rng = np.random.default_rng(0)
    texture = cv2.GaussianBlur(rng.normal(128, 40, (256, 256)).astype(np.float32), (0, 0), 1.5)
    image = np.repeat(np.clip(texture, 0, 255).astype(np.uint8)[..., None], 3, axis=2)
    object_mask = np.zeros((256, 256), bool)
    cv2.ellipse(object_mask.view(np.uint8), (72, 72), (56, 44), 0, 0, 360, 1, -1)
    forged = copy_move(image, rng, object_mask=object_mask, scale=(1.1, 1.1), rotation=(20, 20))
    _, logits, found = SelfMatchLocalizer(max_side=256).locate(forged.image)
    assert found.matrix is not None and (logits > 0)[forged.mask].mean() > 0.8
    assert detail_residual(grey(forged.image), found.target, found.matrix) < 2.0


def test_a_flat_copy_has_no_detail_to_read():
    flat = np.full((64, 64), 128.0, np.float32)
    region = np.zeros((64, 64), bool)
    region[10:40, 10:40] = True
    assert np.isnan(detail_residual(flat, region, np.float64([[1.0, 0.0, 20.0], [0.0, 1.0, 20.0]])))


@pytest.mark.parametrize(
    ("detail", "gate", "kept"), [(7.0, 5.5, False), (5.0, 5.5, True), (float("nan"), 5.5, True), (7.0, None, True)]
)
def test_a_self_match_whose_detail_its_source_does_not_reproduce_is_dropped(monkeypatch, detail, gate, kept):
    """Over `max_detail_residual` grey levels (the configs: 5.5) the copy is look-alike content; a
    copy too flat to read (NaN) and a localizer without the gate (None, older checkpoints) keep it."""
    import detectors.copy_move as localizer_module

    image = np.random.default_rng(0).integers(0, 256, (64, 64, 3)).astype(np.uint8)
    target = np.zeros((64, 64), bool)
    target[40:60, 40:60] = True
    turned = cv2.getRotationMatrix2D((32.0, 32.0), 20.0, 1.0)
    found = SelfMatch(turned, 40, np.roll(target, -30, (0, 1)), target, True, residual=1.0, detail_residual=detail)
    monkeypatch.setattr(localizer_module, "self_matches", lambda *args, **kwargs: iter([found]))
    localizer = SelfMatchLocalizer(max_side=64, max_detail_residual=gate, dense_min_inliers=0, furniture_retry=False)
    _, logits, result = localizer.locate(image)
    assert (logits > 0).any() == kept and (result.matrix is not None) == kept
    if not kept:
        assert "detail" in result.reason
