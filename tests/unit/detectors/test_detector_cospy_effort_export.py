"""CO-SPY (both variants, the VAE branch included) and Effort export to ONNX with score parity."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from detectors.export import PARITY_TOLERANCE, export_onnx
from detectors.module import DetectorModule

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "detector"


# The VAE graph makes cospy_tiny's export the slow one (about a minute on shared CPUs).
@pytest.mark.parametrize("name", [pytest.param("cospy_tiny", marks=pytest.mark.slow), "cospy_progan_tiny",
                                  "effort_tiny"])
def test_tiny_variant_exports_with_parity(name, tmp_path):
    torch.manual_seed(0)
    config = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    module = DetectorModule(net=config["net"], name=name).eval()
    report = export_onnx(module, tmp_path / "model.onnx")
    assert (tmp_path / "model.onnx").stat().st_size > 0
    assert report.max_score_difference <= PARITY_TOLERANCE
