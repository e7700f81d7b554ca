"""Panel pairs for training a learned pair detector (`detector=pairnet`, `data=duplication_pair_images`).

The pairs are `synthesis.pair_set.pair_splits`'s, the very pairs `dup_sift` is fitted, calibrated
and measured on (same photos, same seed, so the held-out `test` pairs are the same): THEMIS global
and local duplications with their operation sets and masks, copies of figure panels, and
negatives. Training draws `train_rounds` pair sets from the training photos (each with its own
random duplications), since a network needs more pairs than two logistic models. Panels are
resized to the network's square input once, at setup.

`pairs_csv=<generate.py output>/duplication_pairs.csv` trains on the pairs `generate.py` wrote
instead (`panel_a`, `panel_b`, `mask_a`, `mask_b`, `operations`, `source`, `split`; paths relative
to the file). That file holds duplicated pairs only, so each split gets as many pairs that share
nothing: panel A of one pair with panel B of a pair made from another source photo.
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

    def __init__(self, pair_set: Any, size: int, swap: bool = False, seed: int = 0) -> None:
        self.size, self.swap = int(size), swap
        self.rng = np.random.default_rng(seed)
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
        if self.swap and self.rng.random() < 0.5:
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


class PairDataModule(L.LightningDataModule):
    """`pair_splits(photos, held_out, val_fraction, positives_per_photo, negatives_per_photo,
    figure_pairs, seed)` as datasets; `train_rounds` - 1 more pair sets drawn from the training photos.
    `pair_sets[split]` keeps the original panels and masks (for scoring at full size), `splits[split]`
    the records reports list."""

    def __init__(
        self,
        preprocess: Preprocess | Mapping[str, Any],
        photos: str | None = None,
        held_out: float = 0.3,
        val_fraction: float = 0.35,
        positives_per_photo: int = 8,
        negatives_per_photo: int = 16,
        figure_pairs: int = 12,
        train_rounds: int = 1,
        pairs_csv: str | None = None,
        seed: int = 0,
        batch_size: int = 16,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.preprocess = Preprocess.from_config(preprocess)
        if self.preprocess.mode != "resize" or not self.preprocess.size:
            raise ValueError(
                "pair images are resized to one square size: the detector's preprocess.mode must be resize"
            )
        self.options = {
            "photos": photos,
            "held_out": held_out,
            "val_fraction": val_fraction,
            "positives_per_photo": positives_per_photo,
            "negatives_per_photo": negatives_per_photo,
            "figure_pairs": figure_pairs,
            "seed": seed,
        }
        self.train_rounds, self.seed, self.pairs_csv = max(1, int(train_rounds)), seed, pairs_csv
        self.batch_size, self.num_workers = batch_size, num_workers
        self.pair_sets: dict[str, Any] = {}
        self.splits: dict[str, list[PairRecord]] = {}
        self.datasets: dict[str, PairDataset] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        from synthesis.pair_set import pair_splits

        if self.pairs_csv:
            self.pair_sets = read_generated_pairs(self.pairs_csv, np.random.default_rng(self.seed))
            rounds = [self.pair_sets["train"]]
        else:
            self.pair_sets = pair_splits(**self.options)
            rounds = [self.pair_sets["train"], *self.extra_training_rounds()]
        size = int(self.preprocess.size)
        self.datasets = {"train": ConcatPairs([PairDataset(s, size, swap=True, seed=self.seed) for s in rounds])}
        for split in ("val", "test"):
            self.datasets[split] = PairDataset(self.pair_sets[split], size)
        for split, pair_set in self.pair_sets.items():
            self.splits[split] = [
                PairRecord(f"{p.id_a} <-> {p.id_b}", p.label, p.kind, p.source) for p in pair_set.pairs
            ]
        log.info(
            "pairs: train %d (%d rounds), val %d, test %d",
            len(self.datasets["train"]),
            len(rounds),
            len(self.datasets["val"]),
            len(self.datasets["test"]),
        )

    def extra_training_rounds(self) -> list[Any]:
        """More pair sets from the training photos (the photos `pair_splits` trains on, other draws)."""
        from synthesis.pair_set import load_photos, make_pair_set, split_sources

        if self.train_rounds == 1:
            return []
        table = load_photos(self.options["photos"])
        fitting, _ = split_sources(sorted(table), self.options["held_out"], self.seed)
        training, _ = split_sources(fitting, self.options["val_fraction"], self.seed + 1)
        counts = [self.options[k] for k in ("positives_per_photo", "negatives_per_photo", "figure_pairs")]
        return [
            make_pair_set(
                {n: table[n] for n in training},
                np.random.default_rng([self.seed, 0, extra]),
                *counts,
                prefix=f"train{extra}/",
            )
            for extra in range(1, self.train_rounds)
        ]

    def loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self.datasets[split],
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self.loader("test", shuffle=False)


class ConcatPairs(torch.utils.data.ConcatDataset):
    """Several rounds of training pairs as one dataset (indices are positions in the whole)."""

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        item = super().__getitem__(index)
        item["index"] = torch.tensor(index)
        return item


def read_generated_pairs(path: str, rng: np.random.Generator) -> dict[str, Any]:
    """`generate.py`'s `duplication_pairs.csv` as one `PairSet` per split, with negatives added
    (panel A of a pair with panel B of a pair from another source photo of the same split)."""
    import csv
    from pathlib import Path

    from datamodules.io import read_image, read_mask
    from datamodules.records import LayoutError
    from synthesis.pair_set import PairSet, PanelPair

    folder = Path(path).parent
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    missing = {"panel_a", "panel_b", "mask_a", "mask_b", "operations", "source", "split"} - set(rows[0] if rows else {})
    if not rows or missing:
        raise LayoutError(f"{path}: not a generate.py duplication_pairs.csv (no rows, or no {sorted(missing)})")
    sets: dict[str, Any] = {}
    for split in ("train", "val", "test"):
        chosen = [r for r in rows if r["split"] == split]
        if not chosen:
            raise LayoutError(f"{path}: no pairs in split {split!r}; generate more panels")
        panels = {r[key]: read_image(folder / r[key]) for r in chosen for key in ("panel_a", "panel_b")}
        pairs = [
            PanelPair(
                r["panel_a"],
                r["panel_b"],
                1,
                tuple(r["operations"].split(";")),
                r.get("scope") or "generated",
                r["source"],
                read_mask(folder / r["mask_a"]),
                read_mask(folder / r["mask_b"]),
            )
            for r in chosen
        ]
        for r in chosen:
            others = [o for o in chosen if o["source"] != r["source"]]
            if others:
                other = others[int(rng.integers(len(others)))]
                pairs.append(
                    PanelPair(r["panel_a"], other["panel_b"], 0, (), "other_photo", f"{r['source']}|{other['source']}")
                )
        sets[split] = PairSet(panels, pairs)
    return sets
