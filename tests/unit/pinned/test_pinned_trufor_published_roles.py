"""Each tensor of a published TruFor checkpoint does, once loaded, the job it does in the authors'
network, checked by behaviour: a published-layout state dict with distinct values in every tensor
is loaded through the mapping, and each fusion stage is compared with a reference written from the
published names (CMX's feature fusion: `channel_proj1`, `kv1`, `end_proj1`, `norm1` act on the RGB
stream `x1`, the `...2` tensors on the Noiseprint++ stream `x2`; each stream's queries read the
other stream's key-value context). A name round trip cannot see two same-shaped tensors trade
places."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from detectors.build import build_detector
from detectors.trufor_weights import to_published_state_dict

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "detector"
TINY = yaml.safe_load((CONFIGS / "trufor_tiny.yaml").read_text())["net"]
PUBLISHED_LAYOUT = {**TINY, "encoder": {**TINY["encoder"], "stem_width": None}}  # no stem, as published


def distinct_published_state() -> dict[str, torch.Tensor]:
    """Published names and shapes of the tiny layout, every tensor drawn from its own seed."""
    names = to_published_state_dict(build_detector(PUBLISHED_LAYOUT).state_dict())
    state = {}
    for index, (name, value) in enumerate(sorted(names.items())):
        if not value.is_floating_point():
            state[name] = value
            continue
        draw = torch.randn(value.shape, generator=torch.Generator().manual_seed(1000 + index))
        state[name] = draw.abs() + 0.5 if name.endswith("running_var") else 0.5 * draw
    return state


def linear(x, state, name):
    return F.linear(x, state[f"{name}.weight"], state.get(f"{name}.bias"))


def norm(x, state, name):
    return F.layer_norm(x, x.shape[-1:], state[f"{name}.weight"], state[f"{name}.bias"])


def batch_norm(x, state, name):
    return F.batch_norm(
        x,
        state[f"{name}.running_mean"],
        state[f"{name}.running_var"],
        state[f"{name}.weight"],
        state[f"{name}.bias"],
        training=False,
    )


def split_heads(tokens, heads):
    n, length, dim = tokens.shape
    return tokens.reshape(n, length, heads, dim // heads).permute(0, 2, 1, 3)


def key_value_context(tokens, state, name, heads):
    """softmax over keys of (K^T V) x scale, per head: a head_dim x head_dim context of one
    stream."""
    n, length, dim = tokens.shape
    key, value = linear(tokens, state, name).reshape(n, length, 2, heads, dim // heads).permute(2, 0, 3, 1, 4)
    return (key.transpose(-2, -1) @ value * (dim // heads) ** -0.5).softmax(dim=-2)


def reference_fusion(state, prefix, x1, x2, heads):
    """The published feature fusion of one stage on maps x1 (RGB) and x2 (noise), N x C x H x W."""
    n, dim, height, width = x1.shape
    t1, t2 = x1.flatten(2).transpose(1, 2), x2.flatten(2).transpose(1, 2)
    pass1, cross1 = F.relu(linear(t1, state, f"{prefix}.cross.channel_proj1")).chunk(2, dim=-1)
    pass2, cross2 = F.relu(linear(t2, state, f"{prefix}.cross.channel_proj2")).chunk(2, dim=-1)
    context1 = key_value_context(cross1, state, f"{prefix}.cross.cross_attn.kv1", heads)
    context2 = key_value_context(cross2, state, f"{prefix}.cross.cross_attn.kv2", heads)
    read1 = (split_heads(cross1, heads) @ context2).permute(0, 2, 1, 3).reshape(n, -1, dim)
    read2 = (split_heads(cross2, heads) @ context1).permute(0, 2, 1, 3).reshape(n, -1, dim)
    t1 = norm(
        t1 + linear(torch.cat((pass1, read1), -1), state, f"{prefix}.cross.end_proj1"), state, f"{prefix}.cross.norm1"
    )
    t2 = norm(
        t2 + linear(torch.cat((pass2, read2), -1), state, f"{prefix}.cross.end_proj2"), state, f"{prefix}.cross.norm2"
    )
    merged = torch.cat((t1, t2), -1).transpose(1, 2).reshape(n, 2 * dim, height, width)
    emb = f"{prefix}.channel_emb"
    residual = F.conv2d(merged, state[f"{emb}.residual.weight"])
    x = F.conv2d(merged, state[f"{emb}.channel_embed.0.weight"], state[f"{emb}.channel_embed.0.bias"])
    x = F.conv2d(x, state[f"{emb}.channel_embed.1.weight"], state[f"{emb}.channel_embed.1.bias"], padding=1, groups=dim)
    x = F.conv2d(F.relu(x), state[f"{emb}.channel_embed.3.weight"], state[f"{emb}.channel_embed.3.bias"])
    x = batch_norm(x, state, f"{emb}.channel_embed.4")
    return batch_norm(residual + x, state, f"{emb}.norm")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    state = distinct_published_state()
    path = tmp_path_factory.mktemp("published") / "trufor.pth.tar"
    torch.save({"state_dict": state}, path)
    return state, build_detector({**PUBLISHED_LAYOUT, "pretrained": str(path)}).eval()


@pytest.mark.parametrize("stage", range(4))
def test_every_fusion_tensor_acts_on_its_own_stream(loaded, stage):
    state, net = loaded
    dim, heads = TINY["encoder"]["embed_dims"][stage], TINY["encoder"]["num_heads"][stage]
    generator = torch.Generator().manual_seed(stage)
    rgb, noise = (torch.randn(2, dim, 5, 7, generator=generator) for _ in range(2))  # odd, non-square
    with torch.no_grad():
        ours = net.encoder.fuse[stage](rgb, noise)
        reference = reference_fusion(state, f"backbone.FFMs.{stage}", rgb, noise, heads)
    torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-5)


def test_the_reference_tells_the_two_streams_apart(loaded):
    """The check has teeth: handing the reference the two key-value tensors the other way round
    changes its output (so a swapped mapping cannot agree with it)."""
    state, _ = loaded
    swapped = dict(state)
    kv = "backbone.FFMs.1.cross.cross_attn.kv"
    swapped[f"{kv}1.weight"], swapped[f"{kv}2.weight"] = (state[f"{kv}2.weight"], state[f"{kv}1.weight"])
    generator = torch.Generator().manual_seed(0)
    rgb, noise = (torch.randn(2, 32, 5, 7, generator=generator) for _ in range(2))
    with torch.no_grad():
        difference = (
            (
                reference_fusion(state, "backbone.FFMs.1", rgb, noise, 2)
                - reference_fusion(swapped, "backbone.FFMs.1", rgb, noise, 2)
            )
            .abs()
            .max()
        )
    assert difference > 1e-2


def test_a_checkpoint_that_does_not_fit_names_its_missing_and_unexpected_tensors(loaded, tmp_path):
    state, _ = loaded
    partial = {k: v for k, v in state.items() if k != "detection.3.weight"}
    partial["dncnn.99.weight"] = torch.zeros(1)
    path = tmp_path / "partial.pth.tar"
    torch.save({"state_dict": partial}, path)
    with pytest.raises(ValueError) as error:
        build_detector({**PUBLISHED_LAYOUT, "pretrained": str(path)})
    message = str(error.value)
    assert "missing ['detection_head.3.weight']" in message
    assert "unexpected ['fingerprint.layers.99.weight']" in message


@pytest.mark.parametrize("published", [True, False])
def test_noiseprint_weights_land_on_their_layers(tmp_path, published):
    from detectors.blocks.noiseprint import NoiseFingerprint
    from detectors.trufor_weights import load_fingerprint

    source, target = NoiseFingerprint(depth=3, width=8), NoiseFingerprint(depth=3, width=8)
    layers = source.state_dict().items()
    state = {k: torch.full_like(v, float(i)) for i, (k, v) in enumerate(layers)}
    if published:  # the authors' file: {"network": {"0.weight": ...}}
        saved = {"network": {k.removeprefix("layers."): v for k, v in state.items()}}
    else:
        saved = state
    torch.save(saved, tmp_path / "noiseprint.th")
    load_fingerprint(target, str(tmp_path / "noiseprint.th"))
    assert all(torch.equal(target.state_dict()[k], v) for k, v in state.items())
