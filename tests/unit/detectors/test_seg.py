"""`seg`: smp architectures and encoders as localizers, at any input size, with weights from files only."""

from __future__ import annotations

import logging

import pytest
import timm
import torch
from safetensors.torch import save_file

from detectors.blocks.weights import MissingWeightsError
from detectors.build import build_detector
from detectors.registry import net_config
from detectors.seg import SegmentationLocalizer

SMALL = {
    "Unet": {"encoder": "resnet18", "encoder_depth": 3, "arch_kwargs": {"decoder_channels": [16, 8, 8]}},
    "UnetPlusPlus": {"encoder": "resnet18", "encoder_depth": 3, "arch_kwargs": {"decoder_channels": [16, 8, 8]}},
    "FPN": {
        "encoder": "efficientnet-b0",
        "encoder_depth": 3,
        "arch_kwargs": {"decoder_pyramid_channels": 32, "decoder_segmentation_channels": 32},
    },
    "DeepLabV3Plus": {"encoder": "resnet18", "encoder_depth": 4, "arch_kwargs": {"decoder_channels": 32}},
    "Segformer": {"encoder": "mit_b0", "arch_kwargs": {"decoder_segmentation_channels": 32}},
}


@pytest.mark.parametrize("arch", sorted(SMALL))
def test_every_architecture_maps_any_size_to_a_same_size_map_with_gradients(arch):
    torch.manual_seed(0)
    net = SegmentationLocalizer(arch=arch, pretrained=None, **SMALL[arch])
    image = torch.rand(2, 3, 37, 53)
    outputs = net(image)
    assert outputs["mask_logit"].shape == (2, 1, 37, 53)
    assert torch.allclose(outputs["logit"], outputs["mask_logit"].flatten(1).amax(1))
    batch = {"mask": (torch.rand(2, 1, 37, 53) > 0.5).float(), "label": torch.ones(2)}
    net.loss(outputs, batch).backward()
    trainable = [(name, p) for name, p in net.named_parameters() if p.requires_grad]
    assert all(p.requires_grad for p in [*net.model.decoder.parameters(), *net.model.segmentation_head.parameters()])
    missing = [name for name, p in trainable if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"trainable parameters without gradient (DDP would fail): {missing[:5]}"


def test_aux_head_gives_the_image_score_and_is_trained_by_the_image_term():
    torch.manual_seed(0)
    net = SegmentationLocalizer(
        arch="Unet",
        pretrained=None,
        aux_head=True,
        image_score="head",
        loss_weights={"image_bce": 1.0},
        **{k: v for k, v in SMALL["Unet"].items()},
    )
    outputs = net(torch.rand(3, 3, 32, 32))
    assert outputs["logit"].shape == (3,)
    assert not torch.allclose(outputs["logit"], outputs["mask_logit"].flatten(1).amax(1))
    net.loss(outputs, {"mask": torch.zeros(3, 1, 32, 32), "label": torch.tensor([0.0, 1.0, 1.0])}).backward()
    head = [p for name, p in net.named_parameters() if "classification_head" in name]
    assert head and all(p.grad is not None and p.grad.abs().sum() > 0 for p in head)


def test_head_score_without_the_head_and_unknown_names_fail_clearly():
    with pytest.raises(ValueError, match="no detection head"):
        SegmentationLocalizer(pretrained=None, image_score="head", **SMALL["Unet"])
    with pytest.raises(ValueError, match="seg arch must be one of"):
        SegmentationLocalizer(arch="UNet", pretrained=None)
    with pytest.raises(ValueError, match="cannot build Unet with encoder 'resnet19'"):
        SegmentationLocalizer(encoder="resnet19", pretrained=None)


def test_smp_encoder_weights_are_read_from_a_file(tmp_path, caplog):
    source = SegmentationLocalizer(pretrained=None, **SMALL["Unet"])
    state = {k: v.contiguous() for k, v in source.model.encoder.state_dict().items()}
    save_file(state, str(tmp_path / "resnet18.safetensors"))
    with caplog.at_level(logging.INFO):
        loaded = SegmentationLocalizer(pretrained=str(tmp_path / "resnet18.safetensors"), **SMALL["Unet"])
    for key, value in loaded.model.encoder.state_dict().items():
        torch.testing.assert_close(value, state[key])
    assert "encoder weights from" in caplog.text


def test_timm_encoder_weights_are_read_from_a_file(tmp_path):
    reference = timm.create_model("resnet10t", pretrained=False)
    torch.save(reference.state_dict(), tmp_path / "resnet10t.pth")
    net = SegmentationLocalizer(encoder="tu-resnet10t", encoder_depth=3, pretrained=str(tmp_path / "resnet10t.pth"))
    stem = dict(net.model.encoder.model.named_parameters())["conv1.0.weight"]
    torch.testing.assert_close(stem, reference.conv1[0].weight)


def test_missing_imagenet_weights_are_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(MissingWeightsError, match="or null where the detector can start from random weights"):
        SegmentationLocalizer(pretrained="imagenet", **SMALL["Unet"])
    with pytest.raises(MissingWeightsError, match="Provide them by one of"):
        SegmentationLocalizer(encoder="tu-resnet10t", encoder_depth=3, pretrained="imagenet")


def test_random_initialization_is_logged(caplog):
    with caplog.at_level(logging.WARNING):
        SegmentationLocalizer(pretrained=None, **SMALL["Unet"])
    assert "random initialization (pretrained: null)" in caplog.text


@pytest.mark.parametrize("name", ["seg", "seg_tiny"])
def test_configs_build_the_described_network(name, monkeypatch):
    config = net_config(name, ["net.pretrained=null"])  # no ImageNet weights in tests
    net = build_detector(config)
    assert isinstance(net, SegmentationLocalizer) and net.is_localizer
    assert net.stride == 2 ** config["encoder_depth"]


def test_unused_encoder_stages_are_frozen_and_inference_mode_builds_the_same_network():
    outside = SegmentationLocalizer(pretrained=None, **SMALL["Unet"])
    frozen = {name for name, p in outside.named_parameters() if not p.requires_grad}
    assert frozen and all("layer3" in name or "layer4" in name for name in frozen)  # depth 3: layer1-2
    with torch.inference_mode():
        inside = SegmentationLocalizer(pretrained=None, **SMALL["Unet"])
        inside.load_state_dict(outside.state_dict())
        image = torch.rand(1, 3, 24, 24)
        torch.testing.assert_close(inside.eval()(image)["mask_logit"], outside.eval()(image)["mask_logit"])
