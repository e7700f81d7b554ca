"""Panel pairs for learned pair detectors: generate.py's `duplication_pairs.csv` read per split
with pairs that share nothing added (synthesis/pair_set.py), and the batches a pair network trains
on (datamodules/pairs.py)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from datamodules.io import write_image
from datamodules.pairs import PairDataModule
from synthesis.duplication import global_duplication
from synthesis.pair_set import generated_pair_splits, pair_splits

COLUMNS = ["pair", "panel_a", "panel_b", "mask_a", "mask_b", "scope", "operations", "categories", "source", "split"]


@pytest.fixture
def generated(tmp_path):
    """A duplication_pairs.csv as generate.py writes it: two sources per split, one pair each."""
    rng = np.random.default_rng(0)
    rows = []
    for split in ("train", "val", "test"):
        for source in ("s1", "s2"):
            panel = rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)
            pair = global_duplication(panel, rng, geometric="hflip", parameters=["brightness"])
            stem = f"{split}_{source}"
            for name, image in ((f"{stem}_a.png", pair.panel_a), (f"{stem}_b.png", pair.panel_b)):
                write_image(tmp_path / name, image)
            write_image(tmp_path / f"{stem}_m.png", pair.mask_a.astype(np.uint8) * 255)
            rows.append(
                {
                    "pair": stem,
                    "panel_a": f"{stem}_a.png",
                    "panel_b": f"{stem}_b.png",
                    "mask_a": f"{stem}_m.png",
                    "mask_b": f"{stem}_m.png",
                    "scope": "global",
                    "operations": "hflip;brightness",
                    "categories": "flip;parameter",
                    "source": source,
                    "split": split,
                }
            )
    with (tmp_path / "duplication_pairs.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return tmp_path / "duplication_pairs.csv"


def test_generated_pairs_keep_their_split_and_gain_negatives_across_sources(generated):
    sets = generated_pair_splits(str(generated), np.random.default_rng(0))
    assert set(sets) == {"train", "val", "test"}
    for pair_set in sets.values():
        positives = [p for p in pair_set.pairs if p.label == 1]
        negatives = [p for p in pair_set.pairs if p.label == 0]
        assert len(positives) == len(negatives) == 2
        assert all(p.operations == ("hflip", "brightness") and p.mask_a.all() for p in positives)
        for negative in negatives:  # A of one source with B of the other: nothing shared
            assert negative.id_a.split("_")[1] != negative.id_b.split("_")[1]


def test_a_pair_batch_holds_both_panels_masks_and_the_operation_answers(generated):
    data = PairDataModule({"size": 32, "mode": "resize"}, pair_splits(pairs_csv=str(generated)), batch_size=8)
    data.setup()
    batch = next(iter(data.test_dataloader()))
    assert batch["image_a"].shape == batch["image_b"].shape == (4, 3, 32, 32)
    assert batch["mask_a"].shape == (4, 1, 32, 32) and batch["label"].tolist() == [1, 1, 0, 0]
    # CMO order: direct, scaling, rotation, flip, parameter
    assert batch["operations"][0].tolist() == [0, 0, 0, 1, 1] and batch["has_operations"].tolist() == [1, 1, 0, 0]
    assert batch["mask_b"][2].sum() == 0 and batch["mask_b"][0].mean() == 1
    assert [r.group for r in data.splits["test"]] == ["global", "global", "other_photo", "other_photo"]


def test_a_file_that_is_not_generate_py_pairs_is_refused(tmp_path):
    (tmp_path / "pairs.csv").write_text("path_a,path_b\na.png,b.png\n")
    with pytest.raises(ValueError, match="not a generate.py duplication_pairs.csv"):
        generated_pair_splits(str(tmp_path / "pairs.csv"), np.random.default_rng(0))


def test_training_pairs_swap_at_random_and_alike_with_any_number_of_loader_workers(generated):
    """Each pair's A and B are exchanged at random in training; one `seed=` draws the same
    exchanges whether one process or two loader workers make the batches."""
    import torch

    def one_epoch(workers: int) -> torch.Tensor:
        data = PairDataModule(
            {"size": 32, "mode": "resize"}, pair_splits(pairs_csv=str(generated)), batch_size=2, num_workers=workers
        )
        data.setup()
        torch.manual_seed(3)
        batches = [batch for _ in range(4) for batch in data.train_dataloader()]
        return torch.cat([torch.cat([b["image_a"], b["image_b"]], 1) for b in batches])

    alone, with_workers = one_epoch(0), one_epoch(2)
    assert torch.equal(alone, with_workers)
    firsts = {tuple(pair[:3, 0, 0].tolist()) for pair in alone}  # A's corner over 16 draws of 4 pairs
    assert len(firsts) > 2  # unswapped, every A is one of the two sources' A panels
