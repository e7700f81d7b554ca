"""Released weights become a self-contained toolkit checkpoint (`python -m tools.released`)."""

from __future__ import annotations

import shutil

import pytest
import torch

from detectors.cospy import TRUNK_NAMES
from inference.runtime import load_checkpoint
from tools.released import build_released, main


def write_authors_folder(net, folder):
    """The three files the authors publish, written from a model of ours through the inverse mapping."""
    inverse = {v: k for k, v in TRUNK_NAMES.items()}
    state = net.state_dict()
    artifact = {"fc.weight": state["artifact_head.weight"], "fc.bias": state["artifact_head.bias"]}
    for key, value in state.items():
        if key.startswith("artifact.trunk."):
            rest = key[len("artifact.trunk.") :]
            index = rest.split(".", 1)[0] + "."
            artifact["artifact_encoder." + inverse[index] + rest[len(index) :]] = value
    folder.mkdir()
    torch.save(
        {"fc.weight": state["semantic_head.weight"], "fc.bias": state["semantic_head.bias"]},
        folder / "semantic_weights.pth",
    )
    torch.save(artifact, folder / "artifact_weights.pth")
    torch.save({"fc.weight": state["fusion.weight"], "fc.bias": state["fusion.bias"]}, folder / "fusion_weights.pth")


def test_released_weights_become_a_checkpoint_that_needs_no_released_files(tmp_path):
    torch.manual_seed(0)
    source = build_released("cospy_progan_tiny").net
    with torch.no_grad():
        for name, parameter in source.named_parameters():
            if "head" in name or "fusion" in name or "trunk" in name:
                parameter.normal_()
    write_authors_folder(source, tmp_path / "weights")
    torch.manual_seed(1)  # a different random tower: the one saved in the checkpoint must be used later
    path = main(
        ["cospy_progan_tiny", "--output", str(tmp_path / "cospy.ckpt"), f"net.pretrained={tmp_path / 'weights'}"]
    )
    built = build_released("cospy_progan_tiny", [f"net.pretrained={tmp_path / 'weights'}"])
    for key in ("semantic_head.weight", "artifact.trunk.4.0.conv1.weight", "fusion.bias"):
        torch.testing.assert_close(built.net.state_dict()[key], source.state_dict()[key])
    shutil.rmtree(tmp_path / "weights")
    module = load_checkpoint(path)
    assert float(module.threshold) == 0.5
    checkpoint = torch.load(path, weights_only=True)
    image = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        expected = built.net.eval()
        expected.load_state_dict({k[4:]: v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")})
        torch.testing.assert_close(module.net(image)["logit"], expected(image)["logit"])
        torch.testing.assert_close(module.net.fusion.weight, source.fusion.weight)


def test_unknown_detector_or_override_is_reported():
    with pytest.raises(SystemExit, match="unknown detector"):
        build_released("cospyy")
    with pytest.raises(SystemExit, match="net.key=value"):
        build_released("cospy_tiny", ["pretrained=/x"])


def test_checkpoint_needs_none_of_the_backbone_folders_it_was_built_from(tmp_path):
    """Effort from a local CLIP folder and CO-SPY from a local VAE folder: both folders are deleted
    before the checkpoints are used, and the scores are unchanged."""
    import transformers
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    clip_config = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": 32,
        "patch_size": 8,
        "projection_dim": 16,
    }
    transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**clip_config)).save_pretrained(tmp_path / "clip")
    AutoencoderKL(
        block_out_channels=[8, 16],
        down_block_types=["DownEncoderBlock2D"] * 2,
        up_block_types=["UpDecoderBlock2D"] * 2,
        norm_num_groups=4,
    ).save_pretrained(tmp_path / "vae")
    cases = {"effort_tiny": [f"net.clip={tmp_path / 'clip'}"], "cospy_tiny": [f"net.vae={tmp_path / 'vae'}"]}
    built = {name: build_released(name, overrides) for name, overrides in cases.items()}
    paths = {name: main([name, "--output", f"{tmp_path / name}.ckpt", *cases[name]]) for name in cases}
    shutil.rmtree(tmp_path / "clip"), shutil.rmtree(tmp_path / "vae")
    for name, path in paths.items():
        module = load_checkpoint(path)
        reference = built[name].net.eval()
        tower = (
            "backbone.embeddings.patch_embedding.weight"
            if name == "effort_tiny"
            else "artifact.reconstruction.vae.encoder.conv_in.weight"
        )
        torch.testing.assert_close(module.net.state_dict()[tower], reference.state_dict()[tower])  # the folder's
        reference.load_state_dict(module.net.state_dict())  # heads were drawn anew for each build
        size = module.net.preprocess.size
        image = torch.rand(2, 3, size, size)
        with torch.no_grad():
            torch.testing.assert_close(module.net(image)["logit"], reference(image)["logit"])
        assert isinstance(
            torch.load(path, weights_only=True)["hyper_parameters"]["net"]["clip" if name == "effort_tiny" else "vae"],
            dict,
        )


def test_random_weights_are_said_and_a_pair_detector_to_fit_or_a_threshold_over_1_refused(caplog):
    with caplog.at_level("WARNING", logger="tools.released"):
        build_released("npr_tiny")
    assert "npr_tiny: no released weights were given (net.pretrained=PATH)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="tools.released"):
        build_released("noise_level")  # nothing learned: nothing to say
    assert caplog.text == ""
    with pytest.raises(SystemExit, match="score models fitted on pairs: make its checkpoint with train.py"):
        build_released("dup_sift_tiny")
    with pytest.raises(SystemExit, match="--threshold is a probability between 0 and 1, got 2"):
        build_released("noise_level", threshold=2)
    with pytest.raises(SystemExit, match="noise_level: .*nosuch"):
        build_released("noise_level", ["net.nosuch=3"])


def test_a_released_weights_file_that_is_missing_is_one_message_not_a_traceback(tmp_path):
    from tools.released import main

    said = "(?s)effort_tiny: .*nonexistent.pth. does not exist.*naming weights: net.pretrained=.*nonexistent"
    with pytest.raises(SystemExit, match=said):
        main(["effort_tiny", "--output", str(tmp_path / "x.ckpt"), f"net.pretrained={tmp_path / 'nonexistent.pth'}"])
