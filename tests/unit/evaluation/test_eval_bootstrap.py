import math

import numpy as np
import pytest

from evaluation import PixelMetricAccumulator, UndefinedMetricWarning, image_metrics
from evaluation.bootstrap import bootstrap_image_ci, bootstrap_pixel_ci


def data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    return y, rng.random(n) + 0.5 * y


def test_interval_brackets_point_estimate_and_is_seeded():
    y, s = data()
    ci = bootstrap_image_ci(y, s, n_resamples=200, seed=1)
    point = image_metrics(y, s)
    for key, (lo, hi) in ci.items():
        assert lo <= point[key] <= hi, key
        assert hi - lo < 0.5, key
    assert ci == bootstrap_image_ci(y, s, n_resamples=200, seed=1)
    assert ci != bootstrap_image_ci(y, s, n_resamples=200, seed=2)


def test_interval_shrinks_with_more_data():
    small = bootstrap_image_ci(*data(100), keys=("auroc",), n_resamples=200)["auroc"]
    large = bootstrap_image_ci(*data(3000), keys=("auroc",), n_resamples=200)["auroc"]
    assert large[1] - large[0] < small[1] - small[0]


def test_auroc_interval_matches_hand_resampling():
    # Same seed and draw order as the implementation: stratified by class.
    y, s = data(80, seed=3)
    ci = bootstrap_image_ci(y, s, keys=("auroc",), n_resamples=50, seed=7, confidence=0.9)
    rng = np.random.default_rng(7)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    vals = []
    for _ in range(50):
        idx = np.concatenate([rng.choice(pos, pos.size), rng.choice(neg, neg.size)])
        vals.append(image_metrics(y[idx], s[idx])["auroc"])
    assert ci["auroc"] == pytest.approx(tuple(np.quantile(vals, [0.05, 0.95])))


def test_one_class_gives_nan_interval():
    with pytest.warns(UndefinedMetricWarning):
        ci = bootstrap_image_ci([1, 1, 1], [0.1, 0.2, 0.3], n_resamples=10)
    assert all(math.isnan(lo) and math.isnan(hi) for lo, hi in ci.values())


@pytest.mark.filterwarnings("ignore:pixel_fpr_genuine")
def test_pixel_interval_contains_estimate():
    rng = np.random.default_rng(0)
    acc = PixelMetricAccumulator()
    for _ in range(30):
        m = np.zeros((16, 16), bool)
        m[4 : 4 + rng.integers(2, 10), 3:12] = True
        acc.add(m, (rng.random((16, 16)) * 0.7 + 0.4 * m).astype(np.float32))
    point = acc.compute()
    ci = bootstrap_pixel_ci(acc, n_resamples=300, seed=0)
    for key, (lo, hi) in ci.items():
        assert lo <= point[key] <= hi, key
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(bootstrap_pixel_ci(PixelMetricAccumulator())["pixel_f1"][0])


def test_a_threshold_per_image_is_resampled_with_its_images():
    y = np.array([1, 1, 1, 1, 0, 0, 0, 0])
    s = np.array([0.6, 0.6, 0.4, 0.4, 0.1, 0.1, 0.1, 0.1])
    per_image = np.array([0.5, 0.5, 0.3, 0.9, 0.5, 0.5, 0.5, 0.5])  # image 2 flagged, image 3 not
    point = image_metrics(y, s, threshold=per_image)["tpr"]
    assert point == 0.75
    lo, hi = bootstrap_image_ci(y, s, keys=("tpr",), n_resamples=300, threshold=per_image)["tpr"]
    assert lo < point < hi and lo >= 0.25 and hi == 1.0
    with pytest.raises(ValueError, match="one per score"):
        bootstrap_image_ci(y, s, keys=("tpr",), n_resamples=3, threshold=per_image[:4])
