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
from datamodules.io import DEFAULT_MAX_PIXELS, RESAMPLING_KERNELS, ImageReadError, apply_chain, read_image
from datamodules.records import Record
from datamodules.transforms import to_tensor

DEFAULT_CHAINS = ("genuine", "jpeg90", "jpeg75", "jpeg60", "resize0.75_bicubic", "resize1.5_bilinear",
                  "resize0.5_area", "median3", "bilateral", "blur1.0")
KERNELS = {name: getattr(cv2, flag) for name, flag in RESAMPLING_KERNELS.items()}
__all__ = ["DEFAULT_CHAINS", "KERNELS", "apply_chain", "crop", "ChainPatchDataset", "ChainPatchDataModule"]
RERENDER = "rerender"


def crop(image: np.ndarray, size: int, rng: np.random.Generator | None) -> np.ndarray:
    """A `size` crop (random with `rng`, centred without); smaller images are reflected up to size."""
    height, width = image.shape[:2]
    if height < size or width < size:
        image = cv2.copyMakeBorder(image, 0, max(0, size - height), 0, max(0, size - width), cv2.BORDER_REFLECT)
        height, width = image.shape[:2]
    top = int(rng.integers(0, height - size + 1)) if rng is not None else (height - size) // 2
    left = int(rng.integers(0, width - size + 1)) if rng is not None else (width - size) // 2
    return image[top:top + size, left:left + size]


class ChainPatchDataset(Dataset):
    """Sample i: a `size` crop of a photo after one chain: {"image", "chain", "label", "index", "path"}.

    Training draws the photo's crop and the chain at random (a different pair every epoch);
    evaluation is deterministic (chain `index % len(chains)`, centred crop). Genuine photos are
    cropped to twice `size` before the chain so resampling keeps enough pixels; `label` is 1 for
    every chain but `genuine`. Re-render records always carry the re-render chain.
    """

    def __init__(self, records: Sequence[Record], chains: Sequence[str], size: int, train: bool,
                 rerender_groups: Sequence[str] = (), seed: int = 0, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        self.records, self.chains, self.size, self.train = list(records), list(chains), int(size), train
        self.rerender_groups, self.seed, self.max_pixels = tuple(rerender_groups), seed, max_pixels
        self.chain_index = {name: i for i, name in enumerate(self.chains)}
        if any(self._is_rerender(r) for r in self.records) and RERENDER not in self.chain_index:
            self.chain_index[RERENDER] = len(self.chains)

    def _is_rerender(self, record: Record) -> bool:
        return bool(self.rerender_groups) and (record.group or "").startswith(self.rerender_groups)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        rng = np.random.default_rng(int(torch.randint(0, 2**31, ())) if self.train else self.seed + index)
        try:
            image = read_image(record.path, self.max_pixels)
        except ImageReadError as error:
            return {"index": index, "path": record.path, "error": error.reason}
        if self._is_rerender(record):
            chain = RERENDER
        else:
            chain = self.chains[int(rng.integers(len(self.chains)))] if self.train else \
                self.chains[index % len(self.chains)]
            image = apply_chain(crop(image, 2 * self.size, rng if self.train else None), chain)
        patch = crop(image, self.size, rng if self.train else None)
        return {"image": to_tensor(np.ascontiguousarray(patch)), "chain": self.chain_index[chain],
                "label": int(chain != "genuine"), "index": index, "path": record.path}


class ChainPatchDataModule(ManifestDataModule):
    """Phase-1 data from a manifest of photos (by default the bundled photographs, generated on
    first use): genuine records pass through `chains`; records of `rerender_groups` are a chain of
    their own; other manipulated records are left out (their regions mix two chains)."""

    def __init__(self, chains: Sequence[str] = DEFAULT_CHAINS, rerender_groups: Sequence[str] = (RERENDER,),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for chain in chains:  # fail at configuration time, not in a worker
            apply_chain(np.zeros((8, 8, 3), np.uint8), chain)
        self.chains, self.rerender_groups = list(chains), tuple(rerender_groups)

    def load_records(self) -> list[Record]:
        records = super().load_records()
        keep = [r for r in records if r.label == 0 or (r.group or "").startswith(self.rerender_groups or ("\0",))]
        if not any(r.label == 0 for r in keep):
            raise ValueError(f"{self.manifest}: no genuine photo to build processing chains from")
        return keep

    def _loader(self, split: str, train: bool):  # type: ignore[override]
        from torch.utils.data import DataLoader

        from datamodules.datasets import collate

        dataset = ChainPatchDataset(self.splits[split], self.chains, int(self.preprocess.size), train,
                                    self.rerender_groups, self.seed)
        return DataLoader(dataset, batch_size=self.batch_size if train else self.eval_batch_size, shuffle=train,
                          drop_last=train and len(dataset) > self.batch_size, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0, collate_fn=collate)
