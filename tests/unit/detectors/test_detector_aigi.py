"""AI-generated-image detectors built from their real configs: contract, odd sizes, branch dropout."""

from __future__ import annotations

import pytest
import torch

from detectors import registry
from detectors.base import Detector
from detectors.blocks.frequency import SpectrumStandardizer, dct2, dct_highpass_residual, idct2
from detectors.build import build_detector
from detectors.clip_freq import ClipFreq

TINY = ["clip_linear_tiny", "dct_tiny", "clip_freq_tiny"]


def net_config(name: str, **overrides) -> dict:
    return {**registry.net_config(name), **overrides}


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("size", [(32, 32), (37, 45)])
def test_forward_backward_on_tiny_and_odd_sizes(name, size):
    torch.manual_seed(0)
    net = build_detector(net_config(name))
    assert isinstance(net, Detector)
    image = torch.rand(3, 3, *size)
    outputs = net(image)
    assert outputs["logit"].shape == (3,) and torch.isfinite(outputs["logit"]).all()
    loss = net.loss(outputs, {"label": torch.tensor([0, 1, 1])})
    loss.backward()
    trainable = [(n, p) for n, p in net.named_parameters() if p.requires_grad]
    zero = [n for n, p in trainable if p.grad is None or not p.grad.abs().sum() > 0]
    assert trainable and zero == []  # every trainable parameter receives a non-zero gradient


def test_published_configs_name_real_weights_and_keep_frequency_crops():
    assert net_config("clip_linear")["model"] == "ViT-L-14" and net_config("clip_linear")["pretrained"] == "openai"
    assert net_config("clip_freq")["pretrained"] == "webli"
    for name in ["dct", "dct_tiny", "clip_freq", "clip_freq_tiny"]:
        assert net_config(name)["preprocess"]["mode"] != "resize", name  # resampling erases the traces


def test_clip_detectors_normalize_with_the_towers_statistics():
    net = build_detector(net_config("clip_linear_tiny"))
    assert net.preprocess.mean == pytest.approx((0.48145466, 0.4578275, 0.40821073))
    assert net.preprocess.extra["clip_size"] == 32
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == 32 + 1  # frozen tower: head only
    effort = build_detector(net_config("clip_linear_tiny", adapter="svd"))
    assert effort.encoder.parameter_counts["trainable"] == 2 * 4 * (64 + 1 + 64)


def test_branch_dropout_drops_one_branch_per_sample_in_training_only():
    torch.manual_seed(0)
    net: ClipFreq = build_detector(net_config("clip_freq_tiny", branch_dropout=1.0))
    semantic, artifact = torch.ones(512, 1), torch.ones(512, 1)
    net.train()
    kept_semantic, kept_artifact = net.drop_branches(semantic, artifact)
    assert torch.equal(kept_semantic + kept_artifact, torch.ones(512, 1))  # exactly one branch left
    assert 0.35 < kept_semantic.mean() < 0.65
    net.branch_dropout = 0.3
    kept_semantic, kept_artifact = net.drop_branches(semantic, artifact)
    dropped = 1 - (kept_semantic * kept_artifact).mean()
    assert 0.2 < dropped < 0.4
    net.eval()
    assert all(torch.equal(t, semantic) for t in net.drop_branches(semantic, artifact))
    image = torch.rand(2, 3, 48, 48)
    torch.testing.assert_close(net(image)["logit"], net(image)["logit"])  # deterministic in eval


@pytest.mark.parametrize("fusion", ["concat", "late"])
def test_clip_freq_fusions_and_auxiliary_losses(fusion):
    torch.manual_seed(0)
    net = build_detector(net_config("clip_freq_tiny", fusion=fusion, artifact="npr", aux_weight=0.5)).eval()
    outputs = net(torch.rand(2, 3, 48, 48))
    assert set(outputs) == {"logit", "logit_semantic", "logit_artifact"}
    batch = {"label": torch.tensor([0.0, 1.0])}
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    expected = bce(outputs["logit"], batch["label"]) + 0.5 * (
        bce(outputs["logit_semantic"], batch["label"]) + bce(outputs["logit_artifact"], batch["label"])
    )
    torch.testing.assert_close(net.loss(outputs, batch), expected)


def test_dct_is_orthonormal_on_odd_sizes_and_highpass_removes_smooth_content():
    image = torch.rand(2, 3, 13, 22, dtype=torch.float64)
    coefficients = dct2(image)
    torch.testing.assert_close(idct2(coefficients), image)
    torch.testing.assert_close(coefficients.square().sum(), image.square().sum())  # Parseval
    flat = torch.full((1, 3, 16, 16), 0.7)
    assert dct_highpass_residual(flat).abs().max() < 1e-5


def test_spectrum_standardizer_learns_per_frequency_statistics():
    torch.manual_seed(0)
    standardize = SpectrumStandardizer(channels=1, size=8, momentum=0.5)
    scale = torch.linspace(0.5, 3.0, 64).view(1, 1, 8, 8)
    for _ in range(30):
        standardize(torch.randn(64, 1, 8, 8) * scale + 2.0)
    standardize.eval()
    out = standardize(torch.randn(4096, 1, 8, 8) * scale + 2.0)
    assert out.mean().abs() < 0.1 and (out.std(0) - 1).abs().max() < 0.25
    assert standardize(torch.randn(2, 1, 11, 9)).shape == (2, 1, 11, 9)  # other sizes: resampled statistics
