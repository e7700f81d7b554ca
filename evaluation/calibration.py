"""Pick the operating threshold from genuine images only, so a deployment's false-alarm rate is set."""

from __future__ import annotations

import math

import numpy as np

from ._checks import as_scores, warn_undefined


def calibrate_threshold(genuine_scores, target_fpr: float) -> float:
    """Smallest threshold t with ``mean(genuine_scores >= t) <= target_fpr``.

    Ties cannot break the bound: when the allowed count lands inside a run of equal scores, t is the
    next representable number above that score (in the scores' own float precision, so casting to
    float32 later does not bring the tie back). ``target_fpr >= 1`` returns -inf (everything may be
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
    t = np.nextafter(dtype.type(boundary), dtype.type(np.inf))
    return float(t)
