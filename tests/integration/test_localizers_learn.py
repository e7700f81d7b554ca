"""A short CPU training run of every localizer beats the trivial maps on held-out data.

Two data sets: bright pasted squares (fast, every run), and copy-move and splicing forgeries made by
the toolkit's own generators from the bundled photographs, held out by source photo (slow; the
tiny variants measured short of the margin there, recorded per case in `SHORT_OF_MARGIN`).

The trivial maps are the all-zero map (pixel F1 0 on every manipulated image) and the whole-image
map (pixel F1 2a / (1 + a) for a region covering a fraction a of the frame). Pixel F1 is per
manipulated image at probability 0.5, averaged (the toolkit's `pixel_f1`). Localizers are found
from configs/detector/*_tiny.yaml.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from detectors.build import build_detector
from evaluation import pixel_metrics
from tests.helpers import tiny_localizer_names, tiny_net_config
from synthesis.embedded import bundled_photo_paths
from tests.localization_helpers import SquaresDataset, generated_forgeries

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


GENERATED_SIZE = 64  # panel side: forgeries are made, trained on and scored whole at this size
GENERATED_MARGIN = 0.05  # pixel F1 above the better trivial map, per operation
GENERATED_STEPS = 200
# Measured short of the margin with this recipe (pixel F1 of the model vs the whole-image map on the
# held-out panels; the all-zero map scores 0). None of the tiny variants, randomly initialized,
# localizes these forgeries after 200 steps: a copy leaves only a feathered seam, and a splice from
# another photograph shrunk to the same panel size differs from its host in content, not in traces
# a few hundred steps can learn. Strict: a recipe that reaches the margin makes the case fail here,
# so the mark is removed with it.
SHORT_OF_MARGIN = {
    ("mvss_tiny", "copy_move"): "0.159 vs 0.144", ("mvss_tiny", "splicing"): "0.082 vs 0.228",
    ("seg_tiny", "copy_move"): "0.023 vs 0.144", ("seg_tiny", "splicing"): "0.117 vs 0.228",
    ("trufor_tiny", "copy_move"): "0.184 vs 0.144", ("trufor_tiny", "splicing"): "0.108 vs 0.228",
}


@functools.lru_cache(maxsize=1)
def generated_split() -> tuple[dict, dict]:
    """Every fourth bundled photo is held out: no held-out photo gives a training panel or a donor."""
    photos = bundled_photo_paths()
    held_out_photos = photos[1::4]
    training_photos = [photo for photo in photos if photo not in held_out_photos]
    assert held_out_photos and not set(held_out_photos) & set(training_photos)
    return (generated_forgeries(training_photos, panels_per_photo=12, size=GENERATED_SIZE, seed=0),
            generated_forgeries(held_out_photos, panels_per_photo=8, size=GENERATED_SIZE, seed=1))


@functools.lru_cache(maxsize=1)
def trained_on_generated(name: str) -> torch.nn.Module:
    """One training run per localizer on both operations mixed, shared by the per-operation checks."""
    train, _ = generated_split()
    return train_briefly(name, train["copy_move"] + train["splicing"], steps=GENERATED_STEPS, batch_size=16,
                         lr=3e-3)


def generated_cases() -> list:
    cases = []
    for name in LOCALIZERS:
        for operation in ("copy_move", "splicing"):
            measured = SHORT_OF_MARGIN.get((name, operation))
            marks = [pytest.mark.xfail(strict=True, reason=f"measured short of the margin: {measured}")] \
                if measured else []
            cases.append(pytest.param(name, operation, marks=marks, id=f"{name}-{operation}"))
    return cases


@pytest.mark.slow  # about five minutes of CPU per localizer (generation, 200 steps at 64 px)
@pytest.mark.parametrize(("name", "operation"), generated_cases())
def test_short_training_localizes_held_out_generated_forgeries(name, operation):
    """Copy-move and splicing made by the toolkit's generators; scored whole, per held-out panel."""
    samples = generated_split()[1][operation]
    assert len(samples) >= 10, f"only {len(samples)} held-out {operation} forgeries"
    model, zero, whole = f1_against_trivial_maps(trained_on_generated(name), samples)
    print(f"{name} {operation}: pixel F1 {model:.3f}, all-zero {zero:.3f}, whole-image {whole:.3f}")
    assert zero == 0.0
    assert model >= max(zero, whole) + GENERATED_MARGIN, \
        f"{name} on {operation}: pixel F1 {model:.3f} vs whole-image {whole:.3f}"
