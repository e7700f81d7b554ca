"""Pixel metrics at the exact boundaries the documented protocol states: a pixel is predicted
positive when its probability is >= the threshold; a float mask is positive from 0.5 and an 8-bit
mask from 128; genuine images are scored by the fraction of pixels at or above the threshold."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.pixel import PixelMetricAccumulator, binarize_mask, pixel_metrics, resize_mask_nearest


def odd_truth() -> np.ndarray:
    """A 7 x 11 mask whose left 4 columns are manipulated (28 positive pixels of 77)."""
    truth = np.zeros((7, 11), bool)
    truth[:, :4] = True
    return truth


@pytest.mark.parametrize("threshold", [0.5, 0.3, 0.25, 0.9])
def test_a_probability_exactly_at_the_threshold_counts_as_predicted(threshold):
    truth = odd_truth()
    at = np.where(truth, np.float32(threshold), np.float32(0.0))  # the manipulated pixels sit on it
    metrics = pixel_metrics([truth], [at], threshold=threshold)
    assert metrics["pixel_f1"] == 1.0 and metrics["pixel_iou"] == 1.0
    below = np.where(truth, np.nextafter(np.float32(threshold), np.float32(0)), np.float32(0.0))
    metrics = pixel_metrics([truth], [below], threshold=threshold)
    assert metrics["pixel_f1"] == 0.0 and metrics["pixel_iou"] == 0.0


def test_pooled_counts_follow_the_same_boundary():
    truth = odd_truth()
    prob = np.zeros(truth.shape, np.float32)
    prob[:, :2] = 0.5  # 14 true positives exactly at the threshold
    prob[:, 4] = 0.5  # 7 false positives exactly at it
    prob[:, 5] = np.nextafter(np.float32(0.5), np.float32(0))  # just below: not predicted
    metrics = pixel_metrics([truth], [prob])
    tp, fp, fn = 14, 7, 14
    assert metrics["pixel_f1_pooled"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert metrics["pixel_iou_pooled"] == pytest.approx(tp / (tp + fp + fn))


def test_a_genuine_image_at_the_threshold_counts_its_pixels_as_false_positives():
    prob = np.zeros((5, 9), np.float32)
    prob[:2] = 0.5  # 18 of 45 pixels exactly at the threshold, the rest far below
    accumulator = PixelMetricAccumulator(threshold=0.5)
    accumulator.add(None, prob)
    assert accumulator.fpr_genuine == [pytest.approx(18 / 45)]
    accumulator = PixelMetricAccumulator(threshold=0.5)
    accumulator.add(None, np.nextafter(prob, np.float32(0)))
    assert accumulator.fpr_genuine == [0.0]


def test_mask_binarization_boundaries():
    floats = np.array([[0.0, np.nextafter(np.float32(0.5), np.float32(0)), 0.5, 1.0]], np.float32)
    assert binarize_mask(floats).tolist() == [[False, False, True, True]]
    eight_bit = np.array([[0, 127, 128, 255]], np.uint8)
    assert binarize_mask(eight_bit).tolist() == [[False, False, True, True]]
    zero_one = np.array([[0, 1, 0, 1]], np.uint8)  # 0/1 integer masks: positive from 1
    assert binarize_mask(zero_one).tolist() == [[False, True, False, True]]


@pytest.mark.parametrize("mask_shape, map_shape", [((5, 9), (9, 5)), ((6, 4), (13, 7)), ((7, 3), (7, 11))])
def test_a_mask_is_resized_to_the_map_keeping_rows_as_rows(mask_shape, map_shape):
    """The mask's top-left quarter stays top-left at the map's size, whatever the two aspects."""
    mask = np.zeros(mask_shape, bool)
    mask[: (mask_shape[0] + 1) // 2, : (mask_shape[1] + 1) // 2] = True
    resized = resize_mask_nearest(mask, map_shape)
    assert resized.shape == map_shape
    rows = ((np.arange(map_shape[0]) + 0.5) * mask_shape[0] / map_shape[0]).astype(int)
    cols = ((np.arange(map_shape[1]) + 0.5) * mask_shape[1] / map_shape[1]).astype(int)
    expected = (rows[:, None] < (mask_shape[0] + 1) // 2) & (cols[None, :] < (mask_shape[1] + 1) // 2)
    np.testing.assert_array_equal(resized, expected)


def test_metrics_of_a_mask_at_another_size_score_the_resized_mask():
    truth = np.zeros((6, 10), bool)
    truth[:3, :5] = True  # top-left quarter
    prob = np.zeros((9, 5), np.float32)  # the map of a model that saw another aspect
    prob[:4, :2] = 1.0  # rows 0-3 and columns 0-1: the quarter, resized to 9 x 5 by pixel centres
    assert pixel_metrics([truth], [prob])["pixel_f1"] == 1.0


def test_maps_with_a_trailing_channel_axis_score_like_plain_maps():
    truth = odd_truth()
    prob = np.where(truth, np.float32(0.8), np.float32(0.1))
    plain = pixel_metrics([truth], [prob])
    channel = pixel_metrics([truth[..., None]], [prob[..., None]])
    np.testing.assert_equal(channel, plain)
    assert plain["pixel_f1"] == 1.0


def test_probabilities_of_zero_tie_whatever_their_sign_bit():
    """-0.0 and +0.0 are one probability: every pixel tied, so the per-image AUROC is chance."""
    truth = odd_truth()
    prob = np.where(truth, np.float32(-0.0), np.float32(0.0))
    assert pixel_metrics([truth], [prob])["pixel_auroc"] == 0.5
