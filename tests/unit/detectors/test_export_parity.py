"""The shipped exporter (`detectors.export.export_onnx`, what `export.py` runs) on every detector.

Detectors are discovered from `configs/detector/*_tiny.yaml`, plus every detector that has no tiny
variant (its own config is small enough), so a new detector is covered as soon as its config exists.
Each export must pass the exporter's own parity check at the default tolerance, and the written file
must reproduce PyTorch on a batch size it was not traced with.
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import yaml

from detectors.export import PARITY_TOLERANCE, export_onnx
from detectors.module import DetectorModule
from tests.helpers import matching_based, tiny_detector_names

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "detector"
TINY = tiny_detector_names()  # matching-based detectors (OpenCV, no graph) are left out
WITHOUT_TINY = sorted(p.stem for p in CONFIGS.glob("*.yaml")
                      if not p.stem.endswith("_tiny") and not (CONFIGS / f"{p.stem}_tiny.yaml").exists()
                      and not matching_based(p.stem))
# variants of a tiny config that change the exported graph (adapter, fusion, artifact branch)
VARIANTS = {"clip_linear_tiny+svd": ("clip_linear_tiny", {"adapter": "svd"}),
            "clip_freq_tiny+late_dct": ("clip_freq_tiny", {"fusion": "late", "artifact": "dct"})}
# exports that take seconds run in the default test run; every other discovered detector (the
# localizers and two-branch models take minutes on a busy 2-core machine) runs with `pytest -m slow`
FAST = {"npr", "dct_tiny", "clip_linear_tiny", "clip_freq_tiny", "effort_tiny"}


def cases() -> list:
    """Tiny configs, and configs without a tiny variant that need no pretrained file to build."""
    names = TINY + [n for n in WITHOUT_TINY if yaml.safe_load((CONFIGS / f"{n}.yaml").read_text())["net"]
                    .get("pretrained", None) is None]
    out = [pytest.param(n, {}, id=n, marks=[] if n in FAST else [pytest.mark.slow]) for n in names]
    out += [pytest.param(base, overrides, id=case) for case, (base, overrides) in VARIANTS.items()]
    return out


def test_discovery_covers_the_detectors_without_a_tiny_config():
    assert "npr" in WITHOUT_TINY and "dct" not in WITHOUT_TINY  # dct has dct_tiny
    assert {"dct_tiny", "clip_linear_tiny", "clip_freq_tiny"} <= set(TINY)


def test_the_default_parity_tolerance_is_1e_4():
    assert PARITY_TOLERANCE == 1e-4
    assert inspect.signature(export_onnx).parameters["tolerance"].default == PARITY_TOLERANCE


@pytest.mark.parametrize(("name", "overrides"), cases())
def test_shipped_export_reproduces_pytorch(name, overrides, tmp_path):
    torch.manual_seed(0)
    config = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    module = DetectorModule(net={**config["net"], **overrides}, name=config.get("name"))
    size = module.net.preprocess.size or 64
    module.net.train()
    with torch.no_grad():  # non-trivial running statistics, so normalization layers are really tested
        module.net(torch.rand(4, 3, size, size))
    module.threshold.fill_(0.37)
    report = export_onnx(module, tmp_path / "model.onnx")
    assert report.max_score_difference <= 1e-4

    model = onnx.load(str(report.path))
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["detector"] == config.get("name") and float(meta["threshold"]) == pytest.approx(0.37)
    assert json.loads(meta["preprocess"]) == module.net.preprocess.to_dict()
    expected_outputs = ["score", "mask"] if module.net.is_localizer else ["score"]
    assert json.loads(meta["outputs"]) == report.outputs == [o.name for o in model.graph.output]
    assert report.outputs[:len(expected_outputs)] == expected_outputs  # extra maps (confidence) may follow

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
