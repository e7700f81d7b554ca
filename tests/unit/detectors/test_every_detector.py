"""The detector contract, for every tiny variant the registry lists (`list_detectors(tiny=True)`).

Classifiers and localizers alike: RGB in [0, 1] at an odd size -> a logit per image; localizers also
a mask logit at the input's own size; the loss from a batch is finite, and every trainable parameter
takes part in it. A parameter whose gradient is exactly zero at initialization because a
zero-initialized gate shields it (the last batch-norm scale of timm's residual blocks, DANet's
attention scale, an adapter's up-projection) must receive a non-zero gradient after one step.
"""

from __future__ import annotations

import re

import pytest
import torch

from detectors.registry import create_detector, detector_class, list_detectors

# every tiny single-image detector follows the contract; pair detectors (two inputs) have tests of their own
TINY = [name for name in list_detectors(tiny=True) if not getattr(detector_class(name), "is_pair_detector", False)]
# training-free and matching-based detectors (fit_without_gradients) have nothing to train; the
# learned pair detectors' gradients are checked in tests/unit/detectors/test_pair_net.py
TRAINABLE = [name for name in list_detectors(tiny=True, gradients=True) if name in TINY]


def test_discovery_finds_the_classifiers_and_the_localizers():
    assert {"dct_tiny", "npr_tiny", "seg_tiny"} <= set(TINY)
    localizers = list_detectors(tiny=True, localizer=True)
    assert "seg_tiny" in localizers and "dct_tiny" not in localizers


def contract_batch(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Two images (one genuine, one manipulated) at an odd size for localizers, with masks."""
    size = max(int(net.preprocess.size or 64), getattr(net, "min_image_side", 1) + 8)
    height, width = (size + 5, size - 3) if net.is_localizer else (size, size)
    batch = {"image": torch.rand(2, 3, height, width), "label": torch.tensor([0, 1])}
    if net.is_localizer:
        mask = torch.zeros(2, 1, height, width)
        mask[1, :, 4:20, 6:30] = 1
        batch.update(mask=mask, edge=torch.zeros_like(mask))
    return batch


def zero_gradients(net: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """Backward the loss once: (trainable parameters the loss never reaches, those with all-zero gradients)."""
    net.zero_grad(set_to_none=True)
    net.loss(net(batch["image"]), batch).backward()
    trainable = [(name, p) for name, p in net.named_parameters() if p.requires_grad]
    unreached = [name for name, p in trainable if p.grad is None]
    zero = [name for name, p in trainable if p.grad is not None and not p.grad.abs().sum() > 0]
    return unreached, zero


@pytest.mark.parametrize("name", TINY)
def test_forward_and_loss_follow_the_contract(name):
    torch.manual_seed(0)
    net = create_detector(name)
    batch = contract_batch(net)
    height, width = batch["image"].shape[-2:]
    outputs = net(batch["image"])
    assert outputs["logit"].shape == (2,)
    if net.is_localizer:
        assert outputs["mask_logit"].shape == (2, 1, height, width)
    assert torch.isfinite(net.loss(outputs, batch))
    # one way to split a network for every detector, or none (detectors.base.Detector says why none)
    assert not hasattr(net, "forward_features") and not hasattr(net, "forward_head")


# Parameters that cannot receive a gradient by construction, with the reason. A convolution's bias
# feeding a BatchNorm is cancelled by the normalization (its gradient is zero up to rounding); MVSS-Net's
# edge-residual blocks keep it because the authors' checkpoint has it.
NO_GRADIENT_BY_CONSTRUCTION = {"mvss_tiny": re.compile(r"edge_stage_blocks\.\d+\.residual\.0\.bias")}


@pytest.mark.parametrize("name", TRAINABLE)
def test_every_trainable_parameter_receives_a_gradient(name):
    torch.manual_seed(0)
    net = create_detector(name)
    assert any(p.requires_grad for p in net.parameters()), f"{name} has nothing to train"
    batch = contract_batch(net)
    unreached, zero = zero_gradients(net, batch)
    assert not unreached, f"{name}: the loss does not reach {unreached}"
    exempt = NO_GRADIENT_BY_CONSTRUCTION.get(name)
    zero = [p for p in zero if not (exempt and exempt.fullmatch(p))]
    if zero:  # shielded by a zero-initialized gate: one step opens the gate
        torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.1).step()
        unreached, still_zero = zero_gradients(net, batch)
        still_zero = [p for p in still_zero if not (exempt and exempt.fullmatch(p))]
        assert not unreached and not still_zero, f"{name}: no gradient after one step for {still_zero}"
