"""A short CPU training run of every localizer beats the trivial maps on held-out data.

The data are bright pasted squares (fast, every run). On copy-move and splicing made by the
toolkit's generators from the bundled photographs, the tiny variants do not yet beat the whole-image
map after a short run (see the README's localization quality section).

The trivial maps are the all-zero map (pixel F1 0 on every manipulated image) and the whole-image
map (pixel F1 2a / (1 + a) for a region covering a fraction a of the frame). Pixel F1 is per
manipulated image at probability 0.5, averaged (the toolkit's `pixel_f1`). Localizers are found
from configs/detector/*_tiny.yaml.
"""
from __future__ import annotations


import numpy as np
import pytest
import torch

from detectors.build import build_detector
from evaluation import pixel_metrics
from tests.helpers import tiny_localizer_names, tiny_net_config
from tests.localization_helpers import SquaresDataset

LOCALIZERS = tiny_localizer_names()
MARGIN = 0.10  # pixel F1 above the better of the two trivial maps


def train_briefly(name: str, samples: list[dict], steps: int, batch_size: int, lr: float) -> torch.nn.Module:
    torch.manual_seed(0)
    net = build_detector(tiny_net_config(name))
    optimizer = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=lr)
    rng = np.random.default_rng(0)
    net.train()
    for _ in range(steps):
        chosen = rng.choice(len(samples), batch_size, replace=False)
        batch = {key: torch.stack([torch.as_tensor(samples[i][key]) for i in chosen])
                 for key in ("image", "mask", "edge", "label")}
        loss = net.loss(net(batch["image"]), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return net.eval()


def f1_against_trivial_maps(net: torch.nn.Module, held_out: list[dict]) -> tuple[float, float, float]:
    """(model pixel F1, all-zero map pixel F1, whole-image map pixel F1) on held-out samples."""
    with torch.no_grad():
        probs = torch.sigmoid(net(torch.stack([s["image"] for s in held_out]))["mask_logit"])[:, 0].numpy()
    masks = [s["mask"][0].numpy() if s["label"] else None for s in held_out]
    scores = [pixel_metrics(masks, maps)["pixel_f1"] for maps in (probs, np.zeros_like(probs), np.ones_like(probs))]
    return tuple(scores)


@pytest.mark.parametrize("name", LOCALIZERS)
def test_a_few_steps_find_pasted_bright_regions(name):
    """Regions pasted with a brightness offset (a splice from a brighter source), held out by seed."""
    size = int(tiny_net_config(name)["preprocess"]["size"])  # the crop size the tiny variant trains on
    train = SquaresDataset(48, size=size, seed=0).samples
    held_out = SquaresDataset(18, size=size, seed=1).samples
    model, zero, whole = f1_against_trivial_maps(train_briefly(name, train, steps=30, batch_size=8, lr=3e-3),
                                                 held_out)
    assert zero == 0.0
    assert model >= max(zero, whole) + MARGIN, f"{name}: pixel F1 {model:.3f} vs whole-image {whole:.3f}"
