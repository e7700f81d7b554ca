"""Panel pairs as batches for a learned pair detector (`detector=pairnet`, `data=duplication_pair_images`).

The pair sets come built (Hydra instantiates `synthesis.pair_set.pair_splits` in the data config):
the very pairs `dup_sift` is fitted, calibrated and measured on (same photos, same seed, so the
held-out `test` pairs are the same), with `train_rounds` pair sets drawn from the training photos,
or the pairs `generate.py` wrote (`pairs_csv`). Panels are resized to the network's square input
once, here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import cv2
import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from datamodules.datasets import (
    ResumableDraws,
    check_batch_size,
    loader_workers,
    seeded_training_draws,
    worker_base_generator,
)
from datamodules.preprocess import Preprocess
from evaluation.protocols.duplication import CMO_OPERATIONS, cmo_set

log = logging.getLogger(__name__)


@dataclass
class PairRecord:
    """One pair as reports list it (`path` is the pair's key, `group` its kind of pair)."""

    path: str
    label: int
    group: str
    source: str
    category: str | None = None

    def to_row(self) -> dict[str, str]:
        return {"path": self.path, "label": str(self.label), "group": self.group, "source": self.source}


def operation_vector(operations: Sequence[str]) -> np.ndarray:
    """Fine operation names -> 0/1 per THEMIS CMO-I answer, in `CMO_OPERATIONS` order."""
    answers = cmo_set(operations)
    return np.asarray([float(op in answers) for op in CMO_OPERATIONS], np.float32)


def to_square(image: np.ndarray, size: int, mask: bool = False) -> np.ndarray:
    interpolation = cv2.INTER_NEAREST if mask else cv2.INTER_AREA
    return cv2.resize(image.astype(np.uint8), (size, size), interpolation=interpolation)


class PairDataset(Dataset):
    """Pairs of a `PairSet` at `size` x `size`: `image_a`, `image_b` (3 x S x S in [0, 1]), `mask_a`,
    `mask_b` (1 x S x S, empty for negatives), `label`, `operations` (5 CMO answers), `has_operations`,
    `index`. `swap` exchanges A and B at random (every CMO answer is its own inverse)."""

    def __init__(self, pair_set: Any, size: int, swap: bool = False) -> None:
        self.size, self.swap = int(size), swap
        panels = {key: to_square(panel, self.size) for key, panel in pair_set.panels.items()}
        self.items = []
        for pair in pair_set.pairs:
            empty = np.zeros((self.size, self.size), np.uint8)
            masks = [
                empty if m is None else to_square(m.astype(np.uint8), self.size, mask=True)
                for m in (pair.mask_a, pair.mask_b)
            ]
            known = bool(pair.label and pair.operations)
            operations = operation_vector(pair.operations) if known else np.zeros(len(CMO_OPERATIONS), np.float32)
            self.items.append((panels[pair.id_a], panels[pair.id_b], masks[0], masks[1], pair.label, operations, known))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        a, b, mask_a, mask_b, label, operations, known = self.items[index]
        if self.swap and float(torch.rand(())) < 0.5:  # training seeds each draw (`DrawSeeded`)
            a, b, mask_a, mask_b = b, a, mask_b, mask_a
        image = lambda x: torch.from_numpy(x).permute(2, 0, 1).float() / 255.0  # noqa: E731
        return {
            "image_a": image(a),
            "image_b": image(b),
            "mask_a": torch.from_numpy(mask_a > 0).float()[None],
            "mask_b": torch.from_numpy(mask_b > 0).float()[None],
            "label": torch.tensor(int(label)),
            "operations": torch.from_numpy(operations),
            "has_operations": torch.tensor(known),
            "index": torch.tensor(index),
        }


class PairDataModule(ResumableDraws, L.LightningDataModule):
    """`pair_splits(photos, held_out, val_fraction, positives_per_photo, negatives_per_photo,
    figure_pairs, seed)` as datasets; `train_rounds` - 1 more pair sets drawn from the training photos.
    `pair_sets[split]` keeps the original panels and masks (for scoring at full size), `splits[split]`
    the records reports list."""

    def __init__(
        self,
        preprocess: Preprocess | Mapping[str, Any],
        pair_sets: Mapping[str, Any],
        batch_size: int = 16,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.preprocess = Preprocess.from_config(preprocess)
        if self.preprocess.mode != "resize" or not self.preprocess.size:
            raise ValueError(
                "pair images are resized to one square size: the detector's preprocess.mode must be resize"
            )
        missing = sorted({"train", "val", "test"} - set(pair_sets))
        if missing:
            raise ValueError(f"pair sets for train, val and test are needed; missing {missing}")
        self.pair_sets = dict(pair_sets)
        self.batch_size, self.num_workers = check_batch_size("batch_size", batch_size), loader_workers(num_workers)
        self.splits: dict[str, list[PairRecord]] = {}
        self.datasets: dict[str, PairDataset] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        size = int(self.preprocess.size)
        self.datasets = {"train": PairDataset(self.pair_sets["train"], size, swap=True)}
        for split in ("val", "test"):
            self.datasets[split] = PairDataset(self.pair_sets[split], size)
        for split, pair_set in self.pair_sets.items():
            self.splits[split] = [
                PairRecord(f"{p.id_a} <-> {p.id_b}", p.label, p.kind, p.source) for p in pair_set.pairs
            ]
        log.info("pairs: train %d, val %d, test %d", *(len(self.datasets[s]) for s in ("train", "val", "test")))

    def loader(self, split: str, shuffle: bool) -> DataLoader:
        dataset, sampler = self.datasets[split], None
        if shuffle:  # each draw made from its own seed, whichever worker makes it
            dataset, sampler = seeded_training_draws(dataset, self.training_draws())
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            generator=worker_base_generator(),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self.loader("test", shuffle=False)
