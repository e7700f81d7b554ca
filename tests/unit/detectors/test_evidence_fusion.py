"""Training-free evidence fused into learned localizers: one config switch for seg, mvss and trufor,
starting from the learned model alone and learning how much each map is worth."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.bench_training_free import sample_image
from detectors.registry import create_detector

NOISE_EVIDENCE = "net.evidence={noise_level: {block: 16}}"


def image_and_mask(size: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    """A smooth scene with a noisier central square (what noise_level finds), and that square's mask."""
    pixels = sample_image(size, seed=3)
    image = torch.from_numpy(pixels).permute(2, 0, 1)[None].float() / 255
    mask = torch.zeros(1, 1, size, size)
    mask[..., size // 3 : 2 * size // 3, size // 3 : 2 * size // 3] = 1
    return image, mask


@pytest.mark.parametrize("name", ["seg_tiny", "mvss_tiny", "trufor_tiny"])
def test_fusion_starts_from_the_learned_model_and_its_weights_get_gradients(name):
    torch.manual_seed(0)
    plain = create_detector(name).eval()
    fused = create_detector(name, [NOISE_EVIDENCE]).eval()
    missing, unexpected = fused.load_state_dict(plain.state_dict(), strict=False)
    assert unexpected == [] and missing and all(key.startswith("evidence.") for key in missing)
    image, mask = image_and_mask()
    with torch.no_grad():
        assert torch.allclose(fused(image)["mask_logit"], plain(image)["mask_logit"], atol=1e-6)
    outputs = fused(image)
    fused.loss(outputs, {"mask": mask, "edge": mask, "label": torch.ones(1)}).backward()
    assert fused.evidence.weight.grad is not None and fused.evidence.weight.grad.abs().sum() > 0
    assert not any(p.requires_grad for p in fused.evidence.detectors.parameters())


def test_the_weight_of_evidence_that_marks_the_region_grows_and_the_loss_falls():
    torch.manual_seed(0)
    fused = create_detector("seg_tiny", [NOISE_EVIDENCE]).eval()
    image, mask = image_and_mask(64)
    optimizer = torch.optim.Adam([fused.evidence.weight], lr=0.1)
    losses = []
    for _ in range(10):
        optimizer.zero_grad()
        loss = fused.loss(fused(image), {"mask": mask, "label": torch.ones(1)})
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert fused.evidence.weight[0].item() > 0.5
    assert losses[-1] < losses[0] - 0.1


def test_evidence_fitted_per_image_makes_the_fused_model_refuse_export_and_a_typo_is_named():
    fused = create_detector("seg_tiny", ["net.evidence={splicebuster: {}}"])
    assert fused.onnx_export_refusal.startswith("evidence: ")
    assert getattr(create_detector("seg_tiny"), "onnx_export_refusal", None) is None
    with pytest.raises(ValueError, match="unknown evidence 'noise'; known: noise_level"):
        create_detector("seg_tiny", ["net.evidence={noise: {}}"])


def test_the_fused_map_keeps_the_input_size_and_training_mode_leaves_the_evidence_scoring():
    fused = create_detector("seg_tiny", ["net.evidence={noise_level: {block: 16}, jpeg_ghost: {}}"]).train()
    assert not fused.evidence.detectors.training and fused.evidence.names == ["noise_level", "jpeg_ghost"]
    image = torch.from_numpy(np.random.default_rng(0).random((2, 3, 70, 90), dtype=np.float32))
    assert fused(image)["mask_logit"].shape == (2, 1, 70, 90)
