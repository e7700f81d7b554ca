"""The shipped exporter (`exporting.onnx_export.export_onnx`, what `export.py` runs) on every detector.

Detectors are the registry's tiny variants (`list_detectors(tiny=True)`), so a new detector is
covered as soon as its configs exist. One that is no fixed graph says why in `onnx_export_refusal`
and is refused (tests/unit/detectors/test_training_free.py); one whose config makes it so, such as
the evidence localizer over matching maps, is refused here, with no file written. Those whose
config says `cpu_checks.slow` (their export takes minutes on a busy 2-core machine) run with
`pytest -m slow`. Each export must pass the exporter's own parity check at the default tolerance,
and the written file must reproduce PyTorch on a batch size it was not traced with.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from detectors.registry import create_module, detector_class, detector_config, list_detectors
from exporting.onnx_export import ExportError, export_onnx
from inference.runtime import scoring_preprocess

# variants of a tiny config that change the exported graph (adapter, fusion, artifact branch)
VARIANTS = {
    "clip_linear_tiny+svd": ("clip_linear_tiny", ["net.adapter=svd"]),
    "clip_freq_tiny+late_dct": ("clip_freq_tiny", ["net.fusion=late", "net.artifact=dct"]),
}


def cases() -> list:
    out = [
        pytest.param(name, [], id=name, marks=[pytest.mark.slow] if detector_config(name).cpu_checks.slow else [])
        for name in list_detectors(tiny=True)
        if not getattr(detector_class(name), "onnx_export_refusal", None)
        and not getattr(detector_class(name), "is_pair_detector", False)  # two inputs: test_pair_net.py
    ]
    out += [
        pytest.param(base, overrides, id=case, marks=[pytest.mark.slow]) for case, (base, overrides) in VARIANTS.items()
    ]
    return out


@pytest.mark.parametrize(("name", "overrides"), cases())
def test_shipped_export_reproduces_pytorch(name, overrides, tmp_path):
    torch.manual_seed(0)
    module = create_module(name, overrides)
    size = module.net.preprocess.size or 64
    module.net.train()
    with torch.no_grad():  # non-trivial running statistics, so normalization layers are really tested
        module.net(torch.rand(4, 3, size, size))
    module.threshold.fill_(0.37)
    refusal = getattr(module.net, "onnx_export_refusal", None)  # set by its config (e.g. the evidence maps)
    if refusal:
        with pytest.raises(ExportError, match="cannot be exported to ONNX"):
            export_onnx(module, tmp_path / "model.onnx")
        assert not (tmp_path / "model.onnx").exists()
        return
    report = export_onnx(module, tmp_path / "model.onnx")
    assert report.max_score_difference <= 1e-4

    model = onnx.load(str(report.path))
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["detector"] == name and float(meta["threshold"]) == pytest.approx(0.37)
    # what infer.py applies (a localizer scores each image whole) and, where that differs, the crop it trained at
    scoring = scoring_preprocess(module.net.preprocess, module.net.is_localizer)
    assert json.loads(meta["preprocess"]) == scoring.to_dict()
    trained = json.loads(meta.get("trained_preprocess", meta["preprocess"]))
    assert trained == module.net.preprocess.to_dict()
    expected_outputs = ["score", "mask"] if module.net.is_localizer else ["score"]
    assert json.loads(meta["outputs"]) == report.outputs == [o.name for o in model.graph.output]
    assert report.outputs[: len(expected_outputs)] == expected_outputs  # extra maps (confidence) may follow

    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    image = torch.rand(5, 3, size, size, generator=torch.Generator().manual_seed(1))
    module.eval()
    with torch.inference_mode():
        outputs = module.net(image)
    onnx_outputs = session.run(None, {"image": image.numpy()})
    np.testing.assert_allclose(onnx_outputs[0], torch.sigmoid(outputs["logit"]).numpy(), rtol=0, atol=1e-4)
    if module.net.is_localizer:
        assert onnx_outputs[1].shape == (5, 1, size, size)
        np.testing.assert_allclose(onnx_outputs[1], torch.sigmoid(outputs["mask_logit"]).numpy(), rtol=0, atol=1e-4)
