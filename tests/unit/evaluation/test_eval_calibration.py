import math

import numpy as np
import pytest

from evaluation import UndefinedMetricWarning, calibrate_threshold


def fraction_flagged(s, t):
    return float(np.mean(np.asarray(s) >= t))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("target", [0.0, 0.01, 0.05, 0.1, 0.29, 0.5])
def test_constraint_holds_and_threshold_is_smallest(seed, target):
    rng = np.random.default_rng(seed)
    s = rng.random(int(rng.integers(1, 400)))
    if seed % 2:
        s = np.round(s, 1)  # many ties
    t = calibrate_threshold(s, target)
    assert fraction_flagged(s, t) <= target
    # Anything just below t breaks the bound (t is the smallest such threshold).
    below = np.nextafter(t, -np.inf)
    assert fraction_flagged(s, below) > target


def test_ties_never_push_fpr_over_target():
    s = [0.1, 0.5, 0.5, 0.5, 0.9]
    t = calibrate_threshold(s, 0.4)  # 2 of 5 allowed; the three 0.5s must not be flagged
    assert t > 0.5 and fraction_flagged(s, t) == 0.2


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
