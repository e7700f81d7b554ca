"""Hand-made localization batches for module and DDP tests: squares on noise, some genuine."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

SEG_TINY = {
    "_target_": "detectors.seg.SegmentationLocalizer",
    "arch": "Unet",
    "encoder": "tu-resnet10t",
    "encoder_depth": 3,
    "pretrained": None,
    "arch_kwargs": {"decoder_channels": [16, 8, 8]},
    "preprocess": {"size": 32, "mode": "center_crop"},
}


class SquaresDataset(Dataset):
    """`n` 32 px samples; every third is genuine (empty mask), the others hide a bright square."""

    def __init__(self, n: int = 9, size: int = 32, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.samples = []
        for index in range(n):
            image = torch.rand(3, size, size, generator=generator) * 0.5
            mask = torch.zeros(1, size, size)
            label = 0 if index % 3 == 0 else 1
            if label:
                side = (6 + index % 6) * size // 32
                top, left = torch.randint(0, size - side, (2,), generator=generator).tolist()
                mask[:, top : top + side, left : left + side] = 1
                image = image + 0.5 * mask
            self.samples.append(
                {
                    "image": image,
                    "mask": mask,
                    "edge": torch.zeros_like(mask),
                    "label": label,
                    "index": index,
                    "group": "squares",
                }
            )

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict:
        return self.samples[index]


def squares_loader(n: int = 9, batch_size: int = 4) -> DataLoader:
    return DataLoader(SquaresDataset(n), batch_size=batch_size, shuffle=False)


def save_untrained_checkpoint(path, net: dict | None = None, seed: int = 0):
    """A checkpoint in train.py's format holding a randomly initialized localizer (no training needed
    to test what infer.py and export.py do with maps)."""
    from detectors.module import DetectorModule

    torch.manual_seed(seed)
    module = DetectorModule(net=net or SEG_TINY, name="seg_tiny")
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, path)
    return module.eval()


def generated_forgeries(
    photos,
    panels_per_photo: int,
    size: int,
    seed: int,
    area: tuple[float, float] = (0.03, 0.4),
    copy_move_options: dict | None = None,
    splice_options: dict | None = None,
) -> dict[str, list[dict]]:
    """Copy-move and splicing forgeries made by the toolkit's own generators from `photos`.

    Each photo gives `panels_per_photo` square crops (35-90 % of its short side) shrunk to `size` px,
    so generation stays cheap; every panel gets a copy-move of one of its own objects and a splice of
    the object of a panel of another of these photos (so a held-out photo set stays held out), with
    the generators' `copy_move_options` and `splice_options`. Forgeries whose object falls outside
    `area` (fraction of the frame) are skipped, as the generators decide.
    Returns {"copy_move": samples, "splicing": samples} in the localization batch format.
    """
    import cv2
    import numpy as np

    from datamodules.io import read_image
    from datamodules.localization import edge_mask
    from synthesis.copy_move import copy_move
    from synthesis.splicing import splice

    rng = np.random.default_rng(seed)
    panels = []
    for photo in photos:
        image = read_image(photo)
        height, width = image.shape[:2]
        crops = []
        for _ in range(panels_per_photo):
            side = int(min(height, width) * rng.uniform(0.35, 0.9))
            top, left = int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1))
            crops.append(
                cv2.resize(image[top : top + side, left : left + side], (size, size), interpolation=cv2.INTER_AREA)
            )
        panels.append(crops)

    def sample(image, mask):
        mask_t = torch.from_numpy(mask.astype("float32"))[None]
        return {
            "image": torch.from_numpy(image).permute(2, 0, 1).float() / 255,
            "mask": mask_t,
            "edge": torch.from_numpy(edge_mask(mask).astype("float32"))[None],
            "label": 1,
        }

    bounds = {"min_fraction": area[0], "max_fraction": area[1]}
    samples: dict[str, list[dict]] = {"copy_move": [], "splicing": []}
    for photo_index, crops in enumerate(panels):
        for crop_index, panel in enumerate(crops):
            donor = panels[(photo_index + 1 + crop_index) % len(panels)][crop_index]
            for operation, make in (
                ("copy_move", lambda: copy_move(panel, rng, **bounds, **(copy_move_options or {}))),
                ("splicing", lambda: splice(donor, panel, rng, **bounds, **(splice_options or {}))),
            ):
                try:
                    result = make()
                except ValueError:  # no object of a usable size in this panel
                    continue
                samples[operation].append(sample(result.image, result.mask))
    return samples
