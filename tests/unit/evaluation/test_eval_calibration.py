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


def test_edges():
    assert calibrate_threshold([0.2, 0.4], 1.0) == -math.inf
    assert calibrate_threshold([0.2, 0.4], 0.0) > 0.4
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(calibrate_threshold([], 0.05))
    with pytest.raises(ValueError, match="NaN"):
        calibrate_threshold([0.1, float("nan")], 0.05)
    with pytest.raises(ValueError, match="target_fpr"):
        calibrate_threshold([0.1], 1.5)
