"""Input validation and the NaN-with-warning convention shared by every metric module."""

from __future__ import annotations

import warnings
from typing import Iterable

import numpy as np


class UndefinedMetricWarning(UserWarning):
    """A metric is undefined for this input (e.g. one class only) and was reported as NaN."""


def to_numpy(x) -> np.ndarray:
    """A numpy array of `x`; a torch tensor (checked without importing torch) comes off its device,
    and one of a float dtype numpy lacks (bfloat16, as bf16-mixed precision gives) as float32."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        try:
            x = x.numpy()
        except TypeError:  # "Got unsupported ScalarType BFloat16"
            x = x.float().numpy()
    return np.asarray(x)


def warn_undefined(names: Iterable[str], reason: str) -> None:
    names = list(names)
    if names:
        warnings.warn(f"{', '.join(names)} undefined ({reason}); reported as NaN", UndefinedMetricWarning, stacklevel=3)


def as_scores(scores, name: str = "scores") -> np.ndarray:
    """1-D float array; NaN is an error because it has no place in a ranking."""
    arr = to_numpy(scores)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    arr = arr.reshape(-1)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    nan = np.isnan(arr)
    if nan.any():
        first = int(np.flatnonzero(nan)[0])
        raise ValueError(
            f"{name} contain {int(nan.sum())} NaN value(s) (first at index {first}); "
            "a detector produced no score there - drop or fix those rows before scoring"
        )
    return arr


def as_labels(labels, name: str = "labels") -> np.ndarray:
    """1-D bool array from 0/1 (or bool) labels; anything else is an error, not a silent cast."""
    arr = to_numpy(labels).reshape(-1)
    if arr.dtype == bool:
        return arr
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"{name} must be 0/1 numbers or booleans, got dtype {arr.dtype}")
    bad = (arr != 0) & (arr != 1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be 0 (genuine) or 1 (fake); found {arr[first]!r} at index {first}")
    return arr == 1


def as_labels_scores(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    y = as_labels(labels)
    s = as_scores(scores)
    if y.shape != s.shape:
        raise ValueError(f"labels and scores differ in length: {y.size} vs {s.size}")
    return y, s


def safe_div(num: float, den: float) -> float:
    return float(num) / float(den) if den else float("nan")
