"""Patches labelled by the processing chain they went through: data for training a noise
fingerprint (phase 1 of `trufor`; Noiseprint, Cozzolino and Verdoliva 2019).

Noiseprint learns from pairs of patches with the same or a different camera-and-processing
history. We make the histories ourselves from any genuine photos: each sample is a crop passed
through one chain (JPEG at a quality, resampling by a factor with a kernel, denoising, blur, or
nothing), labelled by the chain's index; generated re-renders in the data (records whose `group`
starts with a `rerender_groups` prefix) form one more chain, taken as they are.

Chain names: `genuine`, `jpeg<quality>`, `resize<factor>_<kernel>` (kernel: nearest, area,
bilinear, bicubic, lanczos), `median<k>`, `bilateral`, `blur<sigma>`.
"""

from __future__ import annotations

from typing import Any, Sequence

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

from datamodules.classification import ManifestDataModule
from datamodules.datasets import collate, seeded_training_draws, worker_base_generator
from datamodules.io import DEFAULT_MAX_PIXELS, ImageReadError, apply_chain, read_image
from datamodules.records import Record
from datamodules.transforms import to_tensor
from imageops import RESAMPLING_KERNELS

DEFAULT_CHAINS = (
    "genuine",
    "jpeg90",
    "jpeg75",
    "jpeg60",
    "resize0.75_bicubic",
    "resize1.5_bilinear",
    "resize0.5_area",
    "median3",
    "bilateral",
    "blur1.0",
)
KERNELS = dict(RESAMPLING_KERNELS)
__all__ = ["DEFAULT_CHAINS", "KERNELS", "apply_chain", "crop", "ChainPatchDataset", "ChainPatchDataModule"]
RERENDER = "rerender"


def crop(image: np.ndarray, size: int, position: tuple[float, float] | None = None) -> np.ndarray:
    """A `size` crop at a relative `position` (row, column fractions in [0, 1]; centred without);
    smaller images are reflected up to size."""
    height, width = image.shape[:2]
    if height < size or width < size:
        image = cv2.copyMakeBorder(image, 0, max(0, size - height), 0, max(0, size - width), cv2.BORDER_REFLECT)
        height, width = image.shape[:2]
    row, column = position if position is not None else (0.5, 0.5)
    top, left = round(row * (height - size)), round(column * (width - size))
    return image[top : top + size, left : left + size]


class ChainPatchDataset(Dataset):
    """Item i: one crop of photo i through several chains, as `views` images:
    {"image": V x 3 x size x size, "chain": V, "label": V, "index", "path"} (`collate_views` makes
    a batch of all views, with each image's `photo`).

    Views of one item show the same content under different processing: for the contrastive
    loss they are the hardest negatives, while positives come from other photos. Training draws
    the crop position and `views` distinct chains at random (all chains when `views` is None);
    evaluation is deterministic (centred crop, every chain). In training every photo gives
    `crops_per_photo` items per epoch (a few photos would otherwise make epochs of a few steps,
    each followed by a validation). Genuine photos are cropped to twice
    `size` before the chain so resampling keeps enough pixels; `label` is 1 for every chain but
    `genuine`. Re-render records are one view with the re-render chain.
    """

    def __init__(
        self,
        records: Sequence[Record],
        chains: Sequence[str],
        size: int,
        train: bool,
        rerender_groups: Sequence[str] = (),
        seed: int = 0,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        views: int | None = None,
        crops_per_photo: int = 1,
    ) -> None:
        self.crops_per_photo = max(1, int(crops_per_photo)) if train else 1
        self.records, self.chains, self.size, self.train = list(records), list(chains), int(size), train
        self.rerender_groups, self.seed, self.max_pixels = tuple(rerender_groups), seed, max_pixels
        self.views = len(self.chains) if views is None else max(1, min(int(views), len(self.chains)))
        self.chain_index = {name: i for i, name in enumerate(self.chains)}
        if any(self._is_rerender(r) for r in self.records) and RERENDER not in self.chain_index:
            self.chain_index[RERENDER] = len(self.chains)

    def _is_rerender(self, record: Record) -> bool:
        return bool(self.rerender_groups) and (record.group or "").startswith(self.rerender_groups)

    def __len__(self) -> int:
        return len(self.records) * self.crops_per_photo

    def __getitem__(self, index: int) -> dict[str, Any]:
        index %= len(self.records)
        record = self.records[index]
        rng = np.random.default_rng(int(torch.randint(0, 2**31, ())) if self.train else self.seed + index)
        try:
            image = read_image(record.path, self.max_pixels)
        except ImageReadError as error:
            return {"index": index, "path": record.path, "error": error.reason}
        position = tuple(rng.random(2)) if self.train else None
        if self._is_rerender(record):
            patches, chains = [crop(image, self.size, position)], [RERENDER]
        else:
            chains = (
                [self.chains[i] for i in sorted(rng.choice(len(self.chains), self.views, replace=False))]
                if self.train
                else self.chains
            )
            source = crop(image, 2 * self.size, position)
            patches = [crop(apply_chain(source, chain), self.size, position) for chain in chains]
        return {
            "image": torch.stack([to_tensor(np.ascontiguousarray(p)) for p in patches]),
            "chain": torch.tensor([self.chain_index[c] for c in chains]),
            "label": torch.tensor([int(c != "genuine") for c in chains]),
            "index": index,
            "path": record.path,
        }


def collate_views(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch of every view of every readable item: `image` (sum of V) x 3 x H x W, with per image
    its `chain`, `label`, `photo` (the item's index) and `index`/`path` (the item's, repeated)."""
    batch = collate([s for s in samples if "error" in s])  # logs and lists unreadable files
    good = [s for s in samples if "error" not in s]
    if not good:
        return batch
    views = [len(s["chain"]) for s in good]
    index = torch.tensor([s["index"] for s in good]).repeat_interleave(torch.tensor(views))
    return {
        "image": torch.cat([s["image"] for s in good]),
        "chain": torch.cat([s["chain"] for s in good]),
        "label": torch.cat([s["label"] for s in good]),
        "photo": index,
        "index": index,
        "path": [s["path"] for s, v in zip(good, views) for _ in range(v)],
        "errors": batch["errors"],
    }


class ChainPatchDataModule(ManifestDataModule):
    """Phase-1 data from a manifest of photos (by default the bundled photographs, generated on
    first use): genuine records pass through `chains`; records of `rerender_groups` are a chain of
    their own; other manipulated records are left out (their regions mix two chains)."""

    def __init__(
        self,
        chains: Sequence[str] = DEFAULT_CHAINS,
        rerender_groups: Sequence[str] = (RERENDER,),
        views: int | None = None,
        crops_per_photo: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        for chain in chains:  # fail at configuration time, not in a worker
            apply_chain(np.zeros((8, 8, 3), np.uint8), chain)
        self.chains, self.rerender_groups, self.views = list(chains), tuple(rerender_groups), views
        self.crops_per_photo = crops_per_photo

    def load_records(self) -> list[Record]:
        records = super().load_records()
        keep = [r for r in records if r.label == 0 or (r.group or "").startswith(self.rerender_groups or ("\0",))]
        if not any(r.label == 0 for r in keep):
            raise ValueError(f"{self.manifest}: no genuine photo to build processing chains from")
        return keep

    def check_learnable(self, localizer: bool) -> None:
        """The processing chains made from genuine photos are the classes here, so genuine photos
        alone teach the fingerprint (`load_records` refuses a manifest without them)."""

    def _loader(self, split: str, train: bool):  # type: ignore[override]
        from torch.utils.data import DataLoader

        dataset = ChainPatchDataset(
            self.splits[split],
            self.chains,
            int(self.preprocess.size),
            train,
            self.rerender_groups,
            self.seed,
            views=self.views,
            crops_per_photo=self.crops_per_photo,
        )
        sampler = None
        if train:  # each draw made from its own seed, whichever worker makes it
            dataset, sampler = seeded_training_draws(dataset, self.training_draws())
        return DataLoader(
            dataset,
            batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=sampler,
            generator=worker_base_generator(),
            drop_last=train and len(dataset) > self.batch_size,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            collate_fn=collate_views,
        )
