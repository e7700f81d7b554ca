"""Noise levels matched between the classes of each category, so that grain is no evidence of either.

A generator's output can be smoother than the genuine images of its kind (decoders smooth a
micrograph's grain away) or grainier (a sampler stopped early leaves noise). A detector trained on
them learns the noise level as the trace, and then flags genuine panels that are grainy by nature.
`NoiseMatchedClasses` raises a training draw's noise, at `rate`, to the level of a draw of the
other class of its category when that level is higher: with rate 1 each class's levels become
the larger of two independent draws, one of each class, so both classes show the same levels
within a category and only what else differs between them can be learned.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from datamodules.datasets import WrappedDataset, check_rate
from imageops import LUMA, noise_sigma

LUMA_WEIGHTS = torch.tensor(LUMA).view(3, 1, 1)
LUMA_NORM = float(LUMA_WEIGHTS.norm())  # the std of the luma of independent unit noise in each channel


def image_noise_level(image: torch.Tensor) -> float:
    """The noise level (grey levels, `imageops.noise_sigma`) of a 3 x H x W image in [0, 1]."""
    gray = (image.float() * LUMA_WEIGHTS).sum(0) * 255.0
    return noise_sigma(gray.numpy())


class NoiseMatchedClasses(WrappedDataset):
    """Training draws (samples with "image" in [0, 1] and "label") of a dataset with `records`,
    whose noise is raised at `rate` to the level of a draw of the other class of their category
    (`categories` only, when given), with Gaussian noise added in quadrature (independent in each
    channel, of the std that raises the luma's level to the target). The other class's
    levels are the last `memory` draws seen of it, per category (per loader worker): no pass over
    the data first, and a level is always that of a draw as the network sees it (crop, resize)."""

    def __init__(self, dataset: Dataset, rate: float, categories: Sequence[str] = (), memory: int = 256) -> None:
        self.dataset, self.rate = dataset, check_rate("noise-matching rate", rate)
        self.categories = frozenset(categories)
        self.memory = int(memory)
        self.levels: dict[tuple[str | None, int], deque[float]] = {}

    def __getitem__(self, index: int) -> dict[str, Any]:
        sample = self.dataset[index]
        category = self.dataset.records[index].category
        if "error" in sample or sample["label"] not in (0, 1) or (self.categories and category not in self.categories):
            return sample
        level, label = image_noise_level(sample["image"]), int(sample["label"])
        other = self.levels.get((category, 1 - label))
        self.levels.setdefault((category, label), deque(maxlen=self.memory)).append(level)
        if not other or float(torch.rand(())) >= self.rate:
            return sample
        target = other[int(torch.randint(len(other), ()))]
        if target <= level:
            return sample
        std = (target**2 - level**2) ** 0.5 / LUMA_NORM / 255.0  # independent per channel, as a sensor's
        noisy = sample["image"] + torch.randn_like(sample["image"]) * std
        sample["image"] = noisy.mul(255).round().clamp(0, 255).div(255)  # as if saved as 8-bit
        return sample
