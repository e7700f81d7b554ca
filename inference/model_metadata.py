"""What a model file says of itself (threshold, category thresholds, calibration record; an ONNX
model's preprocessing and outputs too), parsed and checked before anything is scored.

A file edited by hand or by another tool must not decide images at a threshold outside 0..1, nor end
in a traceback deep in scoring: each key is checked for its kind and range, and a wrong one is
refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

REQUIRED = ("detector", "preprocess", "threshold", "outputs")
# a calibrated threshold may sit just above 1 (above every genuine score of 1.0: flags nothing)
THRESHOLD_RANGE = (0.0, 1.0 + 1e-6)
MAX_SIZE = 8192  # the largest input side a preprocessing may resize or crop to


def _json(meta: Mapping[str, str], key: str) -> Any:
    try:
        return json.loads(meta[key])
    except json.JSONDecodeError as error:
        raise ValueError(f"metadata {key!r} is not JSON ({error}): {meta[key][:80]!r}") from None


def checked_threshold(value: Any, key: str = "threshold", uncalibrated: bool = False) -> float:
    """`value` as a threshold from 0 to 1 (NaN too with `uncalibrated`: a model never calibrated)."""
    low, high = THRESHOLD_RANGE
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not (low <= value <= high or (uncalibrated and value != value)):
        raise ValueError(f"metadata {key!r} must be a number from 0 to 1, got {value!r}")
    return float(value)


def checked_category_thresholds(value: Any) -> dict[str, float]:
    """{category: threshold}; None reads as none."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"metadata 'category_thresholds' must be a JSON object, got {value!r}")
    return {str(name): checked_threshold(t, f"category_thresholds[{name}]") for name, t in value.items()}


def checked_calibration(value: Any) -> dict[str, Any] | None:
    """The calibration record (an object), or None where there is none."""
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"metadata 'calibration' must be a JSON object, got {value!r}")
    return value or None


def _preprocess(meta: Mapping[str, str], key: str, default: dict[str, Any]) -> dict[str, Any]:
    """A preprocessing object; its `size` a side a model can be fed (a hand-edited 100000 would ask for
    gigabytes per image before any check of the runtime's)."""
    if key not in meta:
        return default
    value = _json(meta, key)
    if not isinstance(value, dict):
        raise ValueError(f"metadata {key!r} must be a JSON object, got {value!r}")
    size = value.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE):
        raise ValueError(f"metadata {key!r}: size must be a whole number of pixels from 1 to {MAX_SIZE}, got {size!r}")
    return value


def read_onnx_metadata(meta: Mapping[str, str]) -> dict[str, Any]:
    """The metadata `export.py` writes, as Python values; a ValueError naming the key at fault.

    Keys: `detector`, `preprocess` and `trained_preprocess` (objects), `threshold`,
    `category_thresholds` ({category: threshold}), `target_fpr`, `calibration` (an object or null),
    `outputs` (names), `min_side`, `input`, and `operations` for pair detectors.
    """
    if missing := [key for key in REQUIRED if key not in meta]:
        raise ValueError(f"not exported by this toolkit's export.py (missing metadata {sorted(missing)})")
    outputs = _json(meta, "outputs")
    if not isinstance(outputs, list) or not outputs or not all(isinstance(name, str) for name in outputs):
        raise ValueError(f"metadata 'outputs' must be a list of output names, got {outputs!r}")
    target_fpr = _json(meta, "target_fpr") if "target_fpr" in meta else None
    if target_fpr is not None and not (isinstance(target_fpr, (int, float)) and 0 < target_fpr < 1):
        raise ValueError(f"metadata 'target_fpr' must be a number between 0 and 1, got {target_fpr!r}")
    min_side = _json(meta, "min_side") if "min_side" in meta else 1
    if isinstance(min_side, bool) or not isinstance(min_side, int) or min_side < 1:
        raise ValueError(f"metadata 'min_side' must be a whole number of pixels, at least 1, got {min_side!r}")
    preprocess = _preprocess(meta, "preprocess", {})
    return {
        "detector": meta["detector"],
        "preprocess": preprocess,
        "trained_preprocess": _preprocess(meta, "trained_preprocess", preprocess),
        "threshold": checked_threshold(_json(meta, "threshold")),
        "category_thresholds": checked_category_thresholds(_json(meta, "category_thresholds"))
        if "category_thresholds" in meta
        else {},
        "target_fpr": None if target_fpr is None else float(target_fpr),
        "calibration": checked_calibration(_json(meta, "calibration")) if "calibration" in meta else None,
        "outputs": outputs,
        "min_side": min_side,
        "input": meta.get("input", "image"),
        "is_pair_detector": "operations" in meta,
    }


# The JSON sidecar beside an exported model (`<model>.json`): its metadata for runtimes whose API
# cannot read ONNX metadata (onnxruntime-node). export.py writes it, calibrate.py rewrites it.
U8_INPUT = "image_u8"  # the input of a `graph_preprocess=true` model: the decoded image itself
# what the sidecar says of the model's metadata; any other key (the export report) is the writer's
SIDECAR_KEYS = (
    "detector",
    "toolkit_version",
    "input",
    "input_layout",
    "preprocess",
    "trained_preprocess",
    "preprocess_in_graph",
    "threshold",
    "outputs",
    "min_side",
    "precision",
    "target_fpr",
    "category_thresholds",
    "categories_on_global_threshold",
    "calibration",
    "operations",
)


def sidecar(meta: Mapping[str, str]) -> dict[str, Any]:
    """The sidecar's `SIDECAR_KEYS` from a model's metadata (what export.py stamps): input name and
    layout, preprocessing, threshold (and per category), outputs, min_side, calibration record."""
    u8 = meta.get("input") == U8_INPUT
    layout = "N x H x W x 3 uint8 RGB, any H and W" if u8 else "N x 3 x H x W float32 RGB in [0, 1]"
    pair = "operations" in meta  # pair graphs: two inputs, and their score columns
    optional = {
        "trained_preprocess": json.loads,
        "precision": str,
        "target_fpr": float,
        "category_thresholds": json.loads,  # each input of a named category is decided at its category's
        # how the threshold was set (its `scoring`: on tiles or not), NaN as null: JSON every parser reads
        "calibration": lambda text: json.loads(text, parse_constant=lambda _: None),
        "operations": json.loads,
    }
    data = {
        "detector": meta.get("detector"),
        "toolkit_version": meta.get("toolkit_version"),
        "input": ["image_a", "image_b"] if pair else U8_INPUT if u8 else "image",
        "input_layout": f"{layout}, each" if pair else layout,
        "preprocess": json.loads(meta.get("preprocess", "{}")),  # what infer.py does before the network
        "preprocess_in_graph": u8,
        "threshold": float(meta["threshold"]),
        "outputs": json.loads(meta.get("outputs", '["score"]')),
        "min_side": int(meta.get("min_side", 1)),  # the smallest image side (px) the model scores
        **{key: parse(meta[key]) for key, parse in optional.items() if key in meta},
    }
    # calibration.by=category in train.py: the categories too few genuine images had for a threshold of
    # their own, decided at the global one (infer.py does); a runtime tells them from names never seen
    calibration = data.get("calibration")
    too_few = calibration.get("too_few_by_category") if isinstance(calibration, dict) else None
    if too_few and isinstance(too_few, dict):
        data["categories_on_global_threshold"] = sorted(too_few)
    return {key: data[key] for key in SIDECAR_KEYS if key in data}


def write_sidecar(path: Path, meta: Mapping[str, str], extra: Mapping[str, Any]) -> Path:
    """`path` (the model's name with `.json`): `sidecar(meta)` and `extra`, strict JSON."""
    path.write_text(json.dumps({**sidecar(meta), **extra}, indent=2, allow_nan=False))
    return path
