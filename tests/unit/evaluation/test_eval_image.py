import json
import math
import warnings

import numpy as np
import pytest
from sklearn import metrics as skm

from evaluation import UndefinedMetricWarning, image_metrics, roc_points

KEYS = [
    "auroc",
    "pauroc@0.1",
    "ap",
    "tpr@fpr=0.001",
    "tpr@fpr=0.01",
    "tpr@fpr=0.05",
    "tpr@fpr=0.1",
    "tpr",
    "tnr",
    "balanced_accuracy",
    "f1",
    "n_pos",
    "n_neg",
]


def reference(y, s, threshold=0.5, levels=(0.001, 0.01, 0.05, 0.1)):
    """Independent computation from scikit-learn (plus a brute-force TPR@FPR)."""
    fpr, tpr, _ = skm.roc_curve(y, s, drop_intermediate=False)
    pred = (s >= threshold).astype(int)
    tp = np.sum((pred == 1) & (y == 1))
    tn = np.sum((pred == 0) & (y == 0))
    out = {
        "auroc": skm.roc_auc_score(y, s),
        "pauroc@0.1": skm.roc_auc_score(y, s, max_fpr=0.1),
        "ap": skm.average_precision_score(y, s),
        "tpr": tp / np.sum(y == 1),
        "tnr": tn / np.sum(y == 0),
        "balanced_accuracy": skm.balanced_accuracy_score(y, pred),
        "f1": skm.f1_score(y, pred, zero_division=0),
        "n_pos": int(np.sum(y == 1)),
        "n_neg": int(np.sum(y == 0)),
    }
    for k in levels:
        out[f"tpr@fpr={k:g}"] = max(t for f, t in zip(fpr, tpr) if f <= k + 1e-15)
    return out


def assert_matches(got, want):
    assert list(got) == KEYS
    for key in KEYS:
        assert got[key] == pytest.approx(want[key], abs=1e-10), key


@pytest.mark.parametrize("seed", range(6))
def test_random_inputs_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 3000))
    y = (rng.random(n) < rng.uniform(0.1, 0.9)).astype(int)
    y[:2] = [0, 1]
    s = rng.random(n) + 0.4 * y
    if seed % 2:  # heavy ties
        s = np.round(s, 1)
    threshold = float(rng.uniform(0.2, 0.9))
    assert_matches(image_metrics(y, s, threshold=threshold), reference(y, s, threshold))


def test_all_equal_scores_are_chance():
    y = np.array([0, 1, 0, 1, 1, 0, 0])
    s = np.full(7, 0.3)
    got = image_metrics(y, s)
    assert_matches(got, reference(y, s))
    assert got["auroc"] == 0.5 and got["pauroc@0.1"] == 0.5
    # One threshold flags everything (FPR 1) so no point with FPR <= 0.1 has TPR > 0.
    assert got["tpr@fpr=0.1"] == 0.0


def test_perfect_and_inverted_separation():
    y = np.array([0, 0, 0, 1, 1])
    good = image_metrics(y, [0.1, 0.2, 0.3, 0.8, 0.9])
    assert good["auroc"] == 1.0 and good["pauroc@0.1"] == 1.0 and good["ap"] == 1.0
    assert good["tpr@fpr=0.001"] == 1.0 and good["balanced_accuracy"] == 1.0 and good["f1"] == 1.0
    bad = image_metrics(y, [0.9, 0.8, 0.7, 0.2, 0.1])
    assert bad["auroc"] == 0.0 and bad["tpr@fpr=0.1"] == 0.0 and bad["f1"] == 0.0


def test_tpr_at_fpr_hand_computed():
    # 10 negatives, 4 positives: scores chosen so the ROC steps are known by hand.
    neg = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.95]
    pos = [0.9, 0.85, 0.97, 0.05]
    y = np.r_[np.zeros(10), np.ones(4)]
    got = image_metrics(y, np.r_[neg, pos], fpr_levels=(0.0, 0.1, 0.25))
    # FPR 0 -> only 0.97 above every negative: TPR 1/4. FPR 0.1 -> threshold 0.85 flags 0.95: 3/4.
    assert got["tpr@fpr=0"] == 0.25
    assert got["tpr@fpr=0.1"] == 0.75
    assert got["tpr@fpr=0.25"] == 0.75
    # Threshold 0.5 flags negatives 0.5..0.95 (5) and positives 0.85, 0.9, 0.97 (3).
    assert got["tpr"] == 0.75 and got["tnr"] == 0.5
    assert got["f1"] == pytest.approx(2 * 3 / (2 * 3 + 5 + 1))


@pytest.mark.parametrize("level, n_neg", [(0.29, 100), (0.57, 100), (0.3, 10)])
def test_tpr_at_fpr_allows_exactly_level_times_n_negatives_despite_float_rounding(level, n_neg):
    """level * n_neg is an integer k in exact arithmetic (28.999999999999996 for 0.29 * 100 in floats):
    the ROC point with exactly k false positives is allowed."""
    k = round(level * n_neg)
    neg = np.arange(n_neg, dtype=float) / n_neg  # distinct scores
    pos = np.array([neg[n_neg - k] - 0.5 / n_neg])  # right below the k-th highest genuine score
    y = np.r_[np.zeros(n_neg, int), np.ones(1, int)]
    assert image_metrics(y, np.r_[neg, pos], fpr_levels=(level,))[f"tpr@fpr={level:g}"] == 1.0
    # one more false positive than allowed: the positive no longer counts
    assert image_metrics(y, np.r_[neg, pos - 1.0 / n_neg], fpr_levels=(level,))[f"tpr@fpr={level:g}"] == 0.0


def test_threshold_rule_is_greater_or_equal():
    got = image_metrics([0, 1], [0.5, 0.5], threshold=0.5)
    assert got["tpr"] == 1.0 and got["tnr"] == 0.0


@pytest.mark.parametrize("threshold", [float("nan"), np.array([0.5, np.nan, 0.5, 0.5])])
def test_a_nan_threshold_leaves_the_decision_metrics_undefined_with_a_warning(threshold):
    with pytest.warns(UndefinedMetricWarning, match="tpr, tnr, balanced_accuracy, f1 undefined .*threshold is NaN"):
        got = image_metrics([0, 0, 1, 1], [0.1, 0.6, 0.4, 0.9], threshold=threshold)
    for key in ("tpr", "tnr", "balanced_accuracy", "f1"):
        assert math.isnan(got[key]), key
    assert got["auroc"] == 0.75  # the ranking needs no threshold


def test_no_threshold_is_refused():
    with pytest.raises(ValueError, match="threshold is None"):
        image_metrics([0, 1], [0.2, 0.8], threshold=None)


@pytest.mark.parametrize("label", [0, 1])
def test_one_class_gives_nan_and_warning(label):
    y = np.full(5, label)
    with pytest.warns(UndefinedMetricWarning):
        got = image_metrics(y, np.linspace(0, 1, 5))
    for key in ["auroc", "pauroc@0.1", "ap", "tpr@fpr=0.01", "balanced_accuracy"]:
        assert math.isnan(got[key]), key
    defined = "tpr" if label == 1 else "tnr"
    assert got[defined] == pytest.approx(0.6 if label == 1 else 0.4)  # 3 of 5 scores >= 0.5
    assert got["n_pos"] + got["n_neg"] == 5


def test_empty_input_is_all_nan():
    with pytest.warns(UndefinedMetricWarning):
        got = image_metrics([], [])
    assert got["n_pos"] == 0 and got["n_neg"] == 0 and math.isnan(got["auroc"])


def test_both_classes_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        image_metrics([0, 1, 1], [0.2, 0.7, 0.9])


def test_nan_scores_raise_clear_error():
    with pytest.raises(ValueError, match="NaN.*index 2"):
        image_metrics([0, 1, 1], [0.1, 0.2, float("nan")])


def test_bad_labels_and_lengths_raise():
    with pytest.raises(ValueError, match="0 \\(genuine\\) or 1"):
        image_metrics([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="length"):
        image_metrics([0, 1, 1], [0.1, 0.2])


def test_output_is_plain_json():
    got = image_metrics(np.array([0, 1, 1], dtype=np.int8), np.array([0.1, 0.6, 0.4], np.float32))
    assert all(type(v) is float for k, v in got.items() if not k.startswith("n_"))
    assert type(got["n_pos"]) is int and type(got["n_neg"]) is int
    json.loads(json.dumps(got))


def test_bool_labels_float32_scores_and_infinities():
    y = np.array([False, True, True, False])
    s = np.array([-np.inf, np.inf, np.inf, 0.0], dtype=np.float32)
    got = image_metrics(y, s)
    assert got["auroc"] == 1.0


def test_roc_points_match_sklearn():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 500)
    s = np.round(rng.random(500), 2)
    fpr, tpr, thr = roc_points(y, s)
    rf, rt, rth = skm.roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, rf)
    np.testing.assert_allclose(tpr, rt)
    np.testing.assert_array_equal(thr[1:], rth[1:])


def test_bfloat16_scores_from_bf16_mixed_precision_are_accumulated_as_float32():
    import torch

    from evaluation import ImageScoreAccumulator

    labels = torch.tensor([0, 1, 0, 1])
    logits = torch.tensor([-1.0, 2.0, 0.5, 0.25], dtype=torch.bfloat16)
    acc = ImageScoreAccumulator()
    acc.update(labels, logits.sigmoid())
    assert acc.scores.dtype == np.float32
    assert acc.compute() == image_metrics(labels.numpy(), logits.sigmoid().float().numpy())
    assert image_metrics(labels, logits.sigmoid()) == acc.compute()
