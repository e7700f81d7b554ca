"""LightningDataModules for image classification: from a manifest or from a labelled folder tree."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import lightning as L
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, RandomSampler, WeightedRandomSampler

from datamodules.datasets import (
    DrawSeeded,
    ImageDataset,
    NoiseReinjectedFakes,
    ResumableDraws,
    SameSizeBatches,
    SeededDraws,
    check_batch_size,
    check_genuine_noise_model,
    check_rate,
    collate,
    image_size,
    loader_workers,
    worker_base_generator,
)
from datamodules.layouts import read_layout
from datamodules.noise_matching import NoiseMatchedClasses
from datamodules.preprocess import Preprocess
from datamodules.records import SPLITS, LayoutError, Record, assign_splits, read_manifest, scan_folder
from datamodules.transforms import DEFAULT_AUGMENT, build_transform, check_augment

log = logging.getLogger(__name__)


class RecordsDataModule(ResumableDraws, L.LightningDataModule, ABC):
    """Splits records by source, builds each split's pipeline from the detector's preprocessing.

    Subclasses only say where records come from (`load_records`). Records that carry a `split`
    keep it; the others are split by `split_fractions`, keeping every fake of one source together.
    `with_groups` adds each record's `group` (generator or operation, "" when unknown) to batches.
    `pseudo_fakes` turns that fraction of the genuine training draws into fakes by re-injecting
    noise (`datasets.NoiseReinjectedFakes`), a lever against learning one generator's trace;
    `noise_match` raises that fraction of training draws to the noise level of a draw of the other
    class of their category (`noise_matching.NoiseMatchedClasses`), so grain says nothing of the label.
    """

    def __init__(
        self,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 2,
        split_fractions: Sequence[float] = (0.8, 0.1, 0.1),
        seed: int = 0,
        augment: Mapping[str, Any] | None = None,
        balanced: bool | str = False,
        with_groups: bool = False,
        pseudo_fakes: float = 0.0,
        pseudo_fake_noise: Sequence[float] = (0.02, 0.1),
        pseudo_fake_skip_categories: Sequence[str] = (),
        genuine_noise: float = 0.0,
        genuine_noise_std: Sequence[float] | None = None,
        genuine_noise_categories: Sequence[str] = (),
        genuine_noise_model: str = "gaussian",
        noise_match: float = 0.0,
        noise_match_categories: Sequence[str] = (),
    ) -> None:
        super().__init__()
        balanced_by(balanced)  # a mistyped value fails here, not after the data is read
        self.with_groups = with_groups
        self.preprocess = Preprocess.from_config(preprocess)
        self.batch_size = check_batch_size("batch_size", batch_size)
        self.eval_batch_size = check_batch_size("eval_batch_size", eval_batch_size) or batch_size
        self.num_workers = loader_workers(num_workers)
        self.split_fractions = tuple(split_fractions)
        self.seed = seed
        self.augment = check_augment(augment)  # a mistyped option fails here, not once training starts
        self.balanced = balanced
        self.pseudo_fakes = check_rate("pseudo-fake rate", pseudo_fakes)  # fails here, not at fit
        self.pseudo_fake_noise = tuple(pseudo_fake_noise)
        self.pseudo_fake_skip_categories = tuple(pseudo_fake_skip_categories or ())
        self.genuine_noise = check_rate("genuine noise rate", genuine_noise)
        self.genuine_noise_std = tuple(genuine_noise_std) if genuine_noise_std is not None else None
        self.genuine_noise_categories = tuple(genuine_noise_categories or ())
        self.genuine_noise_model = check_genuine_noise_model(genuine_noise_model)  # fails here, not at fit
        self.noise_match = check_rate("noise-matching rate", noise_match)
        self.noise_match_categories = tuple(noise_match_categories or ())
        self.splits: dict[str, list[Record]] = {}

    @abstractmethod
    def load_records(self) -> list[Record]:
        """Where the records come from (a manifest, a folder tree, a public layout)."""

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        loaded = self.load_records()
        records = assign_splits(loaded, self.split_fractions, self.seed)
        self.splits = {name: [r for r in records if r.split == name] for name in SPLITS}
        unlabelled = sum(r.label is None for r in records)
        if unlabelled:
            raise LayoutError(f"{unlabelled} of {len(records)} records have no label; training needs labels")
        for name, split in self.splits.items():
            labels = {r.label for r in split}
            if not split and all(r.split is not None for r in loaded):
                raise LayoutError(
                    f"the {name} split is empty: every record came with its split and none with {name}; "
                    f"mark some as {name}, or leave their split empty for split_fractions to assign"
                )
            if not split:
                raise LayoutError(f"the {name} split is empty: add images or change split_fractions")
            if labels != {0, 1}:
                log.warning(
                    "the %s split holds only label(s) %s: threshold-free metrics will be NaN", name, sorted(labels)
                )
        log.info("splits: %s", {name: len(split) for name, split in self.splits.items()})

    def check_learnable(self, localizer: bool) -> None:
        """Refuse a train split a detector cannot learn from, before an epoch is spent on it: a
        classifier needs genuine and fake images (or pseudo-fakes made from the genuine ones), a
        localizer manipulated images with their masks. Training-free detectors never ask."""
        labels = {r.label for r in self.splits.get("train", [])}
        if localizer and 1 not in labels:
            raise LayoutError(
                "the train split holds no manipulated image, so a localizer has nothing to learn: add "
                "manipulated images with masks (genuine images alone calibrate only training-free localizers)"
            )
        if not localizer and labels != {0, 1} and not (labels == {0} and self.pseudo_fakes > 0):
            only = "genuine" if labels == {0} else "fake"
            raise LayoutError(
                f"the train split holds {only} images only, so a classifier has nothing to tell apart: add "
                f"{'fake' if only == 'genuine' else 'genuine'} images"
                + (" or make pseudo-fakes from the genuine ones (data.pseudo_fakes)" if only == "genuine" else "")
            )

    def make_dataset(self, records: list[Record], transform: Any) -> Dataset:
        """The Dataset of one split; subclasses return other sample shapes (e.g. localization)."""
        if self.with_groups:
            return GroupedImageDataset(records, transform)
        return ImageDataset(records, transform)

    def split_preprocess(self, train: bool) -> Preprocess:
        """How the images of a training or an evaluation split are brought to the network."""
        return self.preprocess

    def _loader(self, split: str, train: bool) -> DataLoader:
        preprocess = self.split_preprocess(train)
        transform = build_transform(preprocess, train, self.augment, seed=augment_seed() if train else None)
        dataset = self.make_dataset(self.splits[split], transform)
        if train and self.noise_match > 0:  # before the pseudo-fakes: their noise is not a class's level
            dataset = NoiseMatchedClasses(dataset, self.noise_match, self.noise_match_categories)
        if train and (self.pseudo_fakes > 0 or self.genuine_noise > 0):
            dataset = NoiseReinjectedFakes(
                dataset,
                self.pseudo_fakes,
                self.pseudo_fake_noise,
                skip_categories=self.pseudo_fake_skip_categories,
                genuine_noise=self.genuine_noise,
                genuine_noise_std=self.genuine_noise_std,
                genuine_noise_categories=self.genuine_noise_categories,
                genuine_noise_model=self.genuine_noise_model,
            )
        sampler, draws = None, self.training_draws() if train else None  # orders epochs and seeds draws
        if train and balanced_by(self.balanced):
            weights = balanced_weights(dataset.records, balanced_by(self.balanced))
            sampler = WeightedRandomSampler(weights, num_samples=len(weights), replacement=True, generator=draws)
        batch_size = self.batch_size if train else self.eval_batch_size
        batches = None
        if not preprocess.fixed_size and batch_size != 1:
            batches, batch_size = self.whole_image_batches(dataset, batch_size, train, sampler, draws), 1
        if train:  # each draw made from its own seed, whichever worker makes it
            if batches is None:
                sampler = SeededDraws(sampler or RandomSampler(dataset, generator=draws), draws)
            else:
                batches = SeededDraws(batches, draws)
            dataset = DrawSeeded(dataset)
        return DataLoader(
            dataset,
            **(
                {"batch_sampler": batches}
                if batches is not None
                else {"batch_size": batch_size, "shuffle": False, "sampler": sampler}
            ),
            drop_last=False,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            collate_fn=collate,
            pin_memory=False,
            generator=worker_base_generator(),
        )

    def whole_image_batches(
        self, dataset: Dataset, batch_size: int, train: bool, sampler: Any, generator: torch.Generator | None = None
    ) -> SameSizeBatches | None:
        """Preprocess mode `none` keeps each image's own size, and only images of one size stack:
        batches of images that share a size (`SameSizeBatches`), or one image per batch (None) when
        training resizes at random (`augment.rescale`), draws by weight (`balanced`) or runs on
        several processes."""
        rescaled = train and float({**DEFAULT_AUGMENT, **self.augment}["rescale"]) > 0
        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if rescaled or sampler is not None or distributed:
            log.info("preprocess mode 'none': one image per batch")
            return None
        return SameSizeBatches([image_size(r.path) for r in dataset.records], batch_size, train, generator)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)


def balanced_by(balanced: bool | str | None) -> str | None:
    """`data.balanced`: false (plain shuffling), true or `label` (each class drawn half the time),
    `group` (each class half the time and, within a class, each `group` equally often) or
    `category` (likewise per `category`: a kind of image with few panels is not drowned out)."""
    if balanced in (False, None, "false", "none"):
        return None
    if balanced in (True, "true", "label"):
        return "label"
    if balanced in ("group", "category"):
        return balanced
    raise ValueError(f"data.balanced must be false, true (= label), group or category, got {balanced!r}")


def balanced_weights(records: Sequence[Record], by: str) -> list[float]:
    """Sampling weights that give every label (and with by=`group` every group of a label) an equal
    share of the draws. A generator that made more fakes then no longer dominates what a detector
    learns, which matters when the families are to be learned as one class."""

    def key(record: Record) -> tuple:
        if by == "label":
            return (record.label,)
        return (record.label, (record.group if by == "group" else record.category) or "")

    counts: dict[tuple, int] = {}
    for record in records:
        counts[key(record)] = counts.get(key(record), 0) + 1
    per_label: dict[Any, int] = {}
    for k in counts:
        per_label[k[0]] = per_label.get(k[0], 0) + 1  # how many keys share the label
    return [1.0 / (len(per_label) * per_label[record.label] * counts[key(record)]) for record in records]


def distributed_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def augment_seed() -> int:
    """A seed for the training augmentations, drawn from torch's generator (which `seed=` seeds) and
    distinct per distributed rank. albumentations draws from its own generator, seeded from the
    operating system unless it is given a seed, which would make runs irreproducible (training
    seeds it again for every draw: `datasets.DrawSeeded`)."""
    return (int(torch.randint(2**31 - 1, ()).item()) + 1_000_003 * distributed_rank()) % 2**32


class ManifestDataModule(RecordsDataModule):
    """Records from a manifest (columns: docs/architecture.md, "Data contracts").

    `create` is a callable `create(folder, seed=, split_fractions=)` that writes `folder/manifest.csv`
    when it is missing, or brings one an earlier version made up to date: it is called before every
    run. The default data config hands in
    `synthesis.embedded.ensure_embedded_manifest` as a Hydra `_partial_`, so this module needs no
    knowledge of how datasets are generated.
    """

    def __init__(self, manifest: str, create: Callable[..., Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manifest = Path(manifest)
        if create is not None and not callable(create):
            raise ValueError(
                f"data.create must be null or a dataset maker (a `_partial_: true` config with a "
                f"`_target_`), got {create!r}"
            )
        self.create = create

    def prepare_data(self) -> None:
        if self.create is not None:
            if not self.manifest.is_file():
                log.info("generating a dataset into %s", self.manifest.parent)
            self.create(self.manifest.parent, seed=self.seed, split_fractions=self.split_fractions)

    def load_records(self) -> list[Record]:
        return read_manifest(self.manifest)


class FolderDataModule(RecordsDataModule):
    """Records from `0_real`/`1_fake` (or `real`/`fake`) folders at any depth below `root`."""

    def __init__(self, root: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = Path(root)

    def load_records(self) -> list[Record]:
        return scan_folder(self.root)


class GroupedImageDataset(ImageDataset):
    """ImageDataset whose samples also carry the record's `group` (for per-generator breakdowns)."""

    def __getitem__(self, index: int) -> dict[str, Any]:
        sample = super().__getitem__(index)
        if "error" not in sample:
            sample["group"] = self.records[index].group or ""
        return sample


class LayoutDataModule(RecordsDataModule):
    """Records from any published layout (`datamodules.layouts`): a manifest, `0_real`/`1_fake`
    trees, GenImage, FraudBench, IMDL folders or JSON lists, CASIA/MVSS lists, THEMIS triplets.

    `layout` is `auto` (detected, with an error listing the layouts when it cannot tell) or a name.
    GenImage ships `train` and `val` only and its `val` is the benchmark's test set, so when a
    layout has val but no test, val becomes test and a validation split is carved from train by
    source; a layout with train and test but no val has its validation carved the same way (IMDL
    lists, CASIA/MVSS lists). `ignore_splits` re-splits everything by `split_fractions` instead.

    `exclude_groups` drops records of those groups (e.g. the duplication panels of a generated set,
    which only make sense as pairs); a group no record has is warned of, as a likely typo, unless it
    is one of `default_exclusions` (a config's default, made for data that may not have it).
    `test_groups` sets up cross-generator evaluation: fakes of those groups are tested on, all other
    fakes trained and validated on, never both (genuine images are split as usual, so no source
    straddles the splits).
    """

    default_exclusions: frozenset[str] = frozenset()

    def __init__(
        self,
        root: str,
        layout: str = "auto",
        ignore_splits: bool = False,
        exclude_groups: Sequence[str] = (),
        test_groups: Sequence[str] = (),
        made_by: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.root = Path(root)
        self.made_by = made_by  # the command that makes `root`, said when it is missing
        self.layout = layout
        self.ignore_splits = ignore_splits
        self.exclude_groups = set(exclude_groups or ())
        self.test_groups = set(test_groups or ())

    def load_records(self) -> list[Record]:
        records = self._split_records()
        absent = self.exclude_groups - {r.group for r in records} - self.default_exclusions
        if absent:
            log.warning(
                "data.exclude_groups names group(s) no image of %s has, so nothing is left out for them: %s "
                "(groups there: %s)",
                self.root,
                sorted(absent),
                sorted({r.group for r in records if r.group}) or "none",
            )
        records = [r for r in records if r.group not in self.exclude_groups]
        if not self.test_groups:
            return records
        known = {r.group for r in records if r.label == 1}
        if not self.test_groups & known:
            raise LayoutError(
                f"test_groups {sorted(self.test_groups)} match no fake; groups: {sorted(map(str, known))}"
            )
        records = assign_splits(records, self.split_fractions, self.seed)
        return [r for r in records if r.label != 1 or (r.group in self.test_groups) == (r.split == "test")]

    def _split_records(self) -> list[Record]:
        if self.made_by and not self.root.exists():
            raise LayoutError(f"{self.root} does not exist: make it first with `{self.made_by}`")
        records = read_layout(self.root, self.layout)
        if self.ignore_splits:
            return [replace(r, split=None) for r in records]
        given = {r.split for r in records}
        if "val" in given and "test" not in given:
            log.info(
                "%s has train/val splits but no test: its val split is used as test, and validation "
                "is carved from train by source",
                self.root,
            )
            records = [replace(r, split="test") if r.split == "val" else r for r in records]
        elif "test" in given and "train" in given and "val" not in given:
            log.info("%s has train/test splits but no val: validation is carved from train by source", self.root)
        else:
            return records
        train, val_fraction = self.split_fractions[0], self.split_fractions[1]
        carve = (train / (train + val_fraction), val_fraction / (train + val_fraction), 0.0)
        pool = [replace(r, split=None) for r in records if r.split in ("train", None)]
        return [r for r in records if r.split == "test"] + assign_splits(pool, carve, self.seed)
