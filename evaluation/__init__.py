"""How results are scored: image and pixel metrics, protocols, robustness sweeps, reports.

Imports neither ``detectors`` nor ``datamodules``: detectors reach it as scores, or as a function that
scores the inputs under a perturbation (the robustness curves).
"""

from ._checks import UndefinedMetricWarning
from .bootstrap import bootstrap_image_ci, bootstrap_pixel_ci
from .calibration import calibrate_threshold, calibration_check, calibration_markdown, clopper_pearson, genuine_needed
from .image import ImageScoreAccumulator, image_metrics, roc_points
from .pixel import PixelMetricAccumulator, pixel_metrics
from .records import by_category, by_group
from .summary import evaluate_records, report_records

# Reports (matplotlib) and the robustness curves (OpenCV) load on first use, so a training
# loop that only needs metrics does not pay for their imports.
_LAZY = {"write_report": "report", "write_metrics_json": "report", "robustness_curves": "robustness"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ImageScoreAccumulator",
    "PixelMetricAccumulator",
    "UndefinedMetricWarning",
    "bootstrap_image_ci",
    "bootstrap_pixel_ci",
    "by_category",
    "by_group",
    "calibrate_threshold",
    "calibration_check",
    "calibration_markdown",
    "clopper_pearson",
    "genuine_needed",
    "image_metrics",
    "pixel_metrics",
    "robustness_curves",
    "roc_points",
    "write_metrics_json",
    "write_report",
    "evaluate_records",
    "report_records",
]
