"""Pretrained backbone loading: offline from local files, one clear error when missing, random init said."""

from __future__ import annotations

import logging

import open_clip
import pytest
import torch

from detectors.blocks.clip import ClipImageEncoder, clip_preprocess, clip_spec, load_clip_visual
from detectors.blocks.weights import MissingWeightsError, architecture_only, load_timm_encoder

TINY = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 16, "heads": 1, "layers": 1},
}


@pytest.fixture()
def tiny_named_model(monkeypatch):
    """A tiny architecture registered under a name, as open_clip's built-in JSON configs are."""
    from open_clip import factory

    monkeypatch.setitem(factory._MODEL_CONFIGS, "toolkit-tiny-vit", TINY)
    return "toolkit-tiny-vit"


def test_spec_of_published_weights_matches_open_clip_tags():
    spec = clip_spec("ViT-L-14", "openai")
    assert (spec.image_size, spec.embed_dim, spec.quick_gelu) == (224, 768, True)
    assert spec.mean == pytest.approx((0.48145466, 0.4578275, 0.40821073))
    siglip = clip_spec("ViT-SO400M-14-SigLIP-384", "webli")
    assert (siglip.image_size, siglip.embed_dim, siglip.mean) == (384, 1152, (0.5, 0.5, 0.5))
    config = clip_preprocess(siglip, {"size": 512, "mean": [0, 0, 0]})
    assert config["size"] == 512 and config["mean"] == [0.5, 0.5, 0.5] and config["clip_size"] == 384


def test_missing_pretrained_weights_raise_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MissingWeightsError) as error:
        load_clip_visual("ViT-B-32", "openai", cache_dir=str(tmp_path))
    message = str(error.value)
    assert "not on this machine" in message
    # the option to give a file to, or null: the weights may be a CLIP detector's `clip_pretrained`
    assert "where the tag 'openai' is set (`net.clip_pretrained` or `net.pretrained`)" in message
    assert "or null where the detector can start from random weights" in message  # train.py names the setting
    with pytest.raises(MissingWeightsError, match="neither a file nor a known open_clip tag"):
        load_clip_visual("ViT-B-32", "no-such-tag")


def test_local_weights_file_is_loaded_exactly(tiny_named_model, tmp_path):
    torch.manual_seed(0)
    reference = open_clip.create_model(tiny_named_model)
    path = tmp_path / "tiny.pt"
    torch.save(reference.state_dict(), path)
    visual, spec = load_clip_visual(tiny_named_model, str(path))
    assert spec.image_size == 32 and spec.embed_dim == 16
    image = torch.rand(2, 3, 32, 32)
    reference.eval(), visual.eval()
    torch.testing.assert_close(visual(image), reference.encode_image(image))


def test_random_init_is_logged_and_architecture_only_skips_weights(tiny_named_model, caplog):
    with caplog.at_level(logging.WARNING):
        encoder = ClipImageEncoder(TINY, None)
    assert "randomly initialized (pretrained: null)" in caplog.text
    assert encoder(torch.rand(1, 3, 45, 37)).shape == (1, 16)  # any size: resized in the graph
    caplog.clear()
    with architecture_only(), caplog.at_level(logging.WARNING):
        visual, _ = load_clip_visual(tiny_named_model, "openai")  # weights absent, but not needed
    assert "weights come from the checkpoint" in caplog.text
    assert visual.output_dim == 16
    with pytest.raises(MissingWeightsError):
        load_clip_visual(tiny_named_model, "openai")  # outside the context the weights are required


def test_timm_encoder_loads_local_file_and_refuses_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    torch.manual_seed(0)
    reference = load_timm_encoder("test_resnet")
    path = tmp_path / "test_resnet.pth"
    torch.save(reference.state_dict(), path)
    loaded = load_timm_encoder("test_resnet", str(path))
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value)
    with pytest.raises(MissingWeightsError, match="does not exist"):
        load_timm_encoder("test_resnet", str(tmp_path / "absent.pth"))
    with pytest.raises(MissingWeightsError, match="not on this machine"):
        load_timm_encoder("resnet18", True, cache_dir=str(tmp_path))


def test_train_py_names_the_settings_of_the_chosen_detector_that_name_weights():
    from detectors.run_config import weights_settings
    from tests.helpers import compose_config

    named = weights_settings(compose_config("train", ["detector=forgelens"]).detector.net)
    assert "detector.net.clip_pretrained=openai" in named and "detector.net.pretrained=null" in named
    named = weights_settings(compose_config("train", ["detector=trufor"]).detector.net)
    assert "detector.net.encoder_weights=imagenet" in named and "detector.net.fingerprint.weights=null" in named
