"""Hand-made localization batches for module and DDP tests: squares on noise, some genuine."""
from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

SEG_TINY = {"_target_": "detectors.seg.SegmentationLocalizer", "arch": "Unet", "encoder": "tu-resnet10t",
            "encoder_depth": 3, "pretrained": None, "arch_kwargs": {"decoder_channels": [16, 8, 8]},
            "preprocess": {"size": 32, "mode": "center_crop"}}


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
                mask[:, top:top + side, left:left + side] = 1
                image = image + 0.5 * mask
            self.samples.append({"image": image, "mask": mask, "edge": torch.zeros_like(mask),
                                 "label": label, "index": index, "group": "squares"})

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
