"""Every AI-generated-image detector exports to ONNX with a dynamic batch and onnxruntime parity."""
from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import yaml

from detectors.build import build_detector

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "detector"
CASES = {
    "clip_linear_tiny": {},
    "clip_linear_tiny_svd": {"adapter": "svd"},
    "dct_tiny": {},
    "clip_freq_tiny": {},
    "clip_freq_tiny_late_dct": {"fusion": "late", "artifact": "dct"},
}


class Score(torch.nn.Module):
    """What an exported model returns: the probability that the image is fake."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(image)["logit"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_onnx_export_matches_pytorch(case):
    torch.manual_seed(0)
    name = next(n for n in ("clip_linear_tiny", "dct_tiny", "clip_freq_tiny") if case.startswith(n))
    config = {**yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())["net"], **CASES[case]}
    net = build_detector(config)
    size = net.preprocess.size
    net.train()
    net(torch.rand(4, 3, size, size))  # populate normalization statistics so they are not trivial
    model = Score(net).eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.rand(2, 3, size, size),), buffer, input_names=["image"],
                          output_names=["score"], dynamic_axes={"image": {0: "batch"}, "score": {0: "batch"}},
                          opset_version=18, dynamo=False)
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        image = torch.rand(batch, 3, size, size)
        with torch.no_grad():
            expected = model(image).numpy()
        (score,) = session.run(None, {"image": image.numpy()})
        assert score.shape == (batch,)
        assert np.abs(score - expected).max() <= 1e-4
