"""Levers against a detector's reliance on one generator trace: noise re-injection and sampling
balanced per generator group."""
from __future__ import annotations

from collections import Counter

import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import WeightedRandomSampler

from datamodules.classification import ManifestDataModule, balanced_by, balanced_weights
from datamodules.records import Record, write_manifest
from datamodules.transforms import build_transform
from datamodules.io import write_image


def _smooth_image() -> np.ndarray:
    ramp = np.linspace(40, 200, 64, dtype=np.float32)
    return np.repeat(np.stack([ramp + 0 * c for c in range(3)], -1)[None], 64, 0).astype(np.uint8)


def _high_frequency(image: np.ndarray) -> float:
    return float(np.abs(cv2.Laplacian(image.mean(2).astype(np.float32), cv2.CV_32F)).mean())


def test_noise_reinjection_roughens_a_smooth_image_by_the_configured_amount():
    smooth = _smooth_image()
    size = {"size": 64, "mode": "center_crop"}
    weak = build_transform(size, train=True, augment={"hflip": 0, "noise": 1.0, "noise_std": (0.02, 0.02)}, seed=0)
    strong = build_transform(size, train=True, augment={"hflip": 0, "noise": 1.0, "noise_std": (0.1, 0.1)}, seed=0)
    off = build_transform(size, train=True, augment={"hflip": 0}, seed=0)
    np.testing.assert_array_equal(off(image=smooth)["image"], smooth)
    weak_out, strong_out = weak(image=smooth)["image"], strong(image=smooth)["image"]
    # a std of 0.1 of the range is about 25 grey levels per channel; 0.02 about 5
    assert np.std(strong_out.astype(float) - smooth) == pytest.approx(0.1 * 255, rel=0.15)
    assert np.std(weak_out.astype(float) - smooth) == pytest.approx(0.02 * 255, rel=0.25)
    assert _high_frequency(smooth) < 3 < _high_frequency(weak_out) < _high_frequency(strong_out)
    assert abs(float(strong_out.mean()) - float(smooth.mean())) < 2  # zero-mean: brightness kept


def test_resampling_leaves_an_up_sampling_trace_of_the_configured_factor():
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    half = build_transform({"size": 64, "mode": "center_crop"}, train=True,
                           augment={"hflip": 0, "resample": 1.0, "resample_scale": (0.5, 0.5)}, seed=0)
    out = half(image=noise)["image"].astype(np.float32)
    assert out.shape == noise.shape
    # shrunk by 2 with area averaging, then enlarged bilinearly: the image is the bilinear
    # enlargement of its own 2x2 block means
    blocks = noise.astype(np.float32).reshape(32, 2, 32, 2, 3).mean((1, 3))
    expected = cv2.resize(blocks, (64, 64), interpolation=cv2.INTER_LINEAR)
    assert np.abs(out - expected).max() <= 1.0
    assert _high_frequency(out) < _high_frequency(noise) / 4


def test_noise_is_a_training_step_only():
    evaluation = build_transform({"size": 64, "mode": "center_crop"}, train=False)
    np.testing.assert_array_equal(evaluation(image=_smooth_image())["image"], _smooth_image())


RECORDS = ([Record(f"g{i}.png", 0, group="genuine") for i in range(60)]
           + [Record(f"a{i}.png", 1, group="ae") for i in range(30)]
           + [Record(f"d{i}.png", 1, group="ddpm") for i in range(6)])


def test_label_balance_gives_each_class_half_the_mass():
    weights = balanced_weights(RECORDS, "label")
    real = sum(w for w, r in zip(weights, RECORDS) if r.label == 0)
    assert real == pytest.approx(sum(weights) / 2)


def test_group_balance_gives_each_group_of_a_class_an_equal_share_of_draws():
    weights = balanced_weights(RECORDS, "group")
    draws = list(WeightedRandomSampler(weights, num_samples=20_000, replacement=True,
                                       generator=torch.Generator().manual_seed(0)))
    counts = Counter(RECORDS[i].group for i in draws)
    # genuine half the time, each of the two fake groups a quarter, though ddpm has 5x fewer images
    assert counts["genuine"] / 20_000 == pytest.approx(0.5, abs=0.02)
    assert counts["ae"] / 20_000 == pytest.approx(0.25, abs=0.02)
    assert counts["ddpm"] / 20_000 == pytest.approx(0.25, abs=0.02)
    label_only = Counter(RECORDS[i].group for i in WeightedRandomSampler(
        balanced_weights(RECORDS, "label"), 20_000, generator=torch.Generator().manual_seed(0)))
    assert label_only["ddpm"] / 20_000 == pytest.approx(0.5 * 6 / 36, abs=0.02)  # per-image share


@pytest.mark.parametrize("value, expected", [(False, None), (True, "label"), ("label", "label"), ("group", "group")])
def test_balanced_option_values(value, expected):
    assert balanced_by(value) == expected


def test_a_mistyped_balanced_option_is_refused_when_the_data_module_is_built(tmp_path):
    with pytest.raises(ValueError, match="data.balanced must be"):
        ManifestDataModule(manifest=str(tmp_path / "m.csv"), balanced="groups")


def test_the_training_loader_draws_groups_evenly(tmp_path):
    for record in RECORDS:
        write_image(tmp_path / record.path, np.full((8, 8, 3), 100 if record.label else 50, np.uint8))
    split = [Record(str(tmp_path / r.path), r.label, group=r.group, source=r.path, split="train") for r in RECORDS]
    split += [Record(str(tmp_path / RECORDS[i].path), RECORDS[i].label, source=f"v{i}", split=s)
              for i, s in [(0, "val"), (60, "val"), (1, "test"), (61, "test")]]
    write_manifest(split, tmp_path / "m.csv")
    module = ManifestDataModule(manifest=str(tmp_path / "m.csv"), preprocess={"size": 8, "mode": "center_crop"},
                                batch_size=96, num_workers=0, balanced="group", with_groups=True)
    module.setup()
    torch.manual_seed(0)
    groups = Counter(g for _ in range(40) for batch in module.train_dataloader() for g in batch["group"])
    total = sum(groups.values())
    assert groups["ddpm"] / total == pytest.approx(0.25, abs=0.03)
    assert groups["genuine"] / total == pytest.approx(0.5, abs=0.03)
