import math

import numpy as np
import pytest

from evaluation import UndefinedMetricWarning, calibrate_threshold


def fraction_flagged(s, t):
    return float(np.mean(np.asarray(s) >= t))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("target", [0.0, 0.01, 0.05, 0.1, 0.29, 0.5])
def test_constraint_holds_and_threshold_sits_mid_gap(seed, target):
    rng = np.random.default_rng(seed)
    s = rng.random(int(rng.integers(1, 400)))
    if seed % 2:
        s = np.round(s, 1)  # many ties
    t = calibrate_threshold(s, target)
    assert fraction_flagged(s, t) <= target
    # The highest genuine score below t already breaks the bound (as many flagged as allowed) ...
    below = s[s < t]
    if below.size:
        assert fraction_flagged(s, below.max()) > target
        # ... and t is the middle of the gap to the next genuine score, away from both.
        above = s[s >= t]
        if above.size:
            assert t == pytest.approx((below.max() + above.min()) / 2)


def test_ties_never_push_fpr_over_target():
    s = [0.1, 0.5, 0.5, 0.5, 0.9]
    t = calibrate_threshold(s, 0.4)  # 2 of 5 allowed; the three 0.5s must not be flagged
    assert t == pytest.approx(0.7) and fraction_flagged(s, t) == 0.2


def test_scores_within_float_noise_of_the_threshold_keep_their_label():
    genuine = np.linspace(0.0, 0.9, 1000).astype(np.float32)
    t = calibrate_threshold(genuine, 0.01)
    flagged = genuine >= t
    noisy = genuine + np.float32(1e-6) * np.sign(np.random.default_rng(0).standard_normal(1000)).astype(np.float32)
    np.testing.assert_array_equal(noisy >= np.float32(t), flagged)


def test_exact_count_is_allowed():
    s = [0.29 * k for k in range(100)]
    t = calibrate_threshold(s, 0.29)  # 0.29 * 100 = 28.999... in floats; 29 are allowed
    assert fraction_flagged(s, t) == 0.29


def test_float32_scores_keep_the_tie_out_after_casting():
    s = np.array([0.1, 0.7, 0.7, 0.9], dtype=np.float32)
    t = calibrate_threshold(s, 0.25)
    assert np.float32(t) > np.float32(0.7)
    assert fraction_flagged(s, np.float32(t)) == 0.25


@pytest.mark.parametrize("base", [0.7, 0.3, 0.55, 0.9, 0.123])
def test_float32_scores_one_ulp_apart_stay_apart_after_casting(base):
    """A boundary one float32 ulp below the next genuine score: the threshold must land strictly
    between them in float32 too, or casting it (as an ONNX model's metadata is read) re-creates the tie."""
    b = np.float32(base)
    up = np.nextafter(b, np.float32(1))
    s = np.array([0.01, b, up, np.nextafter(up, np.float32(1))], dtype=np.float32)
    t = calibrate_threshold(s, 0.5)  # two of four may be flagged: `up` and the one above it
    assert b < np.float32(t) <= up
    assert fraction_flagged(s, np.float32(t)) == 0.5 and fraction_flagged(s, t) == 0.5


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_scores_of_any_float_dtype_are_calibrated_in_their_own_precision(dtype):
    b = dtype(0.7)
    up = np.nextafter(b, dtype(1))  # one ulp of the scores' own precision apart
    s = np.array([0.01, 0.2, b, b, up, np.nextafter(up, dtype(1))], dtype=dtype)
    t = calibrate_threshold(s, 2 / 6)  # `up` and the one above it may be flagged, not the tied b's
    assert b < dtype(t) <= up and float(dtype(t)) == t  # t is a value of the scores' own dtype
    assert fraction_flagged(s, dtype(t)) == fraction_flagged(s, t) == pytest.approx(2 / 6)
    t = calibrate_threshold(s, 0.0)  # nothing flagged: t lies above the top score
    assert fraction_flagged(s, t) == 0.0 and dtype(t) > s.max()


def test_scores_wider_than_float64_keep_the_bound():
    b = np.longdouble(0.7)
    s = np.array([0.1, b, np.nextafter(b, np.longdouble(1)), 0.9], dtype=np.longdouble)
    t = calibrate_threshold(s, 0.25)  # the returned float cannot part b from its next longdouble
    assert fraction_flagged(s, t) == 0.25 and t > 0.7


def test_edges():
    assert calibrate_threshold([0.2, 0.4], 1.0) == -math.inf
    assert calibrate_threshold([0.2, 0.4], 0.0) > 0.4
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(calibrate_threshold([], 0.05))
    with pytest.raises(ValueError, match="NaN"):
        calibrate_threshold([0.1, float("nan")], 0.05)
    with pytest.raises(ValueError, match="target_fpr"):
        calibrate_threshold([0.1], 1.5)


# ---------------------------------------------------------------- how far a calibration can be trusted
from scipy.stats import binomtest  # noqa: E402 - after the exact binomial reference above, which it checks against

from evaluation import calibration_check, clopper_pearson, genuine_needed  # noqa: E402 - after the exact binomial reference above, which it checks against


@pytest.mark.parametrize("k, n", [(0, 20), (1, 20), (3, 100), (7, 7), (0, 300)])
def test_clopper_pearson_matches_the_exact_binomial_interval(k, n):
    expected = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    low, high = clopper_pearson(k, n)
    assert low == pytest.approx(expected.low, abs=1e-9) and high == pytest.approx(expected.high, abs=1e-9)


def test_zero_false_positives_bound_the_fpr_by_the_rule_of_three():
    assert genuine_needed(0.01) == 299 and genuine_needed(0.05) == 59
    # the one-sided 95 % bound of 0/n is 1 - 0.05**(1/n): below the target exactly from genuine_needed on
    n = genuine_needed(0.01)
    assert 1 - 0.05 ** (1 / n) <= 0.01 < 1 - 0.05 ** (1 / (n - 1))
    assert clopper_pearson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        clopper_pearson(5, 4)


def test_calibration_check_warns_when_the_validation_genuines_are_too_few():
    scores = np.linspace(0.0, 1.0, 20)
    check = calibration_check(scores, threshold=0.96, target_fpr=0.01)
    assert check["n_genuine"] == 20 and check["false_positives"] == 1
    assert check["fpr_interval"][0] < 0.05 < check["fpr_interval"][1]
    assert not check["sufficient"] and "299" in check["warning"] and "20 genuine" in check["warning"]
    enough = calibration_check(np.linspace(0.0, 0.9, 400), threshold=0.95, target_fpr=0.01)
    assert enough["sufficient"] and "warning" not in enough and enough["fpr_interval"][1] < 0.01


def test_a_threshold_above_every_possible_score_is_said_to_flag_nothing():
    saturated = np.concatenate([np.linspace(0.0, 0.9, 388), np.ones(12)])  # 12 of 400 genuines score 1
    threshold = calibrate_threshold(saturated, target_fpr=0.01)
    assert threshold > 1.0
    check = calibration_check(saturated, threshold, target_fpr=0.01)
    assert check["sufficient"] and "flags no image at all" in check["warning"] and "12 of 400" in check["warning"]


# --- rule=bound: the true FPR stays under the target with the stated confidence -------------------
from evaluation.calibration import bounded_allowance  # noqa: E402 - the bound rule's own helper


@pytest.mark.parametrize("n", [299, 1000, 5000])
def test_the_bound_flags_the_most_genuines_whose_binomial_tail_stays_under_the_risk(n):
    from scipy.stats import binom

    m = bounded_allowance(n, 0.01)
    if n < genuine_needed(0.01):
        assert m == 0
    else:
        assert binom.cdf(m, n, 0.01) <= 0.05 < binom.cdf(m + 1, n, 0.01)
    assert m <= math.floor(0.01 * n)  # never more than the quantile rule flags


def test_the_bound_keeps_the_true_fpr_under_the_target_in_95_percent_of_samples_the_quantile_in_half():
    # Genuine scores uniform on [0, 1]: a threshold t has true FPR 1 - t exactly.
    rng = np.random.default_rng(0)
    over = {"quantile": 0, "bound": 0}
    trials = 400
    for _ in range(trials):
        scores = rng.random(1000)
        for rule in over:
            over[rule] += (1.0 - calibrate_threshold(scores, 0.01, rule)) > 0.01
    assert over["bound"] / trials <= 0.08
    assert 0.3 <= over["quantile"] / trials <= 0.7


def test_an_unknown_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="quantile, bound"):
        calibrate_threshold(np.linspace(0, 1, 500), 0.01, rule="median")


def test_the_report_names_the_bound_rule_and_not_the_default():
    from evaluation import calibration_markdown

    check = calibration_check(np.linspace(0, 1, 1000), threshold=0.996, target_fpr=0.01)
    assert "rule bound" not in calibration_markdown(check)
    assert "(rule bound: the true FPR is at or under the target with 95% confidence)" in calibration_markdown(
        {**check, "rule": "bound"}
    )
    too_few = calibration_check(np.linspace(0, 1, 130), threshold=1.0, target_fpr=0.01)  # 299 needed
    said = calibration_markdown({**too_few, "rule": "bound"})
    assert "at or under the target with 95% confidence" not in said and "needs more of them than this" in said


def test_the_report_says_how_many_sources_the_genuines_were_cut_from_when_fewer_than_images():
    from evaluation import calibration_markdown

    check = calibration_check(np.linspace(0, 1, 1000), threshold=0.996, target_fpr=0.01)
    assert "on 1000 genuine validation images (cut from 120 sources: crops of one source are not independent" in (
        calibration_markdown({**check, "genuine_sources": 120})
    )
    for plain in (check, {**check, "genuine_sources": 1000}):
        assert "on 1000 genuine validation images: 4 of them at or above it" in calibration_markdown(plain)


def test_a_pair_detectors_calibration_names_pairs_without_duplication_not_genuine_images():
    from evaluation import calibration_markdown
    from evaluation.calibration import NON_DUPLICATE_PAIRS

    check = calibration_check(np.linspace(0, 1, 95), threshold=0.99, target_fpr=0.01, negatives=NON_DUPLICATE_PAIRS)
    assert check["warning"].startswith("the threshold was calibrated on 95 validation pairs without duplication;")
    assert "expect more pairs without duplication flagged" in check["warning"]
    section = calibration_markdown(check)
    assert "on 95 validation pairs without duplication: 1 of them" in section and "genuine" not in section


def test_tied_top_genuine_scores_keep_their_label_when_another_backend_scores_them_a_little_higher():
    """The top genuine scores tied (crops of one flat photo), nothing above them: another backend's
    last bits (up to 2e-7 measured between training and infer.py) must not flag them."""
    tied = np.float32(0.83262509)
    s = np.concatenate([np.linspace(0.1, 0.8, 100, dtype=np.float32), np.full(16, tied)])
    t = np.float32(calibrate_threshold(s, 0.0))
    assert tied + np.float32(5e-7) < t < tied + np.float32(1e-5)
