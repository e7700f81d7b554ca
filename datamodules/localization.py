"""Manipulation localization data: image, mask, boundary ("edge") mask and label per sample.

Localizers (MVSS-Net, TruFor, the segmentation baseline) learn from pixel masks; MVSS-Net also
supervises an edge branch with the mask's boundary band (dilate - erode). Masks go through the same
albumentations pipeline as their image, so crops, flips and rescaling keep them aligned; the edge
band is computed after the geometry, so its width is in network-input pixels.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

from datamodules.classification import LayoutDataModule
from datamodules.datasets import UNLABELLED
from datamodules.io import DEFAULT_MAX_PIXELS, ImageReadError, read_image, read_mask
from datamodules.preprocess import Preprocess
from datamodules.records import LayoutError, Record
from datamodules.transforms import LOCALIZATION_AUGMENT, to_tensor

log = logging.getLogger(__name__)

MISSING_MASKS = ("drop", "full", "error")


def edge_mask(mask: np.ndarray, width: int = 3) -> np.ndarray:
    """Pixels within `width` px of the mask boundary, on either side (MVSS-Net: dilate - erode)."""
    mask = np.asarray(mask).astype(np.uint8)
    if width <= 0 or not mask.any() or mask.all():
        return np.zeros_like(mask)
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * width + 1, 2 * width + 1))
    return (cv2.dilate(mask, kernel) - cv2.erode(mask, kernel)).astype(np.uint8)


class LocalizationDataset(Dataset):
    """`records[i]` -> {"image", "mask", "edge", "label", "group", "index", "path"}.

    Genuine images get an empty mask. A manipulated record without a mask file gets a full mask
    when `full_when_missing` (the whole frame was generated), otherwise it is an error sample.
    Unreadable files give {"index", "path", "error"}, which `collate` sets aside.
    """

    def __init__(
        self,
        records: Sequence[Record],
        transform: Any = None,
        edge_width: int = 3,
        full_when_missing: bool = False,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        self.records = list(records)
        self.transform = transform
        self.edge_width = edge_width
        self.full_when_missing = full_when_missing
        self.max_pixels = max_pixels

    def __len__(self) -> int:
        return len(self.records)

    def _mask(self, record: Record, shape: tuple[int, int]) -> np.ndarray:
        if record.mask and record.label != 0:
            mask = read_mask(record.mask, self.max_pixels)
            if mask.shape != shape:
                raise ImageReadError(record.mask, f"mask size {mask.shape[::-1]} differs from image size {shape[::-1]}")
            return mask
        if record.label == 1:
            if not self.full_when_missing:
                raise ImageReadError(record.path, "manipulated image without a mask")
            return np.ones(shape, np.uint8)
        return np.zeros(shape, np.uint8)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        try:
            image = read_image(record.path, self.max_pixels)
            mask = self._mask(record, image.shape[:2])
        except ImageReadError as error:
            return {"index": index, "path": record.path, "error": error.reason}
        if self.transform is not None:
            out = self.transform(image=image, mask=mask)
            image, mask = out["image"], out["mask"]
        mask = (np.asarray(mask) > 0).astype(np.uint8)
        return {
            "image": to_tensor(image),
            "index": index,
            "path": record.path,
            "label": UNLABELLED if record.label is None else int(record.label),
            "group": record.group or "",
            "mask": torch.from_numpy(mask).unsqueeze(0).float(),
            "edge": torch.from_numpy(edge_mask(mask, self.edge_width)).unsqueeze(0).float(),
        }


def truth_of(record: Record) -> Record:
    """The record as localization reads its truth: a mask file that does not exist is no mask (for
    `missing_masks` to decide), and a genuine image has no manipulated pixel whatever mask it lists
    (as `infer.py` scores it)."""
    if record.mask and (record.label == 0 or not Path(record.mask).is_file()):
        return replace(record, mask=None)
    return record


class LocalizationDataModule(LayoutDataModule):
    """Localization batches from any layout with masks (manifest, IMDL, CASIA/MVSS lists, THEMIS ...).

    `edge_width`: half-width in px of the boundary band for edge supervision. `missing_masks` says
    what to do with manipulated images that have no mask: `drop` them (logged), treat them as
    wholly manipulated (`full`), or `error`. `augment` defaults to the localization recipe
    (`LOCALIZATION_AUGMENT`); validation and test transforms are deterministic. `eval_whole`:
    validation and test take each image whole, as `infer.py` scores a localizer (false: the
    training crop or resize, faster on large images, for a threshold that then holds for crops).
    """

    # configs/data/localization.yaml excludes generate.py's duplication panels by default; data
    # without them (a user's own) is not warned of the absent groups
    default_exclusions = frozenset({"duplication_global", "duplication_local"})

    def __init__(
        self,
        edge_width: int = 3,
        missing_masks: str = "drop",
        create: Callable[..., Any] | None = None,
        eval_whole: bool = True,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("augment") is None or kwargs.get("augment") == {}:
            kwargs["augment"] = dict(LOCALIZATION_AUGMENT)
        super().__init__(**kwargs)
        if self.pseudo_fakes > 0:
            raise ValueError(
                "data.pseudo_fakes makes whole-image fakes for classifiers; localization needs "
                "manipulated regions with masks (set it to 0)"
            )
        if missing_masks not in MISSING_MASKS:
            raise ValueError(f"missing_masks must be one of {MISSING_MASKS}, got {missing_masks!r}")
        if create is not None and not callable(create):
            raise ValueError(
                f"data.create must be null or a dataset maker (a `_partial_: true` config with a "
                f"`_target_`), got {create!r}"
            )
        self.edge_width = edge_width
        self.missing_masks = missing_masks
        self.create = create
        self.eval_whole = bool(eval_whole)

    def split_preprocess(self, train: bool) -> Preprocess:
        """Evaluation images whole (`eval_whole`): the threshold calibrated on validation genuines is
        then the one `infer.py`'s scores meet (a crop's top pixels are not the whole image's), and a
        manipulated test image whose crop would miss its region is scored where the region is."""
        return self.preprocess.whole() if self.eval_whole and not train else self.preprocess

    def prepare_data(self) -> None:
        """With `create` (a callable `create(root, seed=, split_fractions=)` writing `root/manifest.csv`),
        make the dataset first when `root` has no manifest yet: the embedded default."""
        if self.create is None:
            return
        if not (self.root / "manifest.csv").is_file():
            log.info("generating a localization dataset into %s", self.root)
            self.create(self.root, seed=self.seed, split_fractions=self.split_fractions)
            return
        stamp = self.root / ".items" / "spec.json"
        made = json.loads(stamp.read_text()) if stamp.is_file() else {}
        asked = {"seed": self.seed, "split_fractions": [float(f) for f in self.split_fractions]}
        if made and {key: made.get(key) for key in asked} != asked:
            raise LayoutError(
                f"{self.root} holds the set made with seed {made.get('seed')} and split fractions "
                f"{made.get('split_fractions')}; this run asks for seed {self.seed} and {asked['split_fractions']}. "
                "Give it a data folder of its own (paths.data_dir=...) or delete that one"
            )

    def load_records(self) -> list[Record]:
        records = super().load_records()
        genuine_masks = sum(r.label == 0 and bool(r.mask) for r in records)
        if genuine_masks:
            log.warning("%d genuine images (label 0) list a mask: not read (no pixel is manipulated)", genuine_masks)
        records = [truth_of(r) for r in records]
        missing = [r for r in records if r.label == 1 and not r.mask]
        if missing and self.missing_masks == "error":
            raise LayoutError(
                f"{len(missing)} manipulated images have no mask (or a mask file that does not exist), e.g. "
                f"{missing[0].path}; set data.missing_masks=drop or full"
            )
        if missing and self.missing_masks == "drop":
            log.warning(
                "dropping %d manipulated images without a mask (data.missing_masks=full keeps them "
                "as wholly manipulated)",
                len(missing),
            )
            records = [r for r in records if not (r.label == 1 and not r.mask)]
        if not any(r.label == 1 for r in records):
            raise LayoutError(f"{self.root}: no manipulated image with a mask; localization needs masks")
        return records

    def make_dataset(self, records: list[Record], transform: Any) -> Dataset:
        return LocalizationDataset(records, transform, self.edge_width, full_when_missing=self.missing_masks == "full")
