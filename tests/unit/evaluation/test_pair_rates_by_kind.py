"""Per kind of pair, the share flagged at the threshold: TPR for duplications, FPR for negatives."""

from __future__ import annotations

import pytest

from evaluation.protocols.duplication import rates_by_kind


def test_each_kind_gets_its_flagged_share_and_a_score_at_the_threshold_is_flagged():
    rows = [
        {"kind": "flip", "label": 1, "score": 0.5},  # exactly at the threshold: flagged
        {"kind": "flip", "label": 1, "score": 0.2},
        {"kind": "similar_photo", "label": 0, "score": 0.9},
        {"kind": "similar_photo", "label": 0, "score": 0.1},
        {"kind": "similar_photo", "label": 0, "score": 0.49},
    ]
    kinds = rates_by_kind(rows, threshold=0.5)
    assert list(kinds) == ["flip", "similar_photo"]
    assert kinds["flip"] == {"n": 2, "label": 1, "tpr": 0.5}
    assert kinds["similar_photo"]["n"] == 3 and "tpr" not in kinds["similar_photo"]
    assert kinds["similar_photo"]["fpr"] == pytest.approx(1 / 3)
