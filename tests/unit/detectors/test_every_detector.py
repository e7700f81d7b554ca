"""The detector contract, for every detector with a tiny variant (found from configs/detector/*_tiny.yaml).

Classifiers and localizers alike: RGB in [0, 1] at an odd size -> a logit per image; localizers also
a mask logit at the input's own size; the loss from a batch is finite and gives gradients.
"""
from __future__ import annotations

import pytest
import torch

from detectors.build import build_detector
from tests.helpers import tiny_detector_names, tiny_localizer_names, tiny_net_config

TINY = tiny_detector_names()


def test_discovery_finds_the_classifiers_and_the_localizers():
    assert {"dct_tiny", "seg_tiny"} <= set(TINY)
    assert "seg_tiny" in tiny_localizer_names() and "dct_tiny" not in tiny_localizer_names()


@pytest.mark.parametrize("name", TINY)
def test_forward_and_loss_follow_the_contract(name):
    torch.manual_seed(0)
    net = build_detector(tiny_net_config(name))
    size = int(net.preprocess.size or 64)
    height, width = (size + 5, size - 3) if net.is_localizer else (size, size)
    image = torch.rand(2, 3, height, width)
    outputs = net(image)
    assert outputs["logit"].shape == (2,)
    batch = {"image": image, "label": torch.tensor([0, 1])}
    if net.is_localizer:
        assert outputs["mask_logit"].shape == (2, 1, height, width)
        mask = torch.zeros(2, 1, height, width)
        mask[1, :, 4:20, 6:30] = 1
        batch.update(mask=mask, edge=torch.zeros_like(mask))
    loss = net.loss(outputs, batch)
    assert torch.isfinite(loss)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())
