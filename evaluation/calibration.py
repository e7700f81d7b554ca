"""Pick the operating threshold from genuine images only, so a deployment's false-alarm rate is set."""

from __future__ import annotations

import math

import numpy as np

from ._checks import as_scores, warn_undefined


def calibrate_threshold(genuine_scores, target_fpr: float) -> float:
    """A threshold t with ``mean(genuine_scores >= t) <= target_fpr`` that flags as many genuine
    images as the bound allows.

    t sits midway between the highest genuine score that must stay below it and the next distinct
    genuine score, not one ulp above the former: scores computed by another backend (ONNX vs
    PyTorch) differ in the last bits, and an image scored right at t would flip label between
    them. With no higher genuine score, t is the next representable number above the boundary.
    Ties cannot break the bound, and everything is done in the scores' own float precision, so
    casting to float32 later does not bring a tie back. ``target_fpr >= 1`` returns -inf (everything may be
    flagged); no genuine scores returns NaN with a warning.
    """
    if not (0.0 <= float(target_fpr) <= 1.0):
        raise ValueError(f"target_fpr must be in [0, 1], got {target_fpr!r}")
    s = as_scores(genuine_scores, "genuine_scores")
    if not np.isfinite(s).all():
        raise ValueError("genuine_scores must be finite to calibrate a threshold")
    n = s.size
    if n == 0:
        warn_undefined(["threshold"], "no genuine scores to calibrate on")
        return float("nan")
    allowed = min(n, math.floor(target_fpr * n * (1.0 + 1e-12)))
    if allowed >= n:
        return float("-inf")
    s = np.sort(s)
    # Every score above s[n - allowed - 1] may be flagged; that score itself (and its ties) may not.
    boundary = s[n - allowed - 1]
    dtype = s.dtype if s.dtype in (np.float32, np.float64) else np.float64
    boundary = dtype.type(boundary)
    t = np.nextafter(boundary, dtype.type(np.inf))
    above = s[s > boundary]
    if above.size:
        middle = dtype.type((float(boundary) + float(above[0])) / 2)
        t = max(t, middle)  # the midpoint can round onto the boundary when the gap is one ulp
    return float(t)
