"""How results are scored: image and pixel metrics, protocols, robustness sweeps, reports."""

from ._checks import UndefinedMetricWarning
from .calibration import calibrate_threshold
from .image import image_metrics, roc_points

__all__ = ["UndefinedMetricWarning", "calibrate_threshold", "image_metrics", "roc_points"]
