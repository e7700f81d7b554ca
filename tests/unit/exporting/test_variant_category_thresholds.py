"""A model calibrated by category (`calibration.by=category`) decides each image at its category's
threshold, so the fp16 / int8 checks count flagged genuine images and changed decisions there too,
not at the global threshold alone."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from datamodules.records import Record
from exporting.variants import VariantRefused, build_variant, sample_images
from tests.unit.pinned.test_pinned_variant_refusal import flat_images, two_weight_model


def per_category_model(path) -> None:
    """score = 3 x mean pixel in fp32 and 4 x in fp16 (-2049 is held as -2048 there); threshold 0.5,
    phones 0.28: genuine images at grey level 20 score 0.235 in fp32 and 0.314 in fp16."""
    two_weight_model(path, -2049.0, 2052.0)
    model = onnx.load(str(path))
    model.metadata_props.add(key="category_thresholds", value=json.dumps({"phones": 0.28}))
    onnx.save(model, str(path))


def fp16(folder, **measured_on) -> dict:
    return build_variant(folder / "fp32.onnx", folder / "half.onnx", precision="fp16", **measured_on)


def test_fp16_flagging_more_genuine_images_at_their_category_threshold_is_refused(tmp_path):
    per_category_model(tmp_path / "fp32.onnx")
    images, labels = flat_images(20, 60)
    with pytest.raises(VariantRefused, match="flags 3 of 3 genuine images at their categories' thresholds, fp32 0"):
        fp16(tmp_path, images=images, labels=labels, categories=["phones"] * 6)
    assert not (tmp_path / "half.onnx").exists()


def test_images_of_a_category_without_its_own_threshold_are_checked_at_the_global_one(tmp_path):
    per_category_model(tmp_path / "fp32.onnx")
    images, labels = flat_images(20, 60)
    report = fp16(tmp_path, images=images, labels=labels, categories=["scans"] * 6)
    measured = report["quality"]
    assert (measured["genuine_flagged_fp32"], measured["genuine_flagged"], measured["decisions_changed"]) == (0, 0, 0)
    assert "images_at_category_threshold" not in measured and (tmp_path / "half.onnx").is_file()


def test_without_labels_the_decisions_changed_count_is_made_at_each_image_s_threshold(tmp_path):
    per_category_model(tmp_path / "fp32.onnx")
    images, _ = flat_images(20, 60)
    categories = ["phones", "phones", None, None, "phones", "phones"]
    report = fp16(tmp_path, images=images, categories=categories)
    # genuine phones (0, 4) cross 0.28; the fakes score over both thresholds in both precisions
    assert report["quality"]["decisions_changed"] == 2
    assert report["quality"]["images_at_category_threshold"] == 4


def test_sampled_evaluation_images_keep_their_categories(tmp_path):
    import cv2

    for i in range(3):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.full((9, 7, 3), i, np.uint8))
    records = [Record(str(tmp_path / f"{i}.png"), label=0, category=["phones", None, "scans"][i]) for i in range(3)]
    images, labels, categories = sample_images(records, limit=10)
    assert len(images) == 3 and labels.tolist() == [0, 0, 0] and categories == ["phones", None, "scans"]


def test_export_checks_a_variant_of_a_per_category_model_at_the_categories_of_eval_input(tiny_model, tmp_path):
    import csv

    import torch

    from export import export
    from tests.helpers import compose_config, write_images

    checkpoint = torch.load(tiny_model["ckpt"], map_location="cpu", weights_only=True)
    checkpoint["category_thresholds"] = {"phones": 0.3}
    torch.save(checkpoint, tmp_path / "by_category.ckpt")
    paths = write_images(tmp_path / "labelled", [(36 + i, 40) for i in range(6)])
    with (tmp_path / "labelled" / "manifest.csv").open("w", newline="") as handle:
        rows = [[p.name, i % 2, "phones" if i < 4 else "scans"] for i, p in enumerate(paths)]
        csv.writer(handle).writerows([["path", "label", "category"], *rows])
    settings = [f"model={tmp_path / 'by_category.ckpt'}", f"output={tmp_path / 'half.onnx'}", "precision=fp16"]
    eval_input = [f"eval_input={tmp_path / 'labelled' / 'manifest.csv'}", "max_auroc_drop=1.0", "max_fpr_rise=1.0"]
    report = export(compose_config("export", [*settings, *eval_input]))
    assert report["quality"]["images"] == 6 and report["quality"]["images_at_category_threshold"] == 4
