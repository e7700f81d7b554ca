"""The sidecar carries how the threshold was set, for runtimes that read no ONNX metadata: a threshold
calibrated on tiles (calibrate.py tiles=true) goes into the export as it is, export.py says so, and
the sidecar's calibration record lets runtimes that score each image whole (the Node example, a
graph_preprocess=true model) say it too; the categories a calibration by category left on the
global threshold are named, so those runtimes decide them there."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from export import export
from tests.helpers import compose_config

TILED = {"tiles": True, "tile_reduce": "mean", "tile_size": None, "tile_overlap": 0.25}


def checkpoint_calibrated(tiny_model, path, scoring):
    checkpoint = torch.load(tiny_model["ckpt"], map_location="cpu", weights_only=True)
    checkpoint["calibration"] = {"threshold": 0.5, "target_fpr": 0.01, "n_genuine": 300, "scoring": scoring}
    torch.save(checkpoint, path)
    return path


@pytest.mark.parametrize("graph_preprocess", [True, False])
def test_exporting_a_threshold_calibrated_on_tiles_warns_and_the_sidecar_records_it(
    tiny_model, tmp_path, caplog, graph_preprocess
):
    model = checkpoint_calibrated(tiny_model, tmp_path / "tiled.ckpt", TILED)
    output = tmp_path / "tiled.onnx"
    with caplog.at_level(logging.WARNING, logger="export"):
        export(compose_config("export", [f"model={model}", f"output={output}", f"graph_preprocess={graph_preprocess}"]))
    said = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "calibrated on scores made with tiles (tile_reduce=mean" in said
    assert "score each image whole (the Node example examples/node/score.mjs" in said
    assert f"python calibrate.py model={output} input=GENUINE_IMAGES" in said and "(tiles left out)" in said
    assert ("this graph_preprocess=true model" in said) is graph_preprocess
    sidecar = json.loads(output.with_suffix(".json").read_text())
    assert sidecar["calibration"]["scoring"] == TILED and sidecar["calibration"]["n_genuine"] == 300


def test_exporting_a_threshold_calibrated_without_tiles_says_nothing_of_tiles(tiny_model, tmp_path, caplog):
    model = checkpoint_calibrated(tiny_model, tmp_path / "whole.ckpt", {"tiles": False})
    output = tmp_path / "whole.onnx"
    with caplog.at_level(logging.WARNING, logger="export"):
        export(compose_config("export", [f"model={model}", f"output={output}"]))
    assert not [r for r in caplog.records if "tiles" in r.getMessage()]
    assert json.loads(output.with_suffix(".json").read_text())["calibration"]["scoring"] == {"tiles": False}


def test_a_calibration_record_holding_nan_is_written_to_the_sidecar_as_null(tiny_model, tmp_path):
    """The sidecar is strict JSON (Node's JSON.parse reads no NaN); a check on no genuine image has fpr NaN."""
    checkpoint = torch.load(tiny_model["ckpt"], map_location="cpu", weights_only=True)
    checkpoint["calibration"] = {"n_genuine": 0, "fpr": float("nan")}
    torch.save(checkpoint, tmp_path / "nan.ckpt")
    output = tmp_path / "nan.onnx"
    export(compose_config("export", [f"model={tmp_path / 'nan.ckpt'}", f"output={output}"]))
    assert json.loads(output.with_suffix(".json").read_text())["calibration"] == {"n_genuine": 0, "fpr": None}


def test_the_sidecar_names_the_categories_a_calibration_by_category_left_on_the_global_threshold(tiny_model, tmp_path):
    """train.py calibration.by=category records them as too_few_by_category; a runtime reading the
    sidecar decides them at the global threshold instead of refusing them as unknown."""
    checkpoint = torch.load(tiny_model["ckpt"], map_location="cpu", weights_only=True)
    checkpoint["category_thresholds"] = {"photos": 0.7}
    checkpoint["calibration"] = {"category_thresholds": {"photos": 0.7}, "too_few_by_category": {"gels": [3, 299]}}
    torch.save(checkpoint, tmp_path / "by_category.ckpt")
    output = tmp_path / "by_category.onnx"
    export(compose_config("export", [f"model={tmp_path / 'by_category.ckpt'}", f"output={output}"]))
    sidecar = json.loads(output.with_suffix(".json").read_text())
    assert sidecar["category_thresholds"] == {"photos": 0.7} and sidecar["categories_on_global_threshold"] == ["gels"]
