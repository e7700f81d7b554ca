"""Under a trainer's mixed precision (`16-mixed` on a GPU, bf16 on a CPU) the fixed forensic
statistics compute as in float32: a training-free detector is calibrated on the scores infer.py
gives, and a learned localizer trains on the evidence maps it is later run with.

`torch.autocast("cpu", ...)` stands in for a GPU's autocast: it rounds the same operations
(convolutions, matrix products) to the same half-precision types."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detectors.registry import create_detector

HALF = [torch.float16, torch.bfloat16]


def edged_image(size: int = 96, seed: int = 0) -> torch.Tensor:
    """Black and white squares (gradients of hundreds of 8-bit levels: their squares overflow
    float16) under mild noise, with a smoothed square (another noise level) in the middle."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:size, 0:size]
    pixels = 255.0 * (((rows // 12) + (cols // 12)) % 2) * 0.8 + 25 + rng.normal(0, 4, (size, size))
    middle = slice(size // 3, 2 * size // 3)
    pixels[middle, middle] = 128 + rng.normal(0, 1, pixels[middle, middle].shape)
    eight_bit = np.clip(np.round(pixels), 0, 255).astype(np.float32) / 255
    return torch.from_numpy(np.repeat(eight_bit[None, None], 3, axis=1))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", ["noise_level", "jpeg_ghost", "jpeg_grid"])
def test_a_training_free_detector_scores_under_mixed_precision_as_in_float32(name, dtype):
    detector = create_detector(name).eval()
    image = edged_image()
    with torch.no_grad():
        expected = detector(image)
        with torch.autocast("cpu", dtype=dtype):
            mixed = detector(image)
    assert mixed["mask_logit"].dtype == torch.float32
    assert torch.allclose(mixed["mask_logit"], expected["mask_logit"], atol=1e-4)
    assert torch.allclose(mixed["logit"], expected["logit"], atol=1e-4)


@pytest.mark.parametrize("dtype", HALF)
def test_a_learned_localizer_computes_its_evidence_maps_under_mixed_precision_as_in_float32(dtype):
    fused = create_detector("seg_tiny", ["net.evidence={noise_level: {block: 16}, jpeg_ghost: {}}"]).eval()
    image = edged_image()
    expected = fused.evidence.compute(image)
    with torch.autocast("cpu", dtype=dtype):
        mixed = fused.evidence.compute(image)
    assert mixed.dtype == torch.float32
    assert torch.allclose(mixed, expected, atol=1e-4)
