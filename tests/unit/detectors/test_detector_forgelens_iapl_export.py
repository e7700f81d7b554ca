"""ForgeLens (both stages) and IAPL (without adaptation) export to ONNX with score parity."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from detectors.module import DetectorModule
from exporting.onnx_export import export_onnx

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "detector"


@pytest.mark.slow  # the dynamo exporter takes 30-40 s per model on a shared CPU
@pytest.mark.parametrize("name, overrides", [("forgelens_tiny", {"stage": 1}), ("forgelens_tiny", {"stage": 2}),
                                             ("iapl_tiny", {})])
def test_export_matches_pytorch(tmp_path, name, overrides):
    config = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    torch.manual_seed(0)
    module = DetectorModule(net={**config["net"], **overrides}, optimizer=config["optimizer"],
                            scheduler=config["scheduler"], name=name)
    with torch.no_grad():  # move every weight away from its near-zero start so parity is not trivial
        for parameter in module.net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    report = export_onnx(module, tmp_path / f"{name}.onnx")
    assert report.path.is_file() and report.max_score_difference <= 1e-4
