"""Duplication metrics: THEMIS sets on duplicated pairs, pair decisions, pair pixel counts."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.protocols.duplication import cmo_set, duplication_metrics, pair_pixel_counts, parse_operations


def test_fine_operations_map_to_themis_answers():
    assert cmo_set(["hflip", "brightness", "scaling"]) == {"flip", "parameter", "scaling"}
    assert parse_operations("rotate180;hue") == {"rotation", "parameter"}
    assert parse_operations("") == set()
    with pytest.raises(ValueError, match="unknown duplication operations"):
        cmo_set(["shear"])


def test_sets_are_scored_on_duplicated_pairs_and_decisions_on_all():
    rows = [
        {"label": 1, "score": 0.9, "truth": {"flip"}, "predicted": {"flip"}},
        {"label": 1, "score": 0.8, "truth": {"flip", "parameter"}, "predicted": {"flip"}},
        {"label": 0, "score": 0.2, "truth": set(), "predicted": set()},
        {"label": 0, "score": 0.6, "truth": set(), "predicted": {"direct"}},
    ]
    metrics = duplication_metrics(rows, threshold=0.5)
    assert metrics["operations"]["n"] == 2
    assert metrics["operations"]["set_f1"] == pytest.approx((1 + 2 / 3) / 2)
    assert metrics["operations"]["exact_match"] == pytest.approx(0.5)
    assert metrics["by_operation"]["parameter"]["recall"] == 0.0
    assert metrics["by_operation"]["flip"]["recall"] == 1.0
    assert metrics["pair_f1"] == pytest.approx(2 * 2 / (2 * 2 + 1))  # tp 2, fp 1, fn 0


def test_pair_pixels_add_both_panels():
    true_a = np.zeros((4, 4), bool)
    true_a[:2] = True
    pred_a = np.zeros((4, 4), bool)
    pred_a[:1] = True
    true_b = np.ones((2, 2), bool)
    assert pair_pixel_counts(true_a, true_b, pred_a, true_b) == (4 + 4, 0, 4, 8)
    metrics = duplication_metrics(
        [{"label": 1, "score": 1.0, "truth": {"direct"}, "predicted": {"direct"}}],
        0.5,
        [pair_pixel_counts(true_a, true_b, pred_a, true_b)],
    )
    assert metrics["pixel_f1"] == pytest.approx(16 / 20)
