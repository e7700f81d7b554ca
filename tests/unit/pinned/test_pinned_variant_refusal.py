"""A reduced-precision variant that really loses accuracy is refused, and one that keeps it is
written: the AUROC drop is fp32's AUROC minus the variant's, positive when the variant is worse."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from exporting.variants import VariantRefused, build_variant, decision_thresholds, quality


def two_weight_model(path, gain: float, cancel: float, category_thresholds: dict | None = None) -> None:
    """score = mean(image x gain + image x cancel): with gain 2049 and cancel -2048 the score is the
    mean pixel in fp32, but fp16 holds 2049 as 2048, so every image then scores 0."""
    gain_tensor = helper.make_tensor("gain", TensorProto.FLOAT, [], [gain])
    cancel_tensor = helper.make_tensor("cancel", TensorProto.FLOAT, [], [cancel])
    axes = helper.make_tensor("axes", TensorProto.INT64, [3], [1, 2, 3])
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["image", "gain"], ["up"]),
            helper.make_node("Mul", ["image", "cancel"], ["down"]),
            helper.make_node("Add", ["up", "down"], ["net"]),
            helper.make_node("ReduceMean", ["net", "axes"], ["score"], keepdims=0),
        ],
        "two_weights",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"])],
        initializer=[gain_tensor, cancel_tensor, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    for key, value in {
        "detector": "two_weights",
        "toolkit_version": "test",
        "threshold": "0.5",
        "preprocess": json.dumps({"size": 16, "mode": "center_crop"}),
        "outputs": json.dumps(["score"]),
        **({"category_thresholds": json.dumps(category_thresholds)} if category_thresholds else {}),
    }.items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def flat_images(genuine_level: int, fake_level: int, count: int = 6) -> tuple[list[np.ndarray], np.ndarray]:
    """Flat grey 19 x 23 images (odd, non-square: centre-cropped to 16), genuine and fake
    alternating, each a grey level or one above it."""
    images = [np.full((19, 23, 3), (fake_level if i % 2 else genuine_level) + i // 4, np.uint8) for i in range(count)]
    return images, np.asarray([i % 2 for i in range(count)])


def test_auroc_drop_is_positive_when_the_variant_ranks_worse():
    labels = np.asarray([0, 0, 1, 1])
    fp32 = np.asarray([0.1, 0.2, 0.8, 0.9])
    report = quality(fp32, np.asarray([0.5, 0.5, 0.5, 0.5]), labels, 0.5)
    assert report["auroc_fp32"] == 1.0 and report["auroc"] == 0.5 and report["auroc_drop"] == 0.5
    better = quality(np.asarray([0.5, 0.5, 0.5, 0.5]), fp32, labels, 0.5)
    assert better["auroc_drop"] == -0.5
    assert report["max_score_deviation"] == pytest.approx(0.4) and report["images"] == 4


def test_an_fp16_variant_that_merges_the_classes_is_refused_and_not_written(tmp_path):
    two_weight_model(tmp_path / "fp32.onnx", 2049.0, -2048.0)
    images, labels = flat_images(77, 87)
    with pytest.raises(VariantRefused, match="loses 0.5000 AUROC"):
        build_variant(
            tmp_path / "fp32.onnx",
            tmp_path / "fp16.onnx",
            precision="fp16",
            images=images,
            labels=labels,
            max_auroc_drop=0.005,
        )
    assert not (tmp_path / "fp16.onnx").exists() and not (tmp_path / "fp16.json").exists()


def test_an_fp16_variant_that_keeps_the_ranking_is_written_with_its_drop(tmp_path):
    two_weight_model(tmp_path / "fp32.onnx", 3.0, -2.0)  # exact in fp16
    images, labels = flat_images(77, 87)
    report = build_variant(
        tmp_path / "fp32.onnx",
        tmp_path / "fp16.onnx",
        precision="fp16",
        images=images,
        labels=labels,
        max_auroc_drop=0.005,
    )
    assert report["quality"]["auroc_drop"] == 0.0 and report["quality"]["auroc"] == 1.0
    assert (tmp_path / "fp16.onnx").is_file()
    assert json.loads((tmp_path / "fp16.json").read_text())["precision"] == "fp16"


def test_a_variant_that_moves_genuine_scores_over_the_threshold_is_refused():
    """The variant keeps the fp32 threshold: a tie of genuine scores just under it that moves over
    it raises the false-alarm rate while AUROC and TPR read off the curve stay the same."""
    from exporting.variants import refuse_more_false_alarms

    labels = np.asarray([0] * 100 + [1] * 10)
    fp32 = np.concatenate([np.full(100, 0.92286), [0.99] * 10])
    variant = np.concatenate([np.full(90, 0.92286), np.full(10, 0.92295), [0.99] * 10])
    measured = quality(fp32, variant, labels, threshold=0.92287)
    assert measured["auroc_drop"] == 0.0 and measured["decisions_changed"] == 10
    assert (measured["genuine_flagged_fp32"], measured["genuine_flagged"], measured["genuine"]) == (0, 10, 100)
    with pytest.raises(VariantRefused, match="flags 10 of 100 genuine images at the threshold, fp32 0"):
        refuse_more_false_alarms(measured, "fp16", max_fpr_rise=0.005)
    refuse_more_false_alarms(measured, "fp16", max_fpr_rise=0.1)  # within a looser bound


def test_fp16_with_preprocessing_in_the_graph_passes_the_onnx_checker(tmp_path):
    """The fp16 converter appends its input casts after the nodes that use them; the variant puts
    the nodes back in dependency order, which onnx.checker demands."""
    two_weight_model(tmp_path / "fp32.onnx", 1.0, 0.0)
    images, labels = flat_images(77, 87)
    build_variant(tmp_path / "fp32.onnx", tmp_path / "u8.onnx", precision="fp16", graph_preprocess=True, images=images)
    build_variant(tmp_path / "fp32.onnx", tmp_path / "half.onnx", precision="fp16", images=images, labels=labels)
    for name in ("u8.onnx", "half.onnx"):
        onnx.checker.check_model(str(tmp_path / name))


def test_a_score_exactly_at_its_threshold_is_flagged_as_infer_py_decides_it():
    """score >= threshold is a flag, in fp32 and in the variant alike: a tie changes no decision."""
    report = quality(np.asarray([0.5, 0.2]), np.asarray([0.5, 0.2]), np.asarray([0, 0]), np.asarray([0.5, 0.5]))
    assert report["genuine_flagged_fp32"] == 1 and report["genuine_flagged"] == 1
    assert report["decisions_changed"] == 0


def test_without_genuine_images_no_false_alarms_are_counted():
    report = quality(np.asarray([0.6, 0.7]), np.asarray([0.6, 0.7]), np.asarray([1, 1]), 0.5)
    assert "genuine" not in report and "genuine_flagged" not in report


def test_each_image_is_decided_at_its_categorys_threshold_where_the_model_has_one():
    meta = {"threshold": "0.5", "category_thresholds": json.dumps({"chart": 0.9})}
    assert decision_thresholds(meta, ["chart", None, "photo"], 3).tolist() == [0.9, 0.5, 0.5]
    assert decision_thresholds(meta, ["chart"], 3).tolist() == [0.5, 0.5, 0.5]  # not the images' categories


def test_the_report_counts_the_images_decided_at_a_category_threshold(tmp_path):
    two_weight_model(tmp_path / "fp32.onnx", gain=1.0, cancel=0.0, category_thresholds={"chart": 0.9})
    images, labels = flat_images(genuine_level=60, fake_level=200)
    categories = ["chart", "photo", "chart", "photo", None, "photo"]
    paths = (tmp_path / "fp32.onnx", tmp_path / "fp16.onnx")
    report = build_variant(*paths, precision="fp16", images=images, labels=labels, categories=categories)
    assert report["quality"]["images_at_category_threshold"] == 2


def test_the_int8_report_says_how_it_was_quantized_and_the_fp16_report_has_no_such_entry(tmp_path):
    two_weight_model(tmp_path / "fp32.onnx", 3.0, -2.0)
    images, labels = flat_images(77, 87)
    options = {"images": images, "labels": labels, "max_auroc_drop": 1.0, "max_fpr_rise": 1.0}
    fp32 = tmp_path / "fp32.onnx"
    int8 = build_variant(fp32, tmp_path / "int8.onnx", precision="int8", int8_mode="dynamic", **options)
    fp16 = build_variant(fp32, tmp_path / "fp16.onnx", precision="fp16", **options)
    assert int8["int8_mode"] == "dynamic" and "int8_mode" not in fp16
