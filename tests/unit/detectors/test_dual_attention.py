"""Dual attention: identities until trained, then positions and channels exchange evidence."""

from __future__ import annotations

import torch

from detectors.blocks.dual_attention import ChannelAttention, DualAttentionHead, PositionAttention


def test_attention_blocks_start_as_identities():
    features = torch.randn(2, 16, 5, 7)
    assert torch.equal(PositionAttention(16)(features), features)
    assert torch.equal(ChannelAttention()(features), features)


def test_position_attention_lets_one_location_see_another():
    torch.manual_seed(0)
    block = PositionAttention(16).eval()
    with torch.no_grad():
        block.gamma.fill_(1.0)
    features = torch.randn(1, 16, 4, 4)
    changed = features.clone()
    changed[..., 0, 0] += 5.0
    difference = (block(changed) - block(features))[..., 3, 3]
    assert difference.abs().max() > 1e-4


def test_channel_attention_mixes_channels():
    block = ChannelAttention()
    with torch.no_grad():
        block.gamma.fill_(1.0)
    features = torch.zeros(1, 2, 3, 3)
    features[:, 1] = 1.0
    out = block(features)
    assert out[:, 0].abs().sum() > 0  # channel 0 was zero; it received channel 1's evidence


def test_head_maps_features_to_logits_at_the_same_resolution():
    head = DualAttentionHead(64, 1)
    assert head.position_in[0].out_channels == 16
    assert head.position.query.out_channels == 2
    assert head(torch.randn(2, 64, 6, 5)).shape == (2, 1, 6, 5)


def test_channel_attention_runs_in_float32_under_mixed_precision():
    torch.manual_seed(0)
    block = ChannelAttention()
    with torch.no_grad():
        block.gamma.fill_(1.0)
    features = torch.rand(1, 8, 32, 32) * 4  # energies in the thousands
    expected = block(features)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = block(features)
    assert mixed.dtype == torch.float32
    assert torch.allclose(mixed, expected, rtol=1e-5, atol=1e-5)
