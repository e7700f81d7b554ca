"""Deployment variants of an exported detector: fp16 (GPUs), int8 (CPUs), preprocessing in the graph.

Each variant is measured against the fp32 export on real images before it is written: the largest
score deviation, and, given a labelled set, the AUROC and TPR at 1 % FPR of both; a variant that
loses more than `max_auroc_drop` AUROC is refused. A JSON sidecar beside the model carries the
metadata for runtimes whose API cannot read ONNX metadata (onnxruntime-node, for one).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import onnx

from datamodules.geometry import eval_geometry
from datamodules.io import ImageReadError, read_image
from datamodules.preprocess import Preprocess
from datamodules.records import Record
from exporting.graph_preprocess import with_graph_preprocess
from inference.model_metadata import U8_INPUT, checked_category_thresholds
from inference.model_metadata import write_sidecar as write_model_sidecar
from inference.runtime import scoring_preprocess

log = logging.getLogger(__name__)
PRECISIONS = ("fp32", "fp16", "int8")
INT8_MODES = ("static", "dynamic")  # calibrated activation ranges, or ranges measured per input at run time
EXACT_MODES = ("center_crop", "pad", "tile", "none")


class VariantRefused(Exception):
    """A variant that does not keep the fp32 model's quality within the configured bound."""


def _session(model: onnx.ModelProto | str | os.PathLike):
    import onnxruntime as ort

    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def sample_images(
    records: Sequence[Record], limit: int, seed: int = 0
) -> tuple[list[np.ndarray], np.ndarray | None, list[str | None]]:
    """Up to `limit` decoded images from `records` (a seeded sample; unreadable files skipped), their
    labels when every one is labelled, and their categories (None where a row names none): a model
    calibrated by category decides each image at its category's threshold."""
    order = np.random.default_rng(seed).permutation(len(records))[:limit]
    images, labels, categories = [], [], []
    for i in sorted(order):
        try:
            images.append(read_image(records[i].path))
            labels.append(records[i].label)
            categories.append(records[i].category)
        except ImageReadError as error:
            log.warning("skipping %s: %s", records[i].path, error.reason)
    known = bool(labels) and all(label is not None for label in labels)
    return images, (np.asarray(labels) if known else None), categories


def bundled_photographs() -> list[np.ndarray]:
    """Four of scikit-image's sample photographs (RGB uint8), shipped with it. A detector's scores
    on real images are not saturated, so two graphs that differ show it there; on random pixels
    many detectors score every probe near 0 or 1, where any two graphs agree."""
    import skimage.data

    return [skimage.data.astronaut(), skimage.data.coffee(), skimage.data.chelsea(), skimage.data.rocket()]


def probe_images(preprocess: Preprocess, count: int = 8, seed: int = 0) -> list[np.ndarray]:
    """Images of assorted sizes around the input size, used when no images are given: the bundled
    photographs resized, and random pixels (the hardest case for resampling)."""
    import cv2

    rng = np.random.default_rng(seed)
    side = int(preprocess.size or 64)
    shapes = [
        (side + int(rng.integers(-side // 3, side)), side + int(rng.integers(-side // 3, side))) for _ in range(count)
    ]
    photos = [
        cv2.resize(photo, (width, height), interpolation=cv2.INTER_AREA)
        for photo, (height, width) in zip(bundled_photographs(), shapes[: count // 2])
    ]
    return photos + [rng.integers(0, 256, (*shape, 3), dtype=np.uint8) for shape in shapes[len(photos) :]]


def network_batches(images: Sequence[np.ndarray], preprocess: Preprocess, batch_size: int = 16) -> list[np.ndarray]:
    """Images preprocessed as `infer.py` does, stacked into network batches."""
    from datamodules.geometry import to_network_input

    geometry = eval_geometry(preprocess)
    step = batch_size if preprocess.fixed_size else 1
    return [to_network_input([geometry(image) for image in images[i : i + step]]) for i in range(0, len(images), step)]


def scores_of(model: Any, batches: Sequence[np.ndarray]) -> np.ndarray:
    session = _session(model)
    return np.concatenate([session.run(["score"], {"image": b})[0] for b in batches]).astype(np.float64)


@contextlib.contextmanager
def quiet_root_logger() -> Iterator[None]:
    """onnxruntime's quantizer logs a line per tensor on the root logger at INFO: kept to warnings."""
    root = logging.getLogger()
    before = root.level
    root.setLevel(max(before, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(before)


def quantized(fp32: Path, precision: str, calibration: Sequence[np.ndarray] | None, int8_mode: str) -> onnx.ModelProto:
    """The fp16 (weights and activations, fp32 inputs/outputs) or int8 (onnxruntime quantization,
    static QDQ per-channel with `calibration` batches, or dynamic) version of `fp32`."""
    import tempfile

    model = onnx.load(str(fp32))
    del model.graph.value_info[:]  # stale intermediate shapes from the exporter trip onnx shape inference
    if precision == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16
        from onnxruntime.transformers.onnx_model import OnnxModel

        half = convert_float_to_float16(model, keep_io_types=True)
        OnnxModel.graph_topological_sort(half.graph)  # the converter appends its input casts after their users
        return half
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    with tempfile.TemporaryDirectory() as folder, quiet_root_logger():
        source, target = Path(folder) / "fp32.onnx", Path(folder) / "int8.onnx"
        onnx.save(model, str(source))
        if int8_mode == "dynamic":
            quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
        else:

            class Reader(CalibrationDataReader):
                def __init__(self) -> None:
                    self.batches = iter(calibration or [])

                def get_next(self) -> dict | None:
                    batch = next(self.batches, None)
                    return None if batch is None else {"image": batch}

            quantize_static(
                str(source),
                str(target),
                Reader(),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                weight_type=QuantType.QInt8,
                activation_type=QuantType.QUInt8,
            )
        return onnx.load(str(target))


def decision_thresholds(meta: dict[str, str], categories: Sequence[str | None] | None, count: int) -> np.ndarray:
    """Each of `count` images' threshold as infer.py decides it: its category's where the model
    (`calibration.by=category`) has one for it, else the global threshold (`meta`: ONNX metadata)."""
    by_category = checked_category_thresholds(json.loads(meta.get("category_thresholds") or "null"))
    named = categories if categories is not None and len(categories) == count else [None] * count
    return np.asarray([by_category.get(c or "", float(meta["threshold"])) for c in named], dtype=np.float64)


def quality(
    fp32_scores: np.ndarray, scores: np.ndarray, labels: np.ndarray | None, threshold: float | np.ndarray
) -> dict[str, Any]:
    """Score deviation from fp32, decisions at `threshold` (one, or each image's own) that change
    and, with labels, the genuine images flagged at it, and AUROC and TPR at 1 % FPR, of both."""
    from evaluation import image_metrics

    threshold = np.broadcast_to(np.asarray(threshold, dtype=np.float64), np.shape(scores))
    result: dict[str, Any] = {
        "images": int(scores.size),
        "max_score_deviation": float(np.max(np.abs(scores - fp32_scores))),
        "mean_score_deviation": float(np.mean(np.abs(scores - fp32_scores))),
        "decisions_changed": int(np.sum((scores >= threshold) != (fp32_scores >= threshold))),
    }
    if labels is not None and (labels == 0).any():
        genuine = labels == 0
        result["genuine_flagged_fp32"] = int(np.sum(fp32_scores[genuine] >= threshold[genuine]))
        result["genuine_flagged"] = int(np.sum(scores[genuine] >= threshold[genuine]))
        result["genuine"] = int(genuine.sum())
    if labels is not None and len(set(labels.tolist())) == 2:
        before, after = image_metrics(labels, fp32_scores), image_metrics(labels, scores)
        result.update(
            {
                "auroc_fp32": before["auroc"],
                "auroc": after["auroc"],
                "auroc_drop": before["auroc"] - after["auroc"],
                "tpr@fpr=0.01_fp32": before["tpr@fpr=0.01"],
                "tpr@fpr=0.01": after["tpr@fpr=0.01"],
            }
        )
    return result


def refuse_more_false_alarms(measured: dict[str, Any], precision: str, max_fpr_rise: float) -> None:
    """The variant decides at the fp32 model's thresholds (each image's category's, for a model
    calibrated by category): refuse it when they flag a larger share of the genuine images than fp32
    did, by more than `max_fpr_rise` (a score at a tie just under a threshold moves over it)."""
    where = "their categories' thresholds" if measured.get("images_at_category_threshold") else "the threshold"
    if "genuine" not in measured:
        if measured["decisions_changed"]:
            log.warning(
                "the %s variant decides %d of %d images otherwise at %s (no labels to say which: eval_input=...)",
                precision,
                measured["decisions_changed"],
                measured["images"],
                where,
            )
        return
    rise = (measured["genuine_flagged"] - measured["genuine_flagged_fp32"]) / measured["genuine"]
    if rise > max_fpr_rise:
        raise VariantRefused(
            f"precision={precision} flags {measured['genuine_flagged']} of {measured['genuine']} genuine images at "
            f"{where}, fp32 {measured['genuine_flagged_fp32']} (allowed rise: max_fpr_rise={max_fpr_rise:g}); "
            "the file was not written"
        )


def graph_parity(
    fp32: onnx.ModelProto, merged: onnx.ModelProto, images: Sequence[np.ndarray], preprocess: Preprocess
) -> dict[str, Any]:
    """Max |score| difference between the `image_u8` graph on decoded images and the `image` graph
    on the same images preprocessed as `infer.py` does (one image at a time: any sizes)."""
    plain, u8 = _session(fp32), _session(merged)
    differences = []
    for image, network in zip(images, network_batches(images, preprocess, batch_size=1)):
        expected = plain.run(["score"], {"image": network})[0]
        actual = u8.run(["score"], {U8_INPUT: image[None]})[0]
        differences.append(float(np.abs(actual - expected).max()))
    return {"images": len(differences), "max_score_difference": max(differences, default=float("nan"))}


def _stamp(model: onnx.ModelProto, **values: str) -> None:
    metadata = {p.key: p.value for p in model.metadata_props if p.key != "onnx.infer"}
    metadata.update(values)
    del model.metadata_props[:]
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=value)


def build_variant(
    fp32_path: Path,
    output: Path,
    precision: str = "fp32",
    graph_preprocess: bool = False,
    images: Sequence[np.ndarray] = (),
    labels: np.ndarray | None = None,
    categories: Sequence[str | None] | None = None,
    calibration: Sequence[np.ndarray] = (),
    int8_mode: str = "static",
    max_auroc_drop: float = 0.005,
    max_fpr_rise: float = 0.005,
    graph_tolerance: float = 1e-4,
    graph_resize_tolerance: float = 0.02,
    pytorch_parity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Turn the fp32 export at `fp32_path` into the requested variant at `output` (+ its JSON
    sidecar), measured on `images` (random probes when none), each decided at its threshold as infer.py
    decides it (`categories`: the images' categories, for a model calibrated by category); raises
    `VariantRefused` beyond the bounds.
    `pytorch_parity`: how far the fp32 export is from PyTorch, kept in the sidecar's report.

    Kept in one piece: quantize, compare and refuse are one decision about one file.
    """
    check_variant_options(precision, int8_mode)
    fp32 = onnx.load(str(fp32_path))
    meta = {p.key: p.value for p in fp32.metadata_props}
    # what infer.py feeds the network (localizers: the whole image)
    preprocess = scoring_preprocess(
        Preprocess.from_config(json.loads(meta["preprocess"])), "mask" in json.loads(meta["outputs"])
    )
    images = list(images) or probe_images(preprocess)
    report: dict[str, Any] = {"precision": precision, **({"pytorch_parity": pytorch_parity} if pytorch_parity else {})}
    model = fp32
    if precision != "fp32":
        if precision == "int8" and int8_mode == "static" and not calibration:
            raise VariantRefused(
                "precision=int8 with int8_mode=static needs calibration images "
                "(calibration_input=FOLDER|MANIFEST), or use int8_mode=dynamic"
            )
        calibration_batches = network_batches(list(calibration), preprocess, 8) if precision == "int8" else None
        model = quantized(fp32_path, precision, calibration_batches, int8_mode)
        batches = network_batches(images, preprocess)
        thresholds = decision_thresholds(meta, categories, len(images))
        report["quality"] = quality(scores_of(fp32, batches), scores_of(model, batches), labels, thresholds)
        if own := int(np.sum(thresholds != float(meta["threshold"]))):
            report["quality"]["images_at_category_threshold"] = own
        drop = report["quality"].get("auroc_drop")
        if drop is not None and drop > max_auroc_drop:
            raise VariantRefused(
                f"precision={precision} loses {drop:.4f} AUROC on {len(images)} labelled images "
                f"(allowed: max_auroc_drop={max_auroc_drop:g}); the file was not written"
            )
        if drop is None:
            log.warning("no labelled images (eval_input=...): the %s variant's AUROC was not checked", precision)
        refuse_more_false_alarms(report["quality"], precision, max_fpr_rise)
    if graph_preprocess:
        float_model, model = model, with_graph_preprocess(model, preprocess)
        exact = preprocess.mode in EXACT_MODES or preprocess.interpolation == "nearest"
        bound = graph_tolerance if exact else graph_resize_tolerance
        report["graph_parity"] = {**graph_parity(float_model, model, images, preprocess), "bound": bound}
        if not report["graph_parity"]["max_score_difference"] <= bound:
            raise VariantRefused(
                f"preprocessing in the graph changes scores by up to "
                f"{report['graph_parity']['max_score_difference']:.3g} (> {bound:g}) against "
                f"infer.py; the file was not written"
            )
    if precision == "int8":
        report["int8_mode"] = int8_mode
    _stamp(model, precision=precision)
    report["sidecar"] = str(output.with_suffix(".json"))
    write_model_and_sidecar(output, model, {"precision": precision, "export_report": report})
    return report


def check_variant_options(precision: str, int8_mode: str) -> None:
    """The variant's options, refused before any export work (a mistyped int8_mode quantized statically)."""
    if precision not in PRECISIONS:
        raise VariantRefused(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if int8_mode not in INT8_MODES:
        raise VariantRefused(f"int8_mode must be one of {INT8_MODES}, got {int8_mode!r}")


def write_model_and_sidecar(output: Path, model: onnx.ModelProto, extra: dict[str, Any]) -> None:
    """The model and its sidecar, each written whole and moved in place together: a failure leaves
    neither a partial file nor a sidecar describing another model."""
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = (output.with_name(f".{output.stem}.partial.onnx"), output.with_name(f".{output.stem}.partial.json"))
    try:
        onnx.save(model, str(partial[0]))
        write_sidecar(partial[0], model, extra)
        os.replace(partial[0], output)
        os.replace(partial[1], output.with_suffix(".json"))
    except (OSError, ValueError) as error:  # ValueError: a threshold JSON cannot hold (nan)
        for path in partial:
            path.unlink(missing_ok=True)
        raise VariantRefused(f"cannot write {output}: {getattr(error, 'strerror', None) or error}") from None


def write_sidecar(model_path: Path, model: onnx.ModelProto, extra: dict[str, Any]) -> Path:
    """`<model>.json` (`inference.model_metadata.sidecar`) for `model`'s metadata, with `extra`."""
    return write_model_sidecar(model_path.with_suffix(".json"), {p.key: p.value for p in model.metadata_props}, extra)
