"""Noise levels matched between the classes of each category (`data.noise_match`): within a
category, the noise level of a training draw no longer tells its class."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from datamodules.noise_matching import NoiseMatchedClasses, image_noise_level
from tests.unit.datamodules.test_training_levers import _flat_split_module

GRAIN, SMOOTH = 12.0, 2.0  # grey levels


class _GrainyGenuinesSmoothFakes(torch.utils.data.Dataset):
    """Fluorescence: genuine draws grainy, fakes smooth (as a decoder leaves them); charts: both
    smooth. Grey noise (the same in every channel, so the luma keeps its std), drawn afresh per
    access as a random crop would be."""

    records = [SimpleNamespace(category=c) for c in ("fluorescence", "fluorescence", "chart", "chart")]

    def __len__(self):
        return 4

    def __getitem__(self, index):
        label = index % 2
        std = GRAIN if (label == 0 and index < 2) else SMOOTH
        image = (0.5 + torch.randn(1, 48, 48).expand(3, -1, -1) * std / 255).mul(255).round().clamp(0, 255).div(255)
        return {"image": image, "label": label}


def levels(dataset, index: int, draws: int = 150) -> np.ndarray:
    return np.array([image_noise_level(dataset[index]["image"]) for _ in range(draws)])


def test_the_estimate_reads_the_noise_in_grey_levels():
    torch.manual_seed(0)
    assert np.median(levels(_GrainyGenuinesSmoothFakes(), 0)) == pytest.approx(GRAIN, rel=0.1)
    assert np.median(levels(_GrainyGenuinesSmoothFakes(), 1)) == pytest.approx(SMOOTH, rel=0.25)


def test_matching_gives_both_classes_of_a_category_the_same_noise_levels():
    torch.manual_seed(0)
    matched = NoiseMatchedClasses(_GrainyGenuinesSmoothFakes(), rate=1.0)
    genuine, fake = [], []
    for _ in range(150):  # the classes alternate, as a shuffled loader mixes them
        genuine.append(image_noise_level(matched[0]["image"]))
        fake.append(image_noise_level(matched[1]["image"]))
    assert np.median(genuine) == pytest.approx(GRAIN, rel=0.1)  # the grainier class is left as it was
    assert np.median(fake) == pytest.approx(np.median(genuine), rel=0.1)  # the smoother one raised to it
    assert all(matched[1]["label"] == 1 for _ in range(5)) and matched.records[0].category == "fluorescence"


def test_a_category_not_listed_and_a_rate_of_zero_leave_the_draws_as_they_were():
    torch.manual_seed(0)
    charts_only = NoiseMatchedClasses(_GrainyGenuinesSmoothFakes(), rate=1.0, categories=["chart"])
    for index in range(3):
        charts_only[index]  # the first draw of each class is remembered, none matched yet
    assert np.median(levels(charts_only, 1)) == pytest.approx(SMOOTH, rel=0.25)
    never = NoiseMatchedClasses(_GrainyGenuinesSmoothFakes(), rate=0.0)
    never[0]
    assert np.median(levels(never, 1)) == pytest.approx(SMOOTH, rel=0.25)


def test_the_data_module_matches_training_draws_only_and_refuses_a_rate_outside_0_1(tmp_path):
    module = _flat_split_module(tmp_path, noise_match=0.5, noise_match_categories=["gel"])
    train = module.train_dataloader().dataset.dataset  # inside the per-draw seeding (`DrawSeeded`)
    assert isinstance(train, NoiseMatchedClasses) and train.rate == 0.5 and train.categories == {"gel"}
    assert next(iter(module.train_dataloader()))["image"].shape == (8, 3, 16, 16)
    module = _flat_split_module(tmp_path / "all", noise_match=1.0)  # uncategorized records: one category
    assert len(list(module.train_dataloader())) == 1
    assert not isinstance(module.val_dataloader().dataset, NoiseMatchedClasses)
    with pytest.raises(ValueError, match="noise-matching rate must lie in"):
        _flat_split_module(tmp_path / "bad", noise_match=1.5)
