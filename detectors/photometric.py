"""The photometric fit on the warped overlap of two panels: how B's colours relate to A's (per-channel
gain and bias, hue shift, saturation ratio), which says whether a duplicated panel's parameters
(brightness, contrast, colour) were modified."""

from __future__ import annotations

import cv2
import numpy as np

from detectors.matching import Panel, least_squares_line, warp_into_a


def photometric_fit(
    panel_a: Panel, panel_b: Panel, matrix: np.ndarray, mask_a: np.ndarray, max_pixels: int = 20000
) -> dict[str, float]:
    """How B's colours relate to A's on the shared content: per-channel gain and bias of B against
    A, hue shift (OpenCV units, of 180), saturation ratio, and mean absolute difference (0-255)
    before and after the per-channel fit, and `brightness`, the signed change of B's mean level
    against A's (0.12: B is 12 % brighter), for people to read. Images are blurred first, so resampling and a pixel of
    misalignment do not read as a change of parameters."""
    none = {
        "gain_dev": 0.0,
        "bias": 0.0,
        "hue_shift": 0.0,
        "saturation_log_ratio": 0.0,
        "abs_diff": 0.0,
        "residual": 0.0,
        "brightness": 0.0,
    }
    if not mask_a.any():
        return none
    where = np.flatnonzero(cv2.erode(mask_a.astype(np.uint8), np.ones((5, 5), np.uint8)).ravel())
    if where.size < 50:
        return none
    step = max(1, where.size // max_pixels)
    where = where[::step]
    a = cv2.GaussianBlur(panel_a.rgb, (0, 0), 1.5)
    b = cv2.GaussianBlur(warp_into_a(panel_b.rgb, matrix, panel_a.shape), (0, 0), 1.5)
    a_px = a.reshape(-1, 3)[where].astype(np.float64)
    b_px = b.reshape(-1, 3)[where].astype(np.float64)
    gains, biases, residual = [], [], []
    for channel in range(3):
        x, y = a_px[:, channel], b_px[:, channel]
        gain, bias = least_squares_line(x, y)
        gains.append(gain)
        biases.append(bias + (gain - 1.0) * float(np.mean(x)))  # the offset at A's mean level
        residual.append(np.mean(np.abs(y - (gain * x + bias))))
    hsv_a = cv2.cvtColor(a, cv2.COLOR_RGB2HSV).reshape(-1, 3)[where].astype(np.float64)
    hsv_b = cv2.cvtColor(b, cv2.COLOR_RGB2HSV).reshape(-1, 3)[where].astype(np.float64)
    coloured = (hsv_a[:, 1] > 40) & (hsv_a[:, 2] > 40) & (hsv_b[:, 1] > 40)
    hue_shift, saturation = 0.0, 0.0
    if coloured.sum() > 50:
        angle = (hsv_b[coloured, 0] - hsv_a[coloured, 0]) * (np.pi / 90.0)
        hue_shift = float(np.degrees(np.arctan2(np.sin(angle).mean(), np.cos(angle).mean())) / 2.0)
        saturation = float(np.log((hsv_b[coloured, 1].mean() + 1) / (hsv_a[coloured, 1].mean() + 1)))
    return {
        "gain_dev": float(np.max(np.abs(np.asarray(gains) - 1.0))),
        "bias": float(np.max(np.abs(biases))),
        "hue_shift": abs(hue_shift),
        "saturation_log_ratio": abs(saturation),
        "abs_diff": float(np.mean(np.abs(a_px - b_px))),
        "residual": float(np.mean(residual)),
        "brightness": float(b_px.mean() / max(a_px.mean(), 1.0) - 1.0),
    }
