"""export.py writes a model and its sidecar together or not at all, and says what it cannot do
before any work."""

from __future__ import annotations

import json

import onnx
import pytest
import torch

from datamodules.records import LayoutError
from export import export
from exporting.onnx_export import ExportError
from exporting.variants import VariantRefused, write_sidecar
from tests.helpers import compose_config


def export_with(*overrides):
    return export(compose_config("export", list(overrides)))


def test_a_failed_export_leaves_the_earlier_model_and_its_sidecar_as_they_were(tiny_model, tmp_path):
    """The plain export replaced the model, then failed on eval_input, leaving the old sidecar beside it."""
    output = tmp_path / "m.onnx"
    export_with(f"model={tiny_model['ckpt']}", f"output={output}")
    before = output.read_bytes(), output.with_suffix(".json").read_bytes()
    with pytest.raises(LayoutError, match="missing.csv"):
        export_with(f"model={tiny_model['ckpt']}", f"output={output}", f"eval_input={tmp_path / 'missing.csv'}")
    assert (output.read_bytes(), output.with_suffix(".json").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.onnx"]


@pytest.mark.parametrize(
    ("output", "model", "refusal"),
    [
        ("folder.onnx", None, "is a folder; give a file name ending in .onnx"),
        ("a_file/m.onnx", None, "a_file is a file, not a folder"),
        ("m.onnx", "exported.onnx", "is already an ONNX model: export.py turns a .ckpt checkpoint into one"),
    ],
)
def test_an_output_it_cannot_write_or_an_onnx_model_is_refused_before_any_work(
    tiny_model, tmp_path, output, model, refusal
):
    """They ended in tracebacks (IsADirectoryError, FileExistsError) leaving partial files, or in
    torch's advice to load the file with weights_only=False."""
    (tmp_path / "folder.onnx").mkdir()
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "exported.onnx").write_bytes(tiny_model["onnx"].read_bytes())
    with pytest.raises(ExportError, match=refusal):
        export_with(f"model={tmp_path / model if model else tiny_model['ckpt']}", f"output={tmp_path / output}")
    assert not list(tmp_path.rglob(".*partial*"))


def test_a_switch_given_another_word_than_true_or_false_is_refused(tiny_model, tmp_path):
    """graph_preprocess=no is a non-empty string: it wrote a model whose input is image_u8."""
    from inference.cli import SettingError

    with pytest.raises(SettingError, match="graph_preprocess must be true or false, got 'no'"):
        export_with(f"model={tiny_model['ckpt']}", f"output={tmp_path / 'g.onnx'}", "graph_preprocess=no")
    assert not (tmp_path / "g.onnx").exists()


def test_a_mistyped_int8_mode_is_refused(tiny_model, tmp_path):
    """It quantized statically without a word."""
    with pytest.raises(VariantRefused, match="int8_mode must be one of"):
        export_with(f"model={tiny_model['ckpt']}", f"output={tmp_path / 'q.onnx'}", "precision=int8", "int8_mode=stat")


def test_a_model_without_a_threshold_is_refused(tiny_model, tmp_path):
    """It was exported with a sidecar holding NaN, which JSON readers (the Node.js example) reject."""
    checkpoint = torch.load(tiny_model["ckpt"], weights_only=True)
    checkpoint["state_dict"]["threshold"] = torch.tensor(float("nan"))
    torch.save(checkpoint, tmp_path / "nan.ckpt")
    with pytest.raises(ExportError, match="has no threshold .*calibrate it on genuine images first"):
        export_with(f"model={tmp_path / 'nan.ckpt'}", f"output={tmp_path / 'n.onnx'}")


def test_a_checkpoint_with_nan_weights_is_refused_as_a_diverged_run(tiny_model, tmp_path):
    """It was refused as "parity failed: nan", which says nothing of the cause."""
    checkpoint = torch.load(tiny_model["ckpt"], weights_only=True)
    name = next(k for k, v in checkpoint["state_dict"].items() if k.startswith("net.") and v.is_floating_point())
    checkpoint["state_dict"][name] = torch.full_like(checkpoint["state_dict"][name], float("nan"))
    torch.save(checkpoint, tmp_path / "diverged.ckpt")
    with pytest.raises(ExportError, match="NaN or infinite weights in 1 tensor.*diverged"):
        export_with(f"model={tmp_path / 'diverged.ckpt'}", f"output={tmp_path / 'd.onnx'}")
    assert not (tmp_path / "d.onnx").exists()


def test_the_checkpoints_calibration_record_travels_into_the_model(tiny_model, tmp_path):
    """Reports scoring the .onnx said 'no calibration record' where the .ckpt's warned of too few genuines."""
    record = {"target_fpr": 0.01, "genuine_images": 130, "too_few": True, "rule": "quantile"}
    checkpoint = torch.load(tiny_model["ckpt"], weights_only=True)
    torch.save({**checkpoint, "calibration": record}, tmp_path / "calibrated.ckpt")
    export_with(f"model={tmp_path / 'calibrated.ckpt'}", f"output={tmp_path / 'c.onnx'}")
    metadata = {p.key: p.value for p in onnx.load(str(tmp_path / "c.onnx")).metadata_props}
    assert json.loads(metadata["calibration"]) == record


def test_a_pair_models_sidecar_names_its_operation_columns(tmp_path):
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    for key, value in {"threshold": "0.5", "operations": '["scale", "flip"]', "outputs": '["score"]'}.items():
        model.metadata_props.add(key=key, value=value)
    sidecar = json.loads(write_sidecar(tmp_path / "pair.onnx", model, {}).read_text())
    assert sidecar["operations"] == ["scale", "flip"] and sidecar["input"] == ["image_a", "image_b"]


def test_a_model_that_cannot_be_written_leaves_no_partial_file(tiny_model, tmp_path, monkeypatch):
    import exporting.variants

    def full_disk(model_path, model, extra):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(exporting.variants, "write_sidecar", full_disk)  # after the model's partial file
    with pytest.raises(VariantRefused, match="cannot write .*m.onnx: No space left on device"):
        export_with(f"model={tiny_model['ckpt']}", f"output={tmp_path / 'm.onnx'}")
    assert list(tmp_path.iterdir()) == []


def test_a_pair_detector_without_a_graph_is_refused_for_what_it_is_not_for_a_variant(tmp_path):
    """dup_sift with graph_preprocess=true was told that pair detectors export as fp32 only."""
    from omegaconf import OmegaConf

    from detectors.module import DetectorModule
    from tests.helpers import ROOT

    net = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "detector" / "dup_sift_tiny.yaml").net)
    module = DetectorModule(net=net, name="dup_sift_tiny")
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, tmp_path / "dup.ckpt")
    with pytest.raises(ExportError, match="cannot be exported to ONNX"):
        export_with(f"model={tmp_path / 'dup.ckpt'}", f"output={tmp_path / 'd.onnx'}", "graph_preprocess=true")
