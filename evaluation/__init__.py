"""How results are scored: image and pixel metrics, protocols, robustness sweeps, reports."""

from ._checks import UndefinedMetricWarning
from .calibration import calibrate_threshold
from .image import image_metrics, roc_points
from .pixel import PixelMetricAccumulator, pixel_metrics

__all__ = [
    "PixelMetricAccumulator",
    "UndefinedMetricWarning",
    "calibrate_threshold",
    "image_metrics",
    "pixel_metrics",
    "roc_points",
]
