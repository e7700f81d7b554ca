"""Duplication metrics: THEMIS sets on duplicated pairs, pair decisions, pair pixel counts."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import matthews_corrcoef

from detectors.matching import Geometry
from evaluation.protocols.duplication import cmo_set, duplication_metrics, pair_pixel_counts, parse_operations


def test_fine_operations_map_to_themis_answers():
    assert cmo_set(["hflip", "brightness", "scaling"]) == {"flip", "parameter", "scaling"}
    assert parse_operations("rotate180;hue") == {"rotation", "parameter"}
    assert parse_operations("") == set()
    with pytest.raises(ValueError, match="unknown duplication operations"):
        cmo_set(["shear"])


@pytest.mark.parametrize(
    "rotation, answers",
    [(0.0, {"flip"}), (180.0, {"flip"}), (90.0, {"flip", "rotation"}), (-30.0, {"flip", "rotation"})],
)
def test_a_mirror_is_a_flip_and_a_turn_other_than_a_flip_equivalent_is_a_rotation_too(rotation, answers):
    """THEMIS CMO-I asks for every type that appears: mirror + 0 is a horizontal flip, mirror + 180 a
    vertical one; a mirror turned by any other angle is not a flip alone."""
    fine = Geometry(rotation=rotation, scale=1.0, flipped=True).operations()
    assert cmo_set(fine) == answers


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


def _square(size: int = 8) -> np.ndarray:
    mask = np.zeros((size, size), bool)
    mask[2:5, 2:5] = True
    return mask


def test_a_missed_duplicated_pair_counts_zero_in_pixel_mcc_as_in_pixel_f1():
    """A pair judged not duplicated predicts empty masks: MCC 0 (sklearn's value), not left out."""
    truth, empty = _square(), np.zeros((8, 8), bool)
    rows = [
        {"label": 1, "score": 0.9, "truth": {"direct"}, "predicted": {"direct"}},
        {"label": 1, "score": 0.1, "truth": {"direct"}, "predicted": set()},
        {"label": 0, "score": 0.2, "truth": set(), "predicted": set()},
    ]
    masks = [(truth, truth), (truth, empty), (empty, empty)]
    counts = [pair_pixel_counts(t, t, p, p) for t, p in masks]
    expected = [matthews_corrcoef(np.r_[t.ravel(), t.ravel()], np.r_[p.ravel(), p.ravel()]) for t, p in masks[:2]]
    assert expected == [1.0, 0.0]
    metrics = duplication_metrics(rows, 0.5, counts)
    assert metrics["pixel_mcc"] == pytest.approx(np.mean(expected))
    assert metrics["pixel_f1"] == pytest.approx(0.5)
    assert metrics["n_mask_pairs"] == 2


def test_pixel_mcc_leaves_out_a_pair_whose_truth_or_prediction_has_one_class_only():
    """A whole-panel copy (true masks fill both panels) has no true-negative pixel, and a mask marking
    every pixel no predicted negative: MCC is undefined there (not a miss: that copy's F1 is high),
    and the mean is over the other duplicated pairs."""
    full, most = np.ones((8, 8), bool), np.ones((8, 8), bool)
    most[0, 0] = False  # a near-whole-panel copy, marked whole
    rows = [{"label": 1, "score": 0.9, "truth": {"direct"}, "predicted": {"direct"}}] * 3
    counts = [
        pair_pixel_counts(full, full, _square(), full),
        pair_pixel_counts(most, most, full, full),
        pair_pixel_counts(_square(), _square(), _square(), _square()),
    ]
    metrics = duplication_metrics(rows, 0.5, counts)
    assert metrics["pixel_mcc"] == 1.0 and metrics["pixel_f1"] < 1.0


def test_a_missed_whole_panel_copy_is_left_out_of_pixel_mcc_as_a_found_one_is():
    """Its MCC is undefined whatever is predicted: counting its misses 0 while its hits are left out
    would average the misses alone (pixel F1 counts both)."""
    full, empty = np.ones((8, 8), bool), np.zeros((8, 8), bool)
    rows = [
        {"label": 1, "score": 0.9, "truth": {"direct"}, "predicted": {"direct"}},  # found
        {"label": 1, "score": 0.1, "truth": {"direct"}, "predicted": set()},  # missed
        {"label": 1, "score": 0.9, "truth": {"direct"}, "predicted": {"direct"}},  # a partial copy found
    ]
    counts = [
        pair_pixel_counts(full, full, full, full),
        pair_pixel_counts(full, full, empty, empty),
        pair_pixel_counts(_square(), _square(), _square(), _square()),
    ]
    metrics = duplication_metrics(rows, 0.5, counts)
    assert metrics["pixel_mcc"] == 1.0 and metrics["pixel_f1"] == pytest.approx(2 / 3)


def test_a_training_free_pair_detectors_run_writes_a_report_of_its_pair_figures(tmp_path, caplog):
    from evaluation.calibration import NON_DUPLICATE_PAIRS, calibration_check
    from train import write_pair_report

    figures = {"pair_auroc": 0.9883, "pair_f1": float("nan"), "n_pairs": 501, "operations": {"set_f1": 0.944}}
    figures["by_operation"] = {"flip": {"n": 50, "recall": 0.96, "precision": 1.0}}
    check = calibration_check(np.linspace(0, 0.9, 327), 0.85, 0.01, negatives=NON_DUPLICATE_PAIRS)
    metrics = {"detector": "dup_sift_tiny", "test": figures, "val": {"pair_auroc": 0.9989}, "calibration": check}
    with caplog.at_level("WARNING"):
        write_pair_report(tmp_path, metrics, html=True)
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# Test report: dup_sift_tiny\n\n## Test pairs")
    assert "| pair_auroc | 0.9883 |" in report and "| pair_f1 | – |" in report and "| n_pairs | 501 |" in report
    assert "| | n | recall | precision |\n| --- | --- | --- | --- |\n| flip | 50 | 0.9600 | 1.0000 |" in report
    assert "## Validation pairs" in report and "| pair_auroc | 0.9989 |" in report
    assert "on 327 validation pairs without duplication" in report  # the calibration section
    assert "python infer.py model=<its best.ckpt>" in caplog.text  # no page: the pairs have no files


def test_train_py_writes_that_report_for_a_pair_detector_fitted_without_gradients(tmp_path):
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from train import report_and_summary

    module = SimpleNamespace(stage_scores={}, threshold=0.3)
    metrics = {"detector": "dup_sift_tiny", "test": {"pair_auroc": 0.99}, "val": {"pair_auroc": 0.98}}
    report_and_summary(OmegaConf.create({"report": "md"}), tmp_path, module, None, metrics)
    assert (tmp_path / "metrics.json").is_file() and "| pair_auroc | 0.9900 |" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("scores", [[0.1, 0.2, 0.3, 0.4], [0.9, 0.8, 0.7, 0.6]], ids=["none flagged", "all flagged"])
def test_pair_decisions_all_of_one_kind_have_no_skill_not_an_undefined_mcc(scores):
    rows = [{"label": label, "score": s, "truth": None, "predicted": set()} for label, s in zip([1, 1, 0, 0], scores)]
    metrics = duplication_metrics(rows, threshold=0.5)
    decided = [int(s >= 0.5) for s in scores]
    assert metrics["pair_mcc"] == matthews_corrcoef([1, 1, 0, 0], decided) == 0.0
    assert metrics["pair_f1"] == (0.0 if not any(decided) else pytest.approx(2 / 3))


def test_pair_mcc_is_undefined_when_the_truth_holds_one_class():
    rows = [{"label": 1, "score": s, "truth": None, "predicted": set()} for s in (0.9, 0.2)]
    metrics = duplication_metrics(rows, threshold=0.5)
    assert np.isnan(metrics["pair_mcc"]) and metrics["pair_f1"] == pytest.approx(2 / 3)
