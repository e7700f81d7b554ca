"""Effort-style SVD adapter: exact at initialization, only the residual trains, counts reported."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import nn

from detectors.blocks.clip import load_clip_visual
from detectors.blocks.svd_adapter import (
    SVDMultiheadAttention,
    SVDResidualLinear,
    apply_adapter,
    smallest_singular_triplets,
)
from detectors.blocks.weights import architecture_only

TINY_VIT = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8, "head_width": 16},
}


def test_residual_is_the_smallest_singular_directions_and_reconstructs_the_weight():
    torch.manual_seed(0)
    weight, bias = torch.randn(24, 16), torch.randn(24)
    u, s, vh = smallest_singular_triplets(weight, 2)
    torch.testing.assert_close(s, torch.linalg.svdvals(weight.double())[-2:].flip(0), rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(u.T @ u, torch.eye(2, dtype=torch.float64), rtol=0, atol=1e-8)
    layer = SVDResidualLinear(weight, bias, residual_rank=2, chunks=3)
    torch.testing.assert_close(layer.weight, weight, rtol=0, atol=1e-6)
    residual = layer.weight - layer.weight_main
    for part in residual.chunk(3):  # one rank-2 decomposition per q/k/v chunk
        assert torch.linalg.matrix_rank(part.double(), atol=1e-6) == 2
    x = torch.randn(5, 16)
    torch.testing.assert_close(layer(x), nn.functional.linear(x, weight, bias), rtol=0, atol=1e-5)


def test_open_clip_tower_is_unchanged_at_init_and_only_residuals_get_gradients():
    torch.manual_seed(0)
    visual, _ = load_clip_visual(TINY_VIT)
    visual.eval()
    image = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        before = visual(image)
    counts = apply_adapter(visual, "svd", residual_rank=1)
    assert isinstance(visual.transformer.resblocks[0].attn, SVDMultiheadAttention)
    assert counts["adapted_projections"] == 2 * 4  # q, k, v and out in each of 2 blocks
    # per projection: U (32 x 1) + S (1) + V (1 x 32), 4 projections, 2 blocks
    assert counts["trainable"] == 8 * (32 + 1 + 32)
    after = visual(image)
    torch.testing.assert_close(after, before, rtol=0, atol=1e-5)
    after.square().sum().backward()
    with_grad = {name for name, p in visual.named_parameters() if p.grad is not None}
    assert with_grad and all(
        name.rsplit(".", 1)[-1] in {"U_residual", "S_residual", "V_residual"} for name in with_grad
    )
    assert all(not p.requires_grad for name, p in visual.named_parameters() if name not in with_grad)


def test_timm_attention_linears_are_adapted_with_fused_qkv_split():
    model = timm.create_model("test_vit", pretrained=False, num_classes=0).eval()
    image = torch.rand(1, 3, *model.pretrained_cfg["input_size"][1:])
    with torch.no_grad():
        before = model(image)
    counts = apply_adapter(model, "svd", residual_rank=1)
    qkv = model.blocks[0].attn.qkv
    assert isinstance(qkv, SVDResidualLinear) and qkv.chunks == 3
    assert counts["adapted_projections"] == 4 * len(model.blocks)
    torch.testing.assert_close(model(image), before, rtol=0, atol=1e-5)


def test_frozen_and_full_adapters_and_refusals():
    visual, _ = load_clip_visual(TINY_VIT)
    total = sum(p.numel() for p in visual.parameters())
    assert apply_adapter(visual, "frozen")["trainable"] == 0
    assert apply_adapter(visual, "full")["trainable"] == total
    with pytest.raises(ValueError, match="adapter must be one of"):
        apply_adapter(visual, "lora")
    with pytest.raises(ValueError, match="no attention projections"):
        apply_adapter(nn.Sequential(nn.Linear(4, 4)), "svd")
    with pytest.raises(ValueError, match="residual_rank"):
        SVDResidualLinear(torch.randn(4, 4), None, residual_rank=5)


def test_checkpoint_rebuild_skips_the_decomposition_and_loads_the_trained_factors():
    torch.manual_seed(0)
    trained = SVDResidualLinear(torch.randn(12, 8), torch.randn(12), residual_rank=1, chunks=3)
    with torch.no_grad():
        trained.S_residual.add_(0.5)  # "training" moved the residual away from its initial value
    with architecture_only():
        rebuilt = SVDResidualLinear(torch.randn(12, 8), torch.randn(12), residual_rank=1, chunks=3)
    assert rebuilt.S_residual.abs().sum() == 0  # no decomposition was computed
    rebuilt.load_state_dict(trained.state_dict())
    torch.testing.assert_close(rebuilt.weight, trained.weight)
