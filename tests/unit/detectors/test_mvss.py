"""MVSS-Net: every branch computes and learns, the Bayar constraint and the Sobel gate behave as
specified, and the exported graph reproduces the mask at two sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detectors.build import build_detector
from detectors.mvss import MVSSNet
from detectors.registry import net_config


def tiny_mvss(**overrides) -> MVSSNet:
    torch.manual_seed(0)
    return build_detector({**net_config("mvss_tiny"), **overrides})


def square_batch(size: tuple[int, int] = (48, 56), batch: int = 2) -> dict[str, torch.Tensor]:
    """Images with a brighter square pasted in, its mask, the mask's edge band and labels."""
    torch.manual_seed(1)
    image = torch.rand(batch, 3, *size) * 0.5
    mask = torch.zeros(batch, 1, *size)
    mask[..., 12:30, 16:36] = 1.0
    image = image + 0.4 * mask
    edge = torch.zeros_like(mask)
    edge[..., 11:31, 15:37] = 1.0
    edge[..., 14:28, 18:34] = 0.0
    return {"image": image, "mask": mask, "edge": edge, "label": torch.ones(batch)}


def test_outputs_have_the_input_size_even_when_it_is_not_a_multiple_of_the_stride():
    model = tiny_mvss().eval()
    assert model.stride == 16
    with torch.no_grad():
        outputs = model(torch.rand(3, 3, 50, 71))
    assert outputs["logit"].shape == (3,)
    assert outputs["mask_logit"].shape == (3, 1, 50, 71)
    assert outputs["edge_logit"].shape == (3, 1, 50, 71)
    assert torch.equal(outputs["logit"], outputs["mask_logit"].flatten(1).amax(1))


def test_native_resolutions_are_a_quarter_for_edges_and_a_sixteenth_for_the_mask():
    model = tiny_mvss().eval()
    with torch.no_grad():
        coarse = model.coarse_logits(torch.rand(1, 3, 64, 96))
    assert coarse["edge"].shape == (1, 1, 16, 24)
    assert coarse["mask"].shape == (1, 1, 4, 6)


def test_every_branch_receives_finite_nonzero_gradients():
    model = tiny_mvss().train()
    # The attention blocks start as identities (gamma = 0), which hides their query/key/value from
    # the gradient; open them so that this test reaches every parameter.
    with torch.no_grad():
        model.head.position.gamma.fill_(0.5)
        model.head.channel.gamma.fill_(0.5)
    batch = square_batch()
    loss = model.loss(model(batch["image"]), batch)
    loss.backward()
    branches = [
        "rgb_backbone.",
        "noise_backbone.",
        "bayar.",
        "edge_gates.",
        "edge_stage_blocks.",
        "edge_merge_blocks.",
        "head.position.",
        "head.channel.",
        "head.classifier.",
    ]
    for branch in branches:
        grads = [p.grad for name, p in model.named_parameters() if name.startswith(branch)]
        assert grads and all(g is not None for g in grads), branch
        assert all(torch.isfinite(g).all() for g in grads), branch
        assert sum(g.abs().sum() for g in grads) > 0, branch


def test_loss_is_the_mvss_weighting_of_mask_dice_image_bce_and_edge_dice():
    from detectors.losses import bce_loss, dice_loss

    model = tiny_mvss().eval()
    batch = square_batch()
    with torch.no_grad():
        outputs = model(batch["image"])
        expected = (
            0.16 * dice_loss(outputs["mask_logit"], batch["mask"])
            + 0.04 * bce_loss(outputs["logit"], batch["label"])
            + 0.80 * dice_loss(outputs["edge_logit"], batch["edge"])
        )
        assert torch.allclose(model.loss(outputs, batch), expected, atol=1e-6)


def test_bayar_constraint_holds_inside_the_trained_network():
    model = tiny_mvss().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    batch = square_batch()
    for _ in range(2):
        optimizer.zero_grad()
        model.loss(model(batch["image"]), batch).backward()
        optimizer.step()
    weight = model.bayar.constrained_weight().detach()
    assert torch.equal(weight[:, :, 2, 2], torch.full((3, 1), -1.0))
    assert torch.allclose(weight.flatten(2).sum(-1), torch.zeros(3, 1), atol=1e-5)


def test_bad_settings_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="channel_order"):
        tiny_mvss(channel_order="hsv")
    with pytest.raises(ValueError, match="layer4_dilations"):
        tiny_mvss(layer4_dilations=[1, 2, 4])


@pytest.mark.slow  # the dynamo ONNX export of two ResNets takes minutes on a shared CPU
def test_export_reproduces_the_mask_at_two_sizes(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from detectors.registry import create_module
    from exporting.onnx_export import export_onnx

    torch.manual_seed(0)
    module = create_module("mvss_tiny").eval()
    path = export_onnx(module, tmp_path / "mvss_tiny.onnx").path
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for size in ((64, 64), (80, 112)):
        image = torch.rand(2, 3, *size)
        with torch.no_grad():
            outputs = module.net(image)
        score, mask = session.run(["score", "mask"], {"image": image.numpy()})
        assert mask.shape == (2, 1, *size)
        assert np.abs(score - torch.sigmoid(outputs["logit"]).numpy()).max() <= 1e-4
        assert np.abs(mask - torch.sigmoid(outputs["mask_logit"]).numpy()).max() <= 1e-3


@pytest.mark.slow  # about 10 s on quiet cores, 40 s on a loaded machine
def test_a_few_steps_on_one_batch_fit_the_mask_and_start_on_the_edges():
    from detectors.losses import dice_loss

    model = tiny_mvss().train()
    batch = square_batch((64, 64), 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    history = []
    for _ in range(21):
        optimizer.zero_grad()
        outputs = model(batch["image"])
        loss = model.loss(outputs, batch)
        loss.backward()
        optimizer.step()
        history.append(
            (
                loss.item(),
                dice_loss(outputs["mask_logit"], batch["mask"]).item(),
                dice_loss(outputs["edge_logit"], batch["edge"]).item(),
            )
        )
    (loss_0, mask_0, edge_0), (loss_n, mask_n, edge_n) = history[0], history[-1]
    assert loss_n < 0.92 * loss_0
    assert mask_n < mask_0 - 0.15
    assert edge_n < edge_0 - 0.02
