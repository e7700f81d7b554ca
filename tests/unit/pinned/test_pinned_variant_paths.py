"""Every path of a deployment variant, on a one-convolution ONNX graph (milliseconds per export):
int8 static needs calibration images and is calibrated on them, int8 dynamic needs none, the AUROC
budget is inclusive, preprocessing in the graph is checked against infer.py's with the bound of its
mode, and the sidecar says which input the written model takes."""

from __future__ import annotations

import json
import logging

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from datamodules.preprocess import Preprocess
from datamodules.records import Record
from exporting.variants import (
    VariantRefused,
    build_variant,
    graph_parity,
    network_batches,
    probe_images,
    quality,
    sample_images,
)


def conv_model(path, preprocess: dict, size: int = 16, extra_metadata: dict | None = None) -> None:
    """score = mean(1 x 1 convolution of the image, weights 0.5, 0.3, 0.2): a graph that int8
    quantization really quantizes; `size` fixes the input side (None: any size)."""
    weights = helper.make_tensor("weights", TensorProto.FLOAT, [1, 3, 1, 1], [0.5, 0.3, 0.2])
    axes = helper.make_tensor("axes", TensorProto.INT64, [3], [1, 2, 3])
    side = "H" if size is None else size
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "weights"], ["conv"]),
            helper.make_node("ReduceMean", ["conv", "axes"], ["score"], keepdims=0),
        ],
        "one_conv",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, side, "W" if size is None else size])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"])],
        initializer=[weights, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    metadata = {
        "detector": "one_conv",
        "toolkit_version": "test",
        "threshold": "0.25",
        "preprocess": json.dumps(preprocess),
        "outputs": json.dumps(["score"]),
        **(extra_metadata or {}),
    }
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def graded_images(count: int = 6, shape=(19, 23)) -> tuple[list[np.ndarray], np.ndarray]:
    """Odd, non-square images whose grey level rises with their index; odd indices are fake."""
    rng = np.random.default_rng(3)
    images = [np.clip(40 * i + rng.integers(0, 30, (*shape, 3)), 0, 255).astype(np.uint8) for i in range(count)]
    return images, np.asarray([i % 2 for i in range(count)])


CROP = {"size": 16, "mode": "center_crop"}


def op_types(path) -> set[str]:
    return {node.op_type for node in onnx.load(str(path)).graph.node}


def test_an_unknown_precision_is_refused(tmp_path):
    conv_model(tmp_path / "fp32.onnx", CROP)
    with pytest.raises(VariantRefused, match="precision must be one of"):
        build_variant(tmp_path / "fp32.onnx", tmp_path / "bf16.onnx", precision="bf16")
    assert not (tmp_path / "bf16.onnx").exists()


def test_static_int8_needs_calibration_images_and_dynamic_int8_does_not(tmp_path):
    conv_model(tmp_path / "fp32.onnx", CROP)
    images, labels = graded_images()
    with pytest.raises(VariantRefused, match="needs calibration images"):
        build_variant(tmp_path / "fp32.onnx", tmp_path / "static.onnx", precision="int8", images=images)
    assert not (tmp_path / "static.onnx").exists()
    report = build_variant(
        tmp_path / "fp32.onnx", tmp_path / "dynamic.onnx", precision="int8", int8_mode="dynamic", images=images
    )
    assert report["quality"]["images"] == 6 and "auroc_drop" not in report["quality"]
    assert "DynamicQuantizeLinear" in op_types(tmp_path / "dynamic.onnx")
    assert "QuantizeLinear" not in op_types(tmp_path / "dynamic.onnx")


def test_static_int8_is_calibrated_on_the_calibration_images(tmp_path):
    """The input's quantization scale follows the calibration images' range: dark images give a
    finer scale than bright ones."""
    conv_model(tmp_path / "fp32.onnx", CROP)
    images, labels = graded_images()
    scales = {}
    for name, level in (("dark", 20), ("bright", 250)):
        calibration = [np.full((19, 23, 3), level, np.uint8), np.zeros((21, 17, 3), np.uint8)]
        build_variant(
            tmp_path / "fp32.onnx",
            tmp_path / f"{name}.onnx",
            precision="int8",
            images=images,
            labels=labels,
            calibration=calibration,
            max_auroc_drop=1.0,
        )
        model = onnx.load(str(tmp_path / f"{name}.onnx"))
        assert "QuantizeLinear" in {n.op_type for n in model.graph.node}
        [quantize_input] = [n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "image"]
        [scale] = [t for t in model.graph.initializer if t.name == quantize_input.input[1]]
        scales[name] = float(onnx.numpy_helper.to_array(scale))
    assert scales["dark"] == pytest.approx(20 / 255 / 255, rel=0.05)
    assert scales["bright"] == pytest.approx(250 / 255 / 255, rel=0.05)


def test_a_variant_losing_exactly_the_allowed_auroc_is_written(tmp_path):
    conv_model(tmp_path / "fp32.onnx", CROP)
    images, labels = graded_images()
    report = build_variant(
        tmp_path / "fp32.onnx",
        tmp_path / "fp16.onnx",
        precision="fp16",
        images=images,
        labels=labels,
        max_auroc_drop=0.0,
    )
    assert report["quality"]["auroc_drop"] == 0.0 and (tmp_path / "fp16.onnx").is_file()


def test_without_labels_the_auroc_is_not_checked_and_the_user_is_told(tmp_path, caplog):
    conv_model(tmp_path / "fp32.onnx", CROP)
    images, labels = graded_images()
    with caplog.at_level(logging.WARNING, logger="exporting.variants"):
        build_variant(tmp_path / "fp32.onnx", tmp_path / "a.onnx", precision="fp16", images=images, labels=labels)
    assert "AUROC was not checked" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="exporting.variants"):
        build_variant(tmp_path / "fp32.onnx", tmp_path / "b.onnx", precision="fp16", images=images)
    assert "no labelled images" in caplog.text and "fp16 variant's AUROC was not checked" in caplog.text


def test_quality_of_one_class_or_no_labels_has_no_auroc_and_averages_the_deviation():
    fp32, variant = np.asarray([0.1, 0.2, 0.8, 0.9]), np.asarray([0.1, 0.3, 0.8, 0.6])
    for labels in (None, np.asarray([1, 1, 1, 1])):
        report = quality(fp32, variant, labels, 0.5)
        assert "auroc" not in report and report["images"] == 4
        assert report["max_score_deviation"] == pytest.approx(0.3)
        assert report["mean_score_deviation"] == pytest.approx(0.1)


def test_the_graph_variant_takes_8_bit_images_and_matches_infer_within_its_bound(tmp_path):
    """Centre-crop preprocessing is exact in the graph: a tolerance of zero accepts it."""
    conv_model(tmp_path / "fp32.onnx", CROP, extra_metadata={"onnx.infer": "stale"})
    images, _ = graded_images()
    report = build_variant(
        tmp_path / "fp32.onnx", tmp_path / "u8.onnx", graph_preprocess=True, images=images, graph_tolerance=0.0
    )
    assert report["graph_parity"] == {"images": 6, "max_score_difference": 0.0, "bound": 0.0}
    sidecar = json.loads((tmp_path / "u8.json").read_text())
    assert sidecar["input"] == "image_u8" and sidecar["preprocess_in_graph"] is True
    assert sidecar["threshold"] == 0.25 and sidecar["precision"] == "fp32" and sidecar["detector"] == "one_conv"
    metadata = {p.key: p.value for p in onnx.load(str(tmp_path / "u8.onnx")).metadata_props}
    assert metadata["precision"] == "fp32" and metadata["detector"] == "one_conv" and "onnx.infer" not in metadata
    plain = build_variant(tmp_path / "fp32.onnx", tmp_path / "plain.onnx", images=images)
    sidecar = json.loads((tmp_path / "plain.json").read_text())
    assert "graph_parity" not in plain and sidecar["input"] == "image" and sidecar["preprocess_in_graph"] is False


@pytest.mark.parametrize(
    "preprocess, bound",
    [
        ({"size": 16, "mode": "resize", "interpolation": "bilinear"}, 0.02),
        ({"size": 16, "mode": "resize", "interpolation": "nearest"}, 1e-4),
        ({"size": 16, "mode": "pad", "interpolation": "bilinear"}, 1e-4),
    ],
)
def test_the_graph_bound_is_the_resize_tolerance_only_for_resampling_modes(tmp_path, preprocess, bound):
    conv_model(tmp_path / "fp32.onnx", preprocess)
    images, _ = graded_images(4, shape=(13, 15))
    report = build_variant(tmp_path / "fp32.onnx", tmp_path / "u8.onnx", graph_preprocess=True, images=images)
    assert report["graph_parity"]["bound"] == bound


def test_a_graph_variant_beyond_its_bound_is_refused_and_not_written(tmp_path):
    """Bilinear resizing of noise in the graph differs a little from OpenCV's fixed point."""
    conv_model(tmp_path / "fp32.onnx", {"size": 16, "mode": "resize", "interpolation": "bilinear"})
    images = probe_images(Preprocess.from_config({"size": 16}))
    with pytest.raises(VariantRefused, match="preprocessing in the graph changes scores"):
        build_variant(
            tmp_path / "fp32.onnx",
            tmp_path / "u8.onnx",
            graph_preprocess=True,
            images=images,
            graph_resize_tolerance=1e-9,
        )
    assert not (tmp_path / "u8.onnx").exists() and not (tmp_path / "u8.json").exists()


def test_graph_parity_reports_the_largest_difference_over_the_images(tmp_path):
    preprocess = Preprocess.from_config({"size": 16, "mode": "resize", "interpolation": "bilinear"})
    conv_model(tmp_path / "fp32.onnx", {"size": 16, "mode": "resize", "interpolation": "bilinear"})
    from exporting.graph_preprocess import with_graph_preprocess

    fp32 = onnx.load(str(tmp_path / "fp32.onnx"))
    merged = with_graph_preprocess(fp32, preprocess)
    images = probe_images(preprocess, count=5)
    each = [graph_parity(fp32, merged, [image], preprocess)["max_score_difference"] for image in images]
    assert len(set(each)) > 1  # the images differ, so the largest is a choice
    assert graph_parity(fp32, merged, images, preprocess) == {"images": 5, "max_score_difference": max(each)}


def test_probe_images_are_photographs_and_noise_of_assorted_sizes_around_the_input_size():
    """Heights and widths each fall below and above the input size, so the variant is measured
    up-sampling and down-sampling along both axes; half are photographs, whose scores are not
    saturated, half random pixels."""
    from exporting.variants import bundled_photographs

    images = probe_images(Preprocess.from_config({"size": 60}), count=8)
    assert len(images) == 8 and all(image.shape[2] == 3 and image.dtype == np.uint8 for image in images)
    for axis in (0, 1):
        sides = [image.shape[axis] for image in images]
        assert all(40 <= side < 120 for side in sides) and min(sides) < 60 < max(sides), sides
        assert len(set(sides)) > 4
    for image, photo in zip(images[:4], bundled_photographs()):
        assert abs(float(image.mean()) - float(photo.mean())) < 2  # the photograph, resized
    assert all(abs(float(image.mean()) - 127.5) < 5 and image.std() > 70 for image in images[4:])


def test_network_batches_keep_every_image_in_order(tmp_path):
    images = [np.full((20 + i, 17, 3), 10 * i, np.uint8) for i in range(5)]
    fixed = network_batches(images, Preprocess.from_config(CROP), batch_size=2)
    assert [b.shape for b in fixed] == [(2, 3, 16, 16), (2, 3, 16, 16), (1, 3, 16, 16)]
    assert [float(v) for b in fixed for v in b[:, 0, 0, 0]] == pytest.approx([10 * i / 255 for i in range(5)])
    free = network_batches(images, Preprocess.from_config({"size": None, "mode": "none"}), batch_size=2)
    assert [b.shape for b in free] == [(1, 3, 20 + i, 17) for i in range(5)]


def test_sample_images_skips_unreadable_files_and_keeps_labels_only_when_all_are_known(tmp_path, caplog):
    for i in range(4):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.full((9 + i, 7, 3), i, np.uint8))
    (tmp_path / "broken.png").write_bytes(b"not an image")
    records = [Record(str(tmp_path / f"{i}.png"), label=i % 2) for i in range(4)]
    records.insert(2, Record(str(tmp_path / "broken.png"), label=1))
    with caplog.at_level(logging.WARNING, logger="exporting.variants"):
        images, labels, _ = sample_images(records, limit=10)
    assert [image.shape[0] for image in images] == [9, 10, 11, 12]  # input order, broken one skipped
    assert labels.tolist() == [0, 1, 0, 1] and "broken.png" in caplog.text
    images, labels, _ = sample_images([*records[:2], Record(str(tmp_path / "3.png"))], limit=10)
    assert len(images) == 3 and labels is None
    readable = [r for r in records if "broken" not in r.path]
    sample = [image.shape[0] for image in sample_images(readable, limit=2, seed=1)[0]]
    assert len(sample) == 2 and sample == sorted(sample)  # a seeded sample, still in input order
    assert sample == [image.shape[0] for image in sample_images(readable, limit=2, seed=1)[0]]
