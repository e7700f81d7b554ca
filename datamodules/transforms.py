"""albumentations pipelines built from a detector's `Preprocess`, so training and scoring agree."""
from __future__ import annotations

from functools import partial
from typing import Any, Mapping

import albumentations as A
import cv2
import numpy as np
import torch

from datamodules.geometry import centre_crop, resize_short_side, tile_to_cover
from datamodules.preprocess import Preprocess

CV2_INTERPOLATION = {"nearest": cv2.INTER_NEAREST, "bilinear": cv2.INTER_LINEAR, "bicubic": cv2.INTER_CUBIC,
                     "area": cv2.INTER_AREA, "lanczos": cv2.INTER_LANCZOS4}
# Training augmentations: probabilities (0 = off). Artifact detectors keep them off by default
# because blur and recompression erase the traces they learn; recipes switch them on.
# `noise` re-injects Gaussian noise (std a fraction `noise_std` of the full range, drawn per image),
# so a detector cannot equate "smoother than a photo" with "generated" and "noisier" with "genuine";
# `resample` shrinks an image by a factor in `resample_scale` and enlarges it back (area down,
# bilinear up), so genuine images carry up-sampling traces too.
DEFAULT_AUGMENT = {"hflip": 0.5, "jpeg": 0.0, "jpeg_quality": (30, 100), "blur": 0.0,
                   "blur_sigma": (0.1, 3.0), "rescale": 0.0, "rescale_limit": 0.2, "vflip": 0.0,
                   "noise": 0.0, "noise_std": (0.02, 0.1), "resample": 0.0, "resample_scale": (0.5, 0.9)}
# The point-6 recipe for manipulation localizers (masks follow every geometric step): flips, JPEG
# q30-100 and Gaussian blur sigma 0-3 each with probability 0.5, rescale +-0.2.
LOCALIZATION_AUGMENT = {"hflip": 0.5, "vflip": 0.5, "jpeg": 0.5, "blur": 0.5, "rescale": 0.5}


def geometry(preprocess: Preprocess, train: bool) -> list[A.BasicTransform]:
    """Bring an image to the network's input size per `preprocess.mode`.

    `center_crop` crops at random in training and at the centre otherwise; `pad` anchors the image
    at the top-left so the pixel grid (and with it any up-sampling period) keeps its phase.
    """
    size = preprocess.size
    if preprocess.mode == "none":
        return []
    if preprocess.mode == "tile":
        tile, crop = partial(tile_to_cover, size=size), partial(centre_crop, size=size)
        return [A.Lambda(image=tile, mask=tile, name="tile"),
                A.RandomCrop(size, size) if train else A.Lambda(image=crop, mask=crop, name="centre_crop")]
    if preprocess.mode == "resize":
        return [A.Resize(size, size, interpolation=CV2_INTERPOLATION[preprocess.interpolation])]
    position = "top_left" if preprocess.mode == "pad" else "center"
    pad = A.PadIfNeeded(size, size, position=position, border_mode=cv2.BORDER_CONSTANT, fill=0, fill_mask=0)
    steps: list[A.BasicTransform] = [pad]
    if preprocess.mode == "resize_crop":
        short = int(preprocess.load_size or size)
        steps.insert(0, A.Lambda(image=partial(resize_short_side, short=short, interpolation=preprocess.interpolation),
                                 mask=partial(resize_short_side, short=short, interpolation="nearest"),
                                 name="resize_short_side"))
    if train:
        return steps + [A.RandomCrop(size, size)]
    if preprocess.mode != "pad":
        crop = partial(centre_crop, size=size)
        return steps + [A.Lambda(image=crop, mask=crop, name="centre_crop")]
    return [pad, A.Crop(0, 0, size, size)]


def build_transform(preprocess: Preprocess | Mapping[str, Any] | None, train: bool = False,
                    augment: Mapping[str, Any] | None = None, seed: int | None = None) -> A.Compose:
    """The pipeline for one split: augmentations (training only), then the detector's geometry."""
    preprocess = Preprocess.from_config(preprocess)
    steps: list[A.BasicTransform] = []
    if train:
        unknown = set(augment or {}) - set(DEFAULT_AUGMENT)
        if unknown:  # a mistyped option would otherwise be ignored silently
            raise ValueError(f"unknown augment options {sorted(unknown)}; expected among {sorted(DEFAULT_AUGMENT)}")
        options = {**DEFAULT_AUGMENT, **(augment or {})}
        if options["rescale"] > 0:
            limit = float(options["rescale_limit"])
            steps.append(A.RandomScale(scale_limit=(-limit, limit), p=options["rescale"]))
        if options["resample"] > 0:
            steps.append(A.Downscale(scale_range=tuple(options["resample_scale"]), p=options["resample"],
                                     interpolation_pair={"downscale": cv2.INTER_AREA, "upscale": cv2.INTER_LINEAR}))
        if options["blur"] > 0:
            steps.append(A.GaussianBlur(blur_limit=0, sigma_limit=tuple(options["blur_sigma"]), p=options["blur"]))
        if options["noise"] > 0:
            steps.append(A.GaussNoise(std_range=tuple(options["noise_std"]), per_channel=True, p=options["noise"]))
        if options["jpeg"] > 0:
            steps.append(A.ImageCompression(quality_range=tuple(options["jpeg_quality"]), p=options["jpeg"]))
        if options["hflip"] > 0:
            steps.append(A.HorizontalFlip(p=options["hflip"]))
        if options["vflip"] > 0:
            steps.append(A.VerticalFlip(p=options["vflip"]))
    return A.Compose(steps + geometry(preprocess, train), seed=seed)


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """H x W x 3 uint8 -> 3 x H x W float32 in [0, 1], the detectors' input."""
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div_(255.0)
