"""ForgeLens (both stages) and IAPL (without adaptation) export to ONNX with score parity."""

from __future__ import annotations

import pytest
import torch

from detectors.registry import create_module
from exporting.onnx_export import export_onnx


@pytest.mark.slow  # the dynamo exporter takes 30-40 s per model on a shared CPU
@pytest.mark.parametrize(
    "name, overrides", [("forgelens_tiny", {"stage": 1}), ("forgelens_tiny", {"stage": 2}), ("iapl_tiny", {})]
)
def test_export_matches_pytorch(tmp_path, name, overrides):
    torch.manual_seed(0)
    module = create_module(name, [f"net.{key}={value}" for key, value in overrides.items()])
    with torch.no_grad():  # move every weight away from its near-zero start so parity is not trivial
        for parameter in module.net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    report = export_onnx(module, tmp_path / f"{name}.onnx")
    assert report.path.is_file() and report.max_score_difference <= 1e-4
