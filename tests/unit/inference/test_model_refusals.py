"""An image the model refuses (here, one too small for `noise_level`'s blocks) is an error row that
says why; the images decoded in the same batch are still scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infer import infer
from inference.writer import read_results
from tests.helpers import compose_config, write_images
from tools.released import build_released, save_checkpoint

REASONS = {  # one rule, worded alike; the exported model reads it from its metadata
    "ckpt": "noise_level needs an image of at least 17 px on each side (more than half its 32 px block); got 10 x 14",
    "onnx": "noise_level needs an image of at least 17 px on each side; got 10 x 14",
}


@pytest.mark.parametrize("kind", ["ckpt", "onnx"])
def test_an_image_the_model_refuses_is_an_error_row_and_its_batch_is_still_scored(tmp_path: Path, kind: str):
    module = build_released("noise_level")
    model = save_checkpoint(module, tmp_path / "noise_level.ckpt")
    if kind == "onnx":
        from exporting.onnx_export import export_onnx

        export_onnx(module, tmp_path / "noise_level.onnx")
        model = tmp_path / "noise_level.onnx"
        import onnx

        from exporting.variants import write_sidecar

        graph = onnx.load(str(model))
        assert {p.key: p.value for p in graph.metadata_props}["min_side"] == "17"
        assert json.loads(write_sidecar(model, graph, {}).read_text())["min_side"] == 17
    images = write_images(tmp_path / "in", [(40, 40), (40, 40), (10, 14), (48, 40), (40, 40)])
    options = [f"model={model}", f"input={tmp_path / 'in'}", "progress=false", "batch_size=8"]
    result = infer(compose_config("infer", [*options, f"output={tmp_path / 'scores.csv'}", "save_masks=true"]))
    rows = {Path(row["path"]).name: row for row in read_results(tmp_path / "scores.csv")}
    assert sorted(rows) == [path.name for path in images]
    refused = rows["002.png"]
    assert refused["status"] == "error" and refused["score"] is None
    assert REASONS[kind] in refused["error"]
    for name in ("000.png", "001.png", "003.png", "004.png"):
        assert rows[name]["status"] == "ok" and 0.0 <= rows[name]["score"] <= 1.0 and Path(rows[name]["mask"]).is_file()
    assert result["counts"]["ok"] == 4 and result["counts"]["error"] == 1
    # the same images one per batch score the same: splitting a failed batch changes no score
    infer(compose_config("infer", [*options[:-1], "batch_size=1", f"output={tmp_path / 'single.csv'}"]))
    singles = {Path(row["path"]).name: row["score"] for row in read_results(tmp_path / "single.csv")}
    assert singles == {name: row["score"] for name, row in rows.items()}


def test_a_checkpoint_where_torch_is_not_installed_is_refused_with_the_way_out(tmp_path, monkeypatch):
    import importlib.util

    from inference.runtime import ModelLoadError, load_runtime

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else find_spec(name, *a))
    with pytest.raises(ModelLoadError, match="needs torch, which is not installed; score its .onnx export"):
        load_runtime(tmp_path / "model.ckpt")


@pytest.mark.parametrize("name", ["run.onnx", "run.ckpt"])
def test_a_folder_named_like_a_model_is_said_to_be_a_folder_not_a_missing_model(tmp_path, name):
    from inference.runtime import ModelLoadError, load_runtime

    (tmp_path / name).mkdir()
    with pytest.raises(ModelLoadError, match=f"{name} is a folder, not a model file: give the .ckpt or .onnx file"):
        load_runtime(tmp_path / name)
    with pytest.raises(ModelLoadError, match=f"missing_{name} does not exist"):
        load_runtime(tmp_path / f"missing_{name}")


def test_files_that_are_no_checkpoint_are_refused_with_a_reason(tmp_path):
    import torch

    from inference.runtime import ModelLoadError, read_checkpoint
    from train import IncompatibleWeightsError, check_resume

    text, listed = tmp_path / "notes.ckpt", tmp_path / "list.ckpt"
    text.write_text("hello world, not a checkpoint")
    torch.save([1, 2, 3], listed)
    with pytest.raises(ModelLoadError, match="notes.ckpt: not a readable checkpoint \\(.+\\)"):
        read_checkpoint(text)
    with pytest.raises(ModelLoadError, match="not a checkpoint written by this toolkit"):
        read_checkpoint(listed)
    for path in (text, listed):
        with pytest.raises(IncompatibleWeightsError, match="is not a checkpoint this toolkit reads"):
            check_resume(str(path), module=None)


def test_a_model_without_a_calibrated_threshold_is_said(tmp_path, caplog, monkeypatch):
    import inference.runtime as runtime

    class Uncalibrated:
        threshold = float("nan")

        def __init__(self, *args):
            pass

    monkeypatch.setattr(runtime, "OnnxRuntime", Uncalibrated)
    runtime.load_runtime(tmp_path / "model.onnx")
    assert "has no calibrated threshold (NaN" in caplog.text and "pass threshold=" in caplog.text


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("threshold", "2.0", "'threshold' must be a number from 0 to 1, got 2.0"),
        ("threshold", "-0.5", "'threshold' must be a number from 0 to 1"),
        ("threshold", "abc", "'threshold' is not JSON"),
        ("category_thresholds", '{"coins": NaN}', "'category_thresholds\\[coins\\]' must be a number from 0 to 1"),
        ("category_thresholds", "[0.5]", "'category_thresholds' must be a JSON object"),
        ("calibration", "[1, 2]", "'calibration' must be a JSON object"),
        ("preprocess", "[1, 2]", "'preprocess' must be a JSON object"),
        ("preprocess", '{"size": 100000}', "'preprocess': size must be a whole number of pixels from 1 to 8192"),
        ("outputs", '"score"', "'outputs' must be a list of output names"),
        ("min_side", "0", "'min_side' must be a whole number of pixels"),
    ],
)
def test_an_exported_model_whose_metadata_was_edited_is_refused_by_the_key_at_fault(
    tiny_model, tmp_path, key, value, message
):
    """Never scored at a threshold outside 0..1 (every image genuine, or every image fake), never a traceback."""
    import onnx

    from inference.runtime import ModelLoadError, load_runtime

    model = onnx.load(str(tiny_model["onnx"]))
    kept = [p for p in model.metadata_props if p.key != key]
    del model.metadata_props[:]
    for prop in kept:
        model.metadata_props.add(key=prop.key, value=prop.value)
    model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(tmp_path / "edited.onnx"))
    with pytest.raises(ModelLoadError, match=f"edited.onnx: metadata {message}"):
        load_runtime(tmp_path / "edited.onnx")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"category_thresholds": [1, 2]}, "'category_thresholds' must be a JSON object"),
        ({"category_thresholds": {"coins": 3.0}}, "'category_thresholds\\[coins\\]' must be a number from 0 to 1"),
        ({"calibration": "x"}, "'calibration' must be a JSON object"),
        ({"threshold": [0.5, 0.5, 0.5]}, "'threshold' must be one number, got 3"),
        ({"threshold": 2.5}, "'threshold' must be a number from 0 to 1, got 2.5"),
    ],
)
def test_a_checkpoint_whose_threshold_or_calibration_was_edited_is_refused_by_the_key(
    tiny_model, tmp_path, change, message
):
    import torch

    from inference.runtime import ModelLoadError, load_runtime

    checkpoint = torch.load(tiny_model["ckpt"], weights_only=True)
    if "threshold" in change:
        checkpoint["state_dict"]["threshold"] = torch.tensor(change.pop("threshold"))
    torch.save({**checkpoint, **change}, tmp_path / "edited.ckpt")
    with pytest.raises(ModelLoadError, match=f"edited.ckpt: metadata {message}"):
        load_runtime(tmp_path / "edited.ckpt")
