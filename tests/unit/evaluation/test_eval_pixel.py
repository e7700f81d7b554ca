import math

import numpy as np
import pytest
from sklearn import metrics as skm

from evaluation import UndefinedMetricWarning
from evaluation.pixel import PIXEL_KEYS, PixelMetricAccumulator, boundary_band, pixel_metrics, resize_mask_nearest
from tests.helpers import TensorLike


def sk_reference(masks, probs, threshold=0.5):
    """Per-image scikit-learn metrics over manipulated images, pooled counts, genuine FPR."""
    f1, iou, auc, best, fpr_g = [], [], [], [], []
    tp = fp = fn = 0
    for m, p in zip(masks, probs):
        y, s = m.ravel().astype(int), p.ravel().astype(np.float32)
        pred = (s >= threshold).astype(int)
        if not y.any():
            fpr_g.append(pred.mean())
            continue
        f1.append(skm.f1_score(y, pred, zero_division=0))
        iou.append(skm.jaccard_score(y, pred, zero_division=0))
        auc.append(skm.roc_auc_score(y, s) if not y.all() else np.nan)
        prec, rec, _ = skm.precision_recall_curve(y, s)
        with np.errstate(invalid="ignore"):
            best.append(np.nanmax(np.where(prec + rec > 0, 2 * prec * rec / (prec + rec), 0)))
        tp += np.sum(pred & y)
        fp += np.sum(pred & (1 - y))
        fn += np.sum((1 - pred) & y)
    return {
        "pixel_f1": np.mean(f1),
        "pixel_iou": np.mean(iou),
        "pixel_auroc": np.nanmean(auc),
        "pixel_f1_best": np.mean(best),
        "pixel_f1_pooled": 2 * tp / (2 * tp + fp + fn),
        "pixel_iou_pooled": tp / (tp + fp + fn),
        "pixel_fpr_genuine": np.mean(fpr_g) if fpr_g else np.nan,
        "n_masks": len(f1),
    }


def random_set(seed, n=8, size=(24, 32), ties=False):
    rng = np.random.default_rng(seed)
    masks, probs = [], []
    for i in range(n):
        m = np.zeros(size, bool)
        if i % 4:  # every fourth image is genuine
            r, c = rng.integers(0, size[0] - 6), rng.integers(0, size[1] - 6)
            m[r : r + rng.integers(3, 12), c : c + rng.integers(3, 14)] = True
        p = np.clip(rng.random(size) * 0.7 + 0.35 * m, 0, 1).astype(np.float32)
        if ties:
            p = np.round(p, 1).astype(np.float32)
        masks.append(m)
        probs.append(p)
    return masks, probs


@pytest.mark.parametrize("seed,ties", [(0, False), (1, True), (2, False), (3, True)])
def test_matches_sklearn_per_image(seed, ties):
    masks, probs = random_set(seed, ties=ties)
    got = pixel_metrics(masks, probs, threshold=0.45)
    want = sk_reference(masks, probs, threshold=0.45)
    assert list(got) == list(PIXEL_KEYS)
    for key in PIXEL_KEYS:
        assert got[key] == pytest.approx(want[key], abs=1e-9), key


def test_streaming_equals_one_shot():
    masks, probs = random_set(5, n=12)
    one_shot = pixel_metrics(np.stack(masks), np.stack(probs)[:, None])
    acc = PixelMetricAccumulator()
    for start in range(0, 12, 5):  # uneven batches, list and array inputs mixed
        batch_m, batch_p = masks[start : start + 5], probs[start : start + 5]
        acc.update(np.stack(batch_m) if start else batch_m, np.stack(batch_p))
    assert acc.compute() == one_shot
    left, right = PixelMetricAccumulator(), PixelMetricAccumulator()
    left.update(masks[:7], probs[:7])
    right.update(masks[7:], probs[7:])
    assert left.merge(right).compute() == one_shot


def test_tensors_accepted():
    masks, probs = random_set(6, n=4)
    got = pixel_metrics(TensorLike(np.stack(masks)[:, None]), TensorLike(np.stack(probs)[:, None]))
    assert got == pixel_metrics(masks, probs)


def test_perfect_prediction_and_all_positive_mask():
    m = np.zeros((8, 8), bool)
    m[2:5, 2:6] = True
    full = np.ones((8, 8), bool)
    with pytest.warns(UndefinedMetricWarning, match="pixel_fpr_genuine"):
        got = pixel_metrics([m, full], [m.astype(np.float32), np.full((8, 8), 0.9, np.float32)])
    assert got["pixel_f1"] == 1.0 and got["pixel_iou"] == 1.0 and got["pixel_f1_best"] == 1.0
    # AUROC is undefined on the all-positive mask and averaged over the image where it exists.
    assert got["pixel_auroc"] == 1.0 and got["n_masks"] == 2


def test_genuine_only_and_empty_prediction():
    with pytest.warns(UndefinedMetricWarning):
        got = pixel_metrics([np.zeros((4, 4)), None], [np.full((4, 4), 0.7), np.zeros((4, 4))])
    assert got["n_masks"] == 0 and math.isnan(got["pixel_f1"]) and math.isnan(got["pixel_auroc"])
    assert got["pixel_fpr_genuine"] == 0.5  # all pixels of one image, none of the other
    m = np.zeros((4, 4), bool)
    m[0, 0] = True
    missed = pixel_metrics([m, None], [np.zeros((4, 4)), np.zeros((4, 4))])
    assert missed["pixel_f1"] == 0.0 and missed["pixel_iou"] == 0.0 and missed["pixel_f1_pooled"] == 0.0


@pytest.mark.filterwarnings("ignore:pixel_fpr_genuine")
def test_uint8_masks_resized_nearest():
    small = np.zeros((4, 4), np.uint8)
    small[:2, :2] = 255
    big = resize_mask_nearest(small >= 128, (8, 8))
    assert big[:4, :4].all() and not big[4:].any() and not big[:, 4:].any()
    got = pixel_metrics([small], [big.astype(np.float32)])
    assert got["pixel_f1"] == 1.0
    odd = resize_mask_nearest(np.eye(3, dtype=bool), (7, 5))
    assert set(np.unique(odd)) <= {False, True} and odd.shape == (7, 5)


@pytest.mark.filterwarnings("ignore:pixel_fpr_genuine")
def test_boundary_band_and_tolerance():
    m = np.zeros((11, 11), bool)
    m[3:8, 3:8] = True
    band = boundary_band(m, 1)
    # Outer ring of the square (dilated minus square) plus its inner ring (square minus eroded).
    expected = np.zeros_like(m)
    expected[2:9, 2:9] = True
    expected[4:7, 4:7] = False
    np.testing.assert_array_equal(band, expected)
    # A prediction one pixel too large is perfect once the 1-pixel band is ignored.
    pred = np.zeros((11, 11), np.float32)
    pred[2:9, 2:9] = 1
    assert pixel_metrics([m], [pred])["pixel_f1"] < 1
    assert pixel_metrics([m], [pred], boundary_tolerance=1)["pixel_f1"] == 1.0


@pytest.mark.filterwarnings("ignore:pixel_f1, pixel_iou")  # the last call: nothing left to score
def test_an_image_whose_true_mask_lies_wholly_in_the_ignored_band_is_left_out_of_the_pixel_figures():
    """A one-pixel line with a 1-pixel tolerance leaves no positive pixel to find: F1 / IoU / AUROC are
    undefined for it, so the figures (per image and pooled) are those of the other images, with a warning."""
    thin = np.zeros((9, 9), bool)
    thin[4, :] = True
    marking_outside = thin.astype(np.float32)
    marking_outside[0, :3] = 1  # false positives outside the band change nothing either
    square = np.zeros((11, 11), bool)
    square[3:8, 3:8] = True
    partial = np.zeros((11, 11), np.float32)
    partial[2:6, 2:9] = 0.9
    genuine = np.zeros((11, 11), np.float32)
    genuine[0, :2] = 1
    with pytest.warns(UndefinedMetricWarning, match="2 manipulated image"):
        mixed = pixel_metrics(
            [thin, square, thin, None], [thin.astype(float), partial, marking_outside, genuine], boundary_tolerance=1
        )
    alone = pixel_metrics([square, None], [partial, genuine], boundary_tolerance=1)
    assert mixed == alone and alone["n_masks"] == 1
    keep = ~boundary_band(square, 1)
    assert alone["pixel_f1"] == pytest.approx(skm.f1_score(square[keep], partial[keep] >= 0.5))
    shard, other = PixelMetricAccumulator(boundary_tolerance=1), PixelMetricAccumulator(boundary_tolerance=1)
    shard.add(thin, thin.astype(float))
    other.update([square, None], [partial, genuine])
    with pytest.warns(UndefinedMetricWarning, match="1 manipulated image"):
        assert other.merge(shard).compute() == alone  # shards carry the count
    with pytest.warns(UndefinedMetricWarning, match="1 manipulated image"):
        only = pixel_metrics([thin], [thin.astype(float)], boundary_tolerance=1)
    assert only["n_masks"] == 0 and math.isnan(only["pixel_f1"]) and math.isnan(only["pixel_f1_pooled"])


def test_nan_probabilities_raise():
    with pytest.raises(ValueError, match="NaN"):
        pixel_metrics([np.ones((2, 2))], [np.array([[0.1, np.nan], [0.2, 0.3]])])


def test_mismatched_batch_raises():
    with pytest.raises(ValueError, match="masks"):
        pixel_metrics([np.ones((2, 2))], [np.zeros((2, 2)), np.zeros((2, 2))])


def test_fast_mode_skips_curves_without_warning(recwarn):
    masks, probs = random_set(9, n=5)
    got = pixel_metrics(masks, probs, per_image_curves=False)
    assert math.isnan(got["pixel_auroc"]) and math.isnan(got["pixel_f1_best"])
    assert got["pixel_f1"] == pixel_metrics(masks, probs)["pixel_f1"]
    assert not [w for w in recwarn if issubclass(w.category, UndefinedMetricWarning)]


def test_localizer_checkpoints_are_chosen_by_pixel_f1_within_the_genuine_pixels_bound():
    """A map that marks genuine images beyond the bound loses to any within it, however high its F1;
    beyond the bound, the one marking fewest wins."""
    from evaluation.pixel import GENUINE_PIXEL_FPR_LIMIT, f1_within_genuine_fpr

    within = {"pixel_f1": 0.30, "pixel_fpr_genuine": GENUINE_PIXEL_FPR_LIMIT}
    beyond = {"pixel_f1": 0.90, "pixel_fpr_genuine": 0.06}
    far_beyond = {"pixel_f1": 0.95, "pixel_fpr_genuine": 0.30}
    assert f1_within_genuine_fpr(within) == 0.30
    assert f1_within_genuine_fpr(within) > f1_within_genuine_fpr(beyond) > f1_within_genuine_fpr(far_beyond)
    assert f1_within_genuine_fpr({"pixel_f1": 0.4, "pixel_fpr_genuine": float("nan")}) == 0.4  # no genuine image


def test_bfloat16_tensors_are_scored_as_their_float32_values():
    """bf16-mixed precision hands bfloat16 maps, a dtype numpy has none of."""
    import torch

    rng = np.random.default_rng(0)
    masks = torch.from_numpy(rng.random((2, 1, 16, 16)) > 0.6)
    masks[1] = False  # a genuine image too
    probs = torch.from_numpy(rng.random((2, 1, 16, 16)).astype(np.float32)).to(torch.bfloat16)
    assert pixel_metrics(masks, probs) == pixel_metrics(masks, probs.float())
