"""CO-SPY: the VAE residual, staged training, and the authors' weights folder loading."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision
from diffusers import AutoencoderKL

from detectors.blocks.weights import MissingWeightsError
from detectors.build import build_detector
from detectors.cospy import CoSpy, cospy_state_dict
from detectors.registry import net_config

TINY_VAE = dict(
    block_out_channels=[8, 16],
    down_block_types=["DownEncoderBlock2D"] * 2,
    up_block_types=["UpDecoderBlock2D"] * 2,
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=4,
)


def tiny(name: str, **overrides) -> dict:
    return {**net_config(name), **overrides}


def authors_folder(folder: Path, semantic_dim: int, seed: int = 0) -> dict:
    """The authors' three files: `fc.*` heads and a torchvision-named ResNet-50 stem + layer1 + layer2
    (plus the VAE copy and the unused `fc1` they also save)."""
    g = torch.Generator().manual_seed(seed)
    resnet = torchvision.models.resnet50().state_dict()
    resnet["conv1.weight"] = torch.zeros(64, 3, 3, 3)  # their stem convolution is 3 x 3, stride 2
    artifact = {
        f"artifact_encoder.{k}": v + torch.rand(v.shape, generator=g) if v.is_floating_point() else v
        for k, v in resnet.items()
        if k.startswith(("conv1.", "bn1.", "layer1.", "layer2."))
    }
    artifact["artifact_encoder.vae.encoder.conv_in.weight"] = torch.zeros(8, 3, 3, 3)
    artifact["artifact_encoder.fc1.weight"] = torch.zeros(1, 512)
    artifact["fc.weight"], artifact["fc.bias"] = torch.randn(1, 512, generator=g), torch.randn(1, generator=g)
    files = {
        "semantic": {"fc.weight": torch.randn(1, semantic_dim, generator=g), "fc.bias": torch.randn(1, generator=g)},
        "artifact": artifact,
        "fusion": {"fc.weight": torch.randn(1, 2, generator=g), "fc.bias": torch.randn(1, generator=g)},
    }
    folder.mkdir(parents=True, exist_ok=True)
    for part, state in files.items():
        torch.save(state, folder / f"{part}_weights.pth")
    return files


@pytest.mark.parametrize("name", ["cospy_tiny", "cospy_progan_tiny"])
@pytest.mark.parametrize("stage", ["semantic", "artifact", "fusion"])
def test_each_stage_trains_only_its_own_parameters(name, stage):
    torch.manual_seed(0)
    net = build_detector(tiny(name, stage=stage)).train()
    trainable = {
        n.split(".")[0] + ("." + n.split(".")[1] if n.startswith("artifact.") else "")
        for n, p in net.named_parameters()
        if p.requires_grad
    }
    assert (
        trainable
        == {"semantic": {"semantic_head"}, "artifact": {"artifact.trunk", "artifact_head"}, "fusion": {"fusion"}}[stage]
    )
    size = net.preprocess.size
    out = net(torch.rand(4, 3, size, size))
    assert out["logit"].shape == (4,)
    net.loss(out, {"label": torch.tensor([0, 1, 0, 1])}).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters() if p.requires_grad)
    assert all(p.grad is None for p in net.parameters() if not p.requires_grad)


def test_vae_residual_is_the_scaled_reconstruction_error_of_the_resized_input():
    torch.manual_seed(0)
    net = CoSpy(
        variant="sd-v1.4",
        clip=tiny("cospy_tiny")["clip"],
        clip_pretrained=None,
        vae=TINY_VAE,
        artifact_size=32,
        artifact_width=8,
        artifact_layers=[1, 1],
    ).eval()
    vae = AutoencoderKL(**TINY_VAE).eval()
    vae.load_state_dict(net.artifact.reconstruction.vae.state_dict())
    image = torch.rand(2, 3, 48, 48)
    resized = torch.nn.functional.interpolate(image, size=(32, 32), mode="bilinear", align_corners=False)
    with torch.no_grad():
        expected = (resized - vae.decode(vae.encode(resized).latent_dist.mean).sample) / 7 * 100
        torch.testing.assert_close(net.artifact.residual(image), expected)
    assert not any(p.requires_grad for p in net.artifact.reconstruction.parameters())


def test_artifact_batch_norm_statistics_stay_frozen_while_the_fusion_layer_trains():
    net = build_detector(tiny("cospy_progan_tiny", stage="fusion")).train()
    before = {k: v.clone() for k, v in net.artifact.state_dict().items() if "running" in k}
    net(torch.rand(4, 3, 32, 32))
    after = net.artifact.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items())


def test_fusion_hinge_keeps_the_bias_above_its_floor():
    net = build_detector(tiny("cospy_tiny", stage="fusion", fusion_bias_floor=2.0)).train()
    assert float(net.fusion.bias) == pytest.approx(2.0)
    out, batch = net(torch.rand(2, 3, 48, 48)), {"label": torch.tensor([0, 1])}
    with torch.no_grad():
        net.fusion.bias.fill_(0.5)
    out = net(torch.rand(2, 3, 48, 48))
    bce = torch.nn.functional.binary_cross_entropy_with_logits(out["logit"], batch["label"].float())
    assert float(net.loss(out, batch) - bce) == pytest.approx(1.5, abs=1e-5)


def test_semantic_mixup_interpolates_features_and_labels():
    net = build_detector(tiny("cospy_tiny", stage="semantic", mixup_fraction=1.0))
    features = torch.cat([torch.zeros(8, 4), torch.ones(8, 4)])
    labels = torch.cat([torch.zeros(8), torch.ones(8)])
    torch.manual_seed(0)
    mixed, soft = net.mix_features(features, labels)
    torch.testing.assert_close(mixed[:, 0], soft)  # feature value and label are mixed alike
    assert ((soft > 0) & (soft < 1)).any()
    net.mixup_fraction = 0.0
    mixed, soft = net.mix_features(features, labels)
    assert torch.equal(mixed, features) and torch.equal(soft, labels)


@pytest.mark.parametrize("name", ["cospy_tiny", "cospy_progan_tiny"])
def test_authors_weights_folder_lands_on_the_right_tensors(name, tmp_path):
    full_trunk = {"artifact_width": 64, "artifact_layers": [3, 4]}  # the authors' ResNet-50 stem + 2 stages
    net = build_detector(tiny(name, **full_trunk))
    files = authors_folder(tmp_path / "weights", net.semantic.out_dim)
    state = build_detector(tiny(name, pretrained=str(tmp_path / "weights"), **full_trunk)).state_dict()
    torch.testing.assert_close(state["semantic_head.weight"], files["semantic"]["fc.weight"])
    torch.testing.assert_close(state["fusion.bias"], files["fusion"]["fc.bias"])
    torch.testing.assert_close(state["artifact_head.weight"], files["artifact"]["fc.weight"])
    art = files["artifact"]
    for theirs, ours in [
        ("conv1.weight", "0.weight"),
        ("bn1.running_var", "1.running_var"),
        ("layer1.2.conv3.weight", "4.2.conv3.weight"),
        ("layer2.0.downsample.1.running_mean", "5.0.downsample.1.running_mean"),
        ("layer2.3.bn2.weight", "5.3.bn2.weight"),
    ]:
        torch.testing.assert_close(state[f"artifact.trunk.{ours}"], art[f"artifact_encoder.{theirs}"])
    mapped = cospy_state_dict("artifact", art)
    assert not any("vae" in k or "fc1" in k for k in mapped)
    assert len(mapped) == len([k for k in art if "vae" not in k and "fc1" not in k])


def test_stage_checkpoints_of_ours_initialize_the_fusion_stage(tmp_path):
    torch.manual_seed(0)
    semantic = build_detector(tiny("cospy_tiny", stage="semantic"))
    torch.save({"state_dict": {f"net.{k}": v for k, v in semantic.state_dict().items()}}, tmp_path / "semantic.ckpt")
    fused = build_detector(tiny("cospy_tiny", init_semantic=str(tmp_path / "semantic.ckpt")))
    torch.testing.assert_close(fused.semantic_head.weight, semantic.semantic_head.weight)


def test_missing_or_wrong_weights_are_reported(tmp_path):
    with pytest.raises(MissingWeightsError, match="semantic_weights.pth"):
        build_detector(tiny("cospy_tiny", pretrained=str(tmp_path / "absent")))
    authors_folder(tmp_path / "weights", semantic_dim=7)  # the tiny tower's feature is 32-d
    with pytest.raises(RuntimeError, match="size mismatch"):
        build_detector(tiny("cospy_tiny", pretrained=str(tmp_path / "weights")))
