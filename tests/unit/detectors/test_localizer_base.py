"""The localizer contract on hand-made maps: losses, image score from the map, padding to stride."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from detectors.localizer import Localizer, pad_to_multiple
from detectors.losses import bce_loss, dice_loss

BIG = 50.0  # a logit whose sigmoid is 1 within float precision


def square_mask(size: int = 8, lo: int = 2, hi: int = 6) -> torch.Tensor:
    mask = torch.zeros(1, 1, size, size)
    mask[..., lo:hi, lo:hi] = 1
    return mask


def test_dice_is_zero_for_a_perfect_map_and_one_for_the_complement():
    mask = square_mask()
    perfect = (mask * 2 - 1) * BIG
    assert dice_loss(perfect, mask).item() == pytest.approx(0.0, abs=1e-6)
    assert dice_loss(-perfect, mask, smooth=0.0).item() == pytest.approx(1.0, abs=1e-6)


def test_dice_of_a_half_sure_map_by_hand():
    mask = torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]]])
    undecided = torch.zeros_like(mask)  # probability 0.5 everywhere
    # intersection 0.5, sum of probabilities 2, sum of truth 1: 1 - 2 * 0.5 / 3
    assert dice_loss(undecided, mask, smooth=0.0).item() == pytest.approx(1 - 1 / 3)


def test_dice_is_zero_on_a_genuine_image_predicted_empty_and_averages_per_image():
    genuine = torch.zeros(1, 1, 4, 4)
    assert dice_loss(torch.full_like(genuine, -BIG), genuine).item() == pytest.approx(0.0, abs=1e-6)
    mask = torch.cat([square_mask(), square_mask()])
    logits = torch.cat([(square_mask() * 2 - 1) * BIG, -(square_mask() * 2 - 1) * BIG])
    assert dice_loss(logits, mask, smooth=0.0).item() == pytest.approx(0.5, abs=1e-6)


def test_bce_on_logits_by_hand():
    logits = torch.tensor([[[[2.0, -1.0]]]])
    target = torch.tensor([[[[1.0, 0.0]]]])
    expected = (-math.log(1 / (1 + math.exp(-2.0))) - math.log(1 - 1 / (1 + math.exp(1.0)))) / 2
    assert bce_loss(logits, target).item() == pytest.approx(expected, rel=1e-6)
    # stable where sigmoid saturates (no inf from log(0))
    assert torch.isfinite(bce_loss(torch.tensor([[[[-200.0]]]]), torch.ones(1, 1, 1, 1)))


class Constant(Localizer):
    """A localizer that returns a fixed map, to test what the base derives from it."""

    stride = 4

    def __init__(self, mask_logit: torch.Tensor, **kwargs):
        super().__init__(**kwargs)
        self.register_buffer("fixed", mask_logit)

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"mask_logit": self.fixed, "edge_logit": self.fixed}


def test_image_logit_is_the_map_max_or_the_mean_of_the_top_pixels():
    logits = torch.arange(16.0).view(1, 1, 4, 4)
    assert Constant(logits, image_score="max")(torch.zeros(1, 3, 4, 4))["logit"].tolist() == [15.0]
    top4 = Constant(logits, image_score="topk_mean", topk_fraction=0.25)
    assert top4.image_logit_from_map(logits).tolist() == [(15 + 14 + 13 + 12) / 4]
    tiny_fraction = Constant(logits, image_score="topk_mean", topk_fraction=0.001)
    assert tiny_fraction.image_logit_from_map(logits).tolist() == [15.0]  # at least one pixel


def test_head_score_needs_a_head_and_unknown_settings_fail_clearly():
    with pytest.raises(ValueError, match="no detection head"):
        Constant(torch.zeros(1, 1, 2, 2), image_score="head")
    with pytest.raises(ValueError, match="image_score must be one of"):
        Constant(torch.zeros(1, 1, 2, 2), image_score="mean")
    with pytest.raises(ValueError, match="unknown loss_weights"):
        Constant(torch.zeros(1, 1, 2, 2), loss_weights={"mask_focal": 1.0})


def test_default_loss_is_dice_plus_bce_and_weights_come_from_config():
    mask = square_mask()
    logits = torch.randn(1, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    batch = {"mask": mask, "edge": square_mask(lo=1, hi=3), "label": torch.ones(1)}
    default = Constant(logits)
    outputs = default(torch.zeros(1, 3, 8, 8))
    assert default.loss(outputs, batch).item() == pytest.approx(
        (dice_loss(logits, mask) + bce_loss(logits, mask)).item(), rel=1e-6
    )
    weighted = Constant(logits, loss_weights={"mask_dice": 0.16, "mask_bce": 0.0, "edge_dice": 0.8, "image_bce": 0.04})
    expected = (
        0.16 * dice_loss(logits, mask)
        + 0.8 * dice_loss(logits, batch["edge"])
        + 0.04 * bce_loss(logits.amax().view(1), torch.ones(1))
    )
    assert weighted.loss(outputs, batch).item() == pytest.approx(expected.item(), rel=1e-6)


def test_edge_term_without_an_edge_output_fails_clearly():
    net = Constant(torch.zeros(1, 1, 8, 8), loss_weights={"edge_dice": 1.0})
    outputs = {"logit": torch.zeros(1), "mask_logit": torch.zeros(1, 1, 8, 8)}
    with pytest.raises(ValueError, match="no edge_logit"):
        net.loss(outputs, {"mask": square_mask(), "edge": square_mask(), "label": torch.ones(1)})


def test_loss_has_gradients_for_the_map():
    logits = torch.zeros(1, 1, 8, 8, requires_grad=True)
    net = Constant(torch.zeros(1, 1, 8, 8), loss_weights={"image_bce": 1.0})
    outputs = net.outputs(logits)
    net.loss(outputs, {"mask": square_mask(), "label": torch.ones(1)}).backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


class StrideChecker(Localizer):
    """A fully convolutional stand-in that only accepts multiples of 8, like a 3-level encoder."""

    stride = 8

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[int, int]] = []
        self.conv = nn.Conv2d(3, 1, 3, padding=1)

    def dense_prediction(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        assert image.shape[-2] % 8 == 0 and image.shape[-1] % 8 == 0
        self.seen.append(tuple(image.shape[-2:]))
        return {"mask_logit": self.conv(image), "edge_logit": -self.conv(image), "aux": image.mean((1, 2, 3))}


def test_forward_pads_to_the_stride_and_crops_every_map_back():
    net = StrideChecker()
    image = torch.rand(2, 3, 13, 21)
    out = net(image)
    assert net.seen == [(16, 24)]
    assert out["mask_logit"].shape == out["edge_logit"].shape == (2, 1, 13, 21) and out["logit"].shape == (2,)
    assert out["aux"].shape == (2,)  # what is not a map passes through uncropped
    # the crop keeps the top-left, where the image is: same as running the padded input directly
    direct = net.conv(pad_to_multiple(image, 8))[..., :13, :21]
    assert torch.equal(out["mask_logit"], direct)


def test_pad_to_multiple_replicates_the_border_and_leaves_multiples_alone():
    image = torch.arange(6.0).view(1, 1, 2, 3)
    padded = pad_to_multiple(image, 4)
    assert padded.shape == (1, 1, 4, 4)
    assert torch.equal(padded[..., :2, :3], image)
    assert torch.equal(padded[..., 3, :3], image[..., 1, :])
    assert pad_to_multiple(torch.rand(1, 3, 8, 16), 8).shape == (1, 3, 8, 16)


def test_every_localizer_supplies_only_its_dense_part():
    """The pipeline (pad, dense prediction, crop, outputs) is the base class's; a localizer that
    overrode `forward` would bypass it."""
    from detectors.registry import detector_class, list_detectors

    localizers = {detector_class(name) for name in list_detectors(localizer=True)}
    assert localizers, "the registry lists no localizer"
    for cls in localizers:
        assert cls.forward is Localizer.forward, f"{cls.__name__} overrides forward"
        assert cls.dense_prediction is not Localizer.dense_prediction, f"{cls.__name__} has no dense_prediction"
