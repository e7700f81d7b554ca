"""The same `seed=` trains on the same draws with any number of loader workers. Each worker used to
draw its augmentations from its own stream, so the same run with `data.num_workers=0` and `=4`
trained on other crops, flips and pseudo-fakes (a recipe's calibrated threshold moved from 0.52 to
0.91). Every draw now carries a seed drawn in the main process."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.classification import ManifestDataModule
from datamodules.datasets import DrawSeeded, SeededDraws
from datamodules.io import write_image
from datamodules.records import Record, write_manifest


def random_module(tmp_path, workers: int, **options) -> ManifestDataModule:
    """Textured images, and every random lever on: crops, flips, noise, pseudo-fakes, balance."""
    rng = np.random.default_rng(0)
    rows = [
        Record(str(tmp_path / f"{s}{i}.png"), i % 2, source=f"{s}{i}", split=s, category=["a", "b"][i % 3 == 0])
        for s in ("train", "val", "test")
        for i in range(12)
    ]
    for row in rows:
        write_image(row.path, rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
    write_manifest(rows, tmp_path / "m.csv")
    module = ManifestDataModule(
        manifest=str(tmp_path / "m.csv"),
        preprocess=options.pop("preprocess", {"size": 24, "mode": "center_crop"}),
        batch_size=4,
        num_workers=workers,
        augment={"hflip": 0.5, "noise": 0.5},
        pseudo_fakes=0.5,
        **options,
    )
    module.setup()
    return module


def one_epoch(module: ManifestDataModule) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two epochs' draws (and validation passes), then what the model would draw next. The model
    draws between steps (dropout), while loader workers fetch batches ahead."""
    torch.manual_seed(7)
    train, batches = module.train_dataloader(), []
    for _ in range(2):
        for batch in train:
            batches.append(batch)
            torch.rand(8)  # a training step's dropout
    for _ in range(2):
        list(module.val_dataloader())
    return torch.cat([b["image"] for b in batches]), torch.cat([b["label"] for b in batches]), torch.rand(4)


@pytest.mark.parametrize(
    "options", [{}, {"balanced": "category"}, {"preprocess": {"mode": "none"}}], ids=["shuffled", "balanced", "whole"]
)
def test_one_seed_gives_the_same_training_draws_with_and_without_loader_workers(tmp_path, options):
    images, labels, model_stream = one_epoch(random_module(tmp_path, workers=0, **options))
    with_workers = one_epoch(random_module(tmp_path, workers=2, **options))
    assert torch.equal(images, with_workers[0]) and torch.equal(labels, with_workers[1])
    assert torch.equal(model_stream, with_workers[2])  # the loaders took the same from torch's generator
    again = one_epoch(random_module(tmp_path, workers=0, **options))
    assert torch.equal(images, again[0])


def test_the_draws_are_random_still_another_seed_gives_other_ones(tmp_path):
    module = random_module(tmp_path, workers=0)
    torch.manual_seed(7)
    first = torch.cat([b["image"] for b in module.train_dataloader()])
    torch.manual_seed(8)
    other = torch.cat([b["image"] for b in module.train_dataloader()])
    assert not torch.equal(first, other)


def test_making_a_sample_leaves_the_main_process_stream_where_it_was():
    class Noisy(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: int) -> dict:
            return {"image": torch.rand(3), "index": index}

    torch.manual_seed(0)
    expected = torch.rand(5)
    torch.manual_seed(0)
    sample = DrawSeeded(Noisy())[(2, 123)]
    assert torch.equal(torch.rand(5), expected)
    assert torch.equal(sample["image"], DrawSeeded(Noisy())[(2, 123)]["image"])  # the draw's seed decides
    assert not torch.equal(sample["image"], DrawSeeded(Noisy())[(2, 124)]["image"])


def test_seeded_draws_pair_every_index_and_every_batch_with_a_seed():
    singles = list(SeededDraws([3, 1, 2], torch.Generator().manual_seed(0)))
    batches = list(SeededDraws([[0, 1], [2]], torch.Generator()))
    assert [index for index, _ in singles] == [3, 1, 2] and len({seed for _, seed in singles}) == 3
    assert [[index for index, _ in batch] for batch in batches] == [[0, 1], [2]]
    assert len(SeededDraws([[0, 1], [2]], torch.Generator())) == 2


def test_loader_workers_are_capped_at_the_cpus_this_process_may_use():
    import os

    from datamodules.datasets import loader_workers

    cpus = len(os.sched_getaffinity(0))
    assert loader_workers(cpus + 6) == cpus and loader_workers(0) == 0 and loader_workers(1) == 1


def test_an_exif_turned_photo_is_batched_with_images_of_its_upright_size(tmp_path):
    """Whole images are batched by size; a JPEG stored 300 x 100 with orientation 6 (turned a quarter)
    reads as 100 x 300, and batching it by its stored size stacked it with 300 x 100 images."""
    from PIL import Image

    from datamodules.datasets import image_size
    from datamodules.io import read_image

    turned = Image.fromarray(np.zeros((100, 300, 3), np.uint8))
    exif = turned.getexif()
    exif[0x0112] = 6
    turned.save(tmp_path / "turned.jpg", exif=exif)
    Image.fromarray(np.zeros((100, 300, 3), np.uint8)).save(tmp_path / "plain.jpg")
    height, width = read_image(tmp_path / "turned.jpg").shape[:2]
    assert image_size(str(tmp_path / "turned.jpg")) == (width, height) == (100, 300)
    assert image_size(str(tmp_path / "plain.jpg")) == (300, 100)
