"""Loading the authors' released MVSS-Net checkpoints: every key of their layout finds its place.

The authors' layout (github.com/dong03/MVSS-Net, models/mvssnet.py, `get_mvss(sobel=True,
constrain=True)`) is written out here from its structure, names and shapes, without their code.
"""

from __future__ import annotations

import pytest
import torch

from detectors.blocks.forensic_filters import SOBEL_X
from detectors.blocks.weights import MissingWeightsError
from detectors.mvss import MVSSNet, authors_key_to_ours, map_authors_state_dict


def authors_layout(stem: int = 64, planes=(64, 128, 256, 512), blocks=(3, 4, 6, 3)) -> dict[str, tuple]:
    """Names and shapes of the authors' state dict for a bottleneck ResNet of the given size."""
    shapes: dict[str, tuple] = {}

    def batch_norm(prefix: str, channels: int) -> None:
        for name in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{prefix}.{name}"] = (channels,)
        shapes[f"{prefix}.num_batches_tracked"] = ()

    def edge_block(prefix: str, channels: int) -> None:
        shapes.update(
            {
                f"{prefix}.conv1.weight": (1, channels, 1, 1),
                f"{prefix}.conv1.bias": (1,),
                f"{prefix}.conv2.weight": (1, 1, 3, 3),
                f"{prefix}.conv2.bias": (1,),
                f"{prefix}.conv3.weight": (1, 1, 3, 3),
                f"{prefix}.conv3.bias": (1,),
            }
        )
        batch_norm(f"{prefix}.bn", 1)

    for stream in ("model", "noise_extractor.model"):
        shapes[f"{stream}.conv1.weight"] = (stem, 3, 7, 7)
        batch_norm(f"{stream}.bn1", stem)
        inplanes = stem
        for stage, (width, count) in enumerate(zip(planes, blocks), start=1):
            for index in range(count):
                prefix = f"{stream}.layer{stage}.{index}"
                shapes[f"{prefix}.conv1.weight"] = (width, inplanes, 1, 1)
                shapes[f"{prefix}.conv2.weight"] = (width, width, 3, 3)
                shapes[f"{prefix}.conv3.weight"] = (4 * width, width, 1, 1)
                for bn, channels in (("bn1", width), ("bn2", width), ("bn3", 4 * width)):
                    batch_norm(f"{prefix}.{bn}", channels)
                if index == 0:
                    shapes[f"{prefix}.downsample.0.weight"] = (4 * width, inplanes, 1, 1)
                    batch_norm(f"{prefix}.downsample.1", 4 * width)
                inplanes = 4 * width
        shapes[f"{stream}.fc.weight"], shapes[f"{stream}.fc.bias"] = (1000, inplanes), (1000,)
    for stage, width in enumerate(planes, start=1):
        edge_block(f"erb_db_{stage}", 4 * width)
        for axis in "xy":
            shapes[f"sobel_{axis}{stage}.0.weight"] = (1, 4 * width, 3, 3)
            batch_norm(f"sobel_{axis}{stage}.1", 1)
    for stage in (1, 2, 3):
        edge_block(f"erb_trans_{stage}", 1)
    shapes["constrain_conv.kernel"] = (1, 3, 24)
    fused = 2 * 4 * planes[-1]
    inner = fused // 4
    for branch in ("p", "c"):
        shapes[f"head.conv_{branch}1.0.weight"] = (inner, fused, 3, 3)
        shapes[f"head.conv_{branch}2.0.weight"] = (inner, inner, 3, 3)
        batch_norm(f"head.conv_{branch}1.1", inner)
        batch_norm(f"head.conv_{branch}2.1", inner)
    for name, out in (("conv_b", inner // 8), ("conv_c", inner // 8), ("conv_d", inner)):
        shapes[f"head.pam.{name}.weight"], shapes[f"head.pam.{name}.bias"] = (out, inner, 1, 1), (out,)
    shapes["head.pam.alpha"] = shapes["head.cam.beta"] = (1,)
    shapes["head.out.1.weight"], shapes["head.out.1.bias"] = (1, inner, 1, 1), (1,)
    return shapes


def authors_state(shapes: dict[str, tuple], device: str = "cpu") -> dict[str, torch.Tensor]:
    """Random tensors in the authors' layout; their fixed Sobel filters hold the Sobel kernels."""
    generator = torch.Generator().manual_seed(0)
    state = {}
    for key, shape in shapes.items():
        if key.startswith("sobel_") and key.endswith(".0.weight"):
            kernel = torch.tensor(SOBEL_X) if key.startswith("sobel_x") else torch.tensor(SOBEL_X).t()
            state[key] = kernel.expand(shape).clone()
        elif key.endswith("num_batches_tracked"):
            state[key] = torch.tensor(7)
        elif key.endswith("running_var"):
            state[key] = torch.rand(shape, generator=generator) + 0.5
        elif device == "meta":
            state[key] = torch.empty(shape, device="meta")
        else:
            state[key] = torch.randn(shape, generator=generator) * 0.1
    return state


SMALL = {"stem": 64, "planes": (8, 16, 32, 64), "blocks": (1, 1, 1, 1)}


def small_mvss(**overrides) -> MVSSNet:
    """Our network shaped like `SMALL`: bottleneck stages, so the authors' layout applies."""
    options = {
        "backbone": "resnet50",
        "backbone_kwargs": {"layers": [1, 1, 1, 1], "channels": [8, 16, 32, 64]},
        "layer4_dilations": [1],
        "preprocess": {"size": 64, "mode": "center_crop"},
    }
    return MVSSNet(**{**options, **overrides})


def test_full_size_authors_layout_maps_onto_our_resnet50_names_and_shapes():
    mapped = map_authors_state_dict(authors_state(authors_layout(), device="meta"))
    with torch.device("meta"):
        ours = MVSSNet(backbone="resnet50", pretrained=None).state_dict()
    assert set(mapped) == set(ours)
    assert {k: tuple(v.shape) for k, v in mapped.items()} == {k: tuple(v.shape) for k, v in ours.items()}


def test_dropped_keys_are_the_unused_classifiers_and_the_fixed_sobel_filters():
    dropped = {k for k in authors_layout() if authors_key_to_ours(k) is None}
    assert dropped == {
        "model.fc.weight",
        "model.fc.bias",
        "noise_extractor.model.fc.weight",
        "noise_extractor.model.fc.bias",
    } | {f"sobel_{a}{s}.0.weight" for a in "xy" for s in range(1, 5)}


def test_values_land_where_they_belong():
    state = authors_state(authors_layout(**SMALL))
    model = small_mvss()
    model.load_state_dict(map_authors_state_dict(state), strict=True)
    assert torch.equal(model.head.position.gamma, state["head.pam.alpha"])
    assert torch.equal(model.head.channel.gamma, state["head.cam.beta"])
    assert torch.equal(model.head.position.query.weight, state["head.pam.conv_b.weight"])
    assert torch.equal(model.head.classifier[1].weight, state["head.out.1.weight"])
    assert torch.equal(model.edge_gates[2].bn_y.running_var, state["sobel_y3.1.running_var"])
    assert torch.equal(model.edge_stage_blocks[3].residual[3].weight, state["erb_db_4.conv3.weight"])
    assert torch.equal(model.edge_merge_blocks[0].reduce.bias, state["erb_trans_1.conv1.bias"])
    assert torch.equal(model.rgb_backbone.layer2[0].downsample[1].weight, state["model.layer2.0.downsample.1.weight"])
    assert torch.equal(model.noise_backbone.conv1.weight, state["noise_extractor.model.conv1.weight"])
    # The Bayar kernel: the authors raw-reshape (in, out, 24) to (out, in, 5, 5); so do we.
    kernel = state["constrain_conv.kernel"]
    taps = kernel / kernel.sum(-1, keepdim=True)
    their_weight = torch.cat([taps[..., :12], -torch.ones(1, 3, 1), taps[..., 12:]], dim=-1).reshape(3, 1, 5, 5)
    assert torch.allclose(model.bayar.constrained_weight(), their_weight)


def test_checkpoint_file_loads_through_pretrained(tmp_path):
    state = authors_state(authors_layout(**SMALL))
    path = tmp_path / "mvssnet_casia.pt"
    torch.save({f"module.{k}": v for k, v in state.items()}, path)  # saved from DataParallel
    model = small_mvss(pretrained=str(path), channel_order="bgr")
    assert torch.equal(model.head.channel_out[0].weight, state["head.conv_c2.0.weight"])
    again = tmp_path / "ours.pt"
    torch.save(model.state_dict(), again)
    assert torch.equal(small_mvss(pretrained=str(again)).head.channel_out[0].weight, state["head.conv_c2.0.weight"])


def test_imagenet_resnet_weights_from_a_file_fill_both_streams(tmp_path):
    source = small_mvss().rgb_backbone.state_dict()
    path = tmp_path / "resnet.pth"
    torch.save({**source, "fc.weight": torch.zeros(1000, 256), "fc.bias": torch.zeros(1000)}, path)
    model = small_mvss(pretrained=str(path))
    assert torch.equal(model.rgb_backbone.conv1.weight, source["conv1.weight"])
    assert torch.equal(model.noise_backbone.layer4[0].conv3.weight, source["layer4.0.conv3.weight"])


def test_unusable_files_fail_with_one_clear_error(tmp_path):
    with pytest.raises(MissingWeightsError, match="does not exist"):
        small_mvss(pretrained=str(tmp_path / "missing.pt"))
    other = tmp_path / "other.pt"
    torch.save({"encoder.weight": torch.zeros(2)}, other)
    with pytest.raises(ValueError, match="neither an MVSS-Net checkpoint"):
        small_mvss(pretrained=str(other))
    wrong_size = tmp_path / "full.pt"
    torch.save(authors_state(authors_layout(stem=64, planes=(8, 16, 32, 32), blocks=(1, 1, 1, 1))), wrong_size)
    with pytest.raises(ValueError, match="does not fit"):
        small_mvss(pretrained=str(wrong_size))


def test_unknown_keys_and_edited_sobel_filters_are_refused():
    state = authors_state(authors_layout(**SMALL))
    with pytest.raises(ValueError, match="unknown key"):
        map_authors_state_dict({**state, "extra_branch.weight": torch.zeros(1)})
    edited = dict(state)
    edited["sobel_x2.0.weight"] = edited["sobel_x2.0.weight"] * 2
    with pytest.raises(ValueError, match="sobel_x2.0.weight"):
        map_authors_state_dict(edited)


def test_rebuilding_from_a_checkpoint_does_not_need_the_original_pretrained_file(tmp_path):
    from detectors.blocks.weights import architecture_only

    with architecture_only():
        model = small_mvss(pretrained=str(tmp_path / "was_on_another_machine.pt"))
    assert isinstance(model, MVSSNet)


def test_imagenet_backbones_come_from_the_local_cache_or_one_clear_error(tmp_path, monkeypatch):
    import detectors.blocks.weights as weights

    monkeypatch.setattr(weights, "hf_cache_lookup", lambda *args, **kwargs: None)  # an empty cache
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(MissingWeightsError, match="resnet18"):
        MVSSNet(backbone="resnet18", pretrained="imagenet", layer4_dilations=[1, 2])
