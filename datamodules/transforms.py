"""albumentations pipelines built from a detector's `Preprocess`, so training and scoring agree.

The degradations (JPEG, blur, noise, resampling) are `imageops`' operations wrapped as
albumentations steps, so training applies the same JPEG at the same quality as generated data and
the robustness curves; geometric steps, which move the mask too, stay albumentations'.
"""

from __future__ import annotations

import difflib
from functools import partial
from typing import Any, Mapping

import albumentations as A
import cv2
import numpy as np
import torch

import imageops
from datamodules.geometry import centre_crop, resize_short_side, tile_to_cover
from datamodules.preprocess import Preprocess

CV2_INTERPOLATION = {
    "nearest": cv2.INTER_NEAREST,
    "bilinear": cv2.INTER_LINEAR,
    "bicubic": cv2.INTER_CUBIC,
    "area": cv2.INTER_AREA,
    "lanczos": cv2.INTER_LANCZOS4,
}
# Training augmentations: probabilities (0 = off). Artifact detectors keep them off by default
# because blur and recompression erase the traces they learn; recipes switch them on.
# `noise` re-injects Gaussian noise (std a fraction `noise_std` of the full range, drawn per image),
# so a detector cannot equate "smoother than a photo" with "generated" and "noisier" with "genuine";
# `resample` shrinks an image by a factor in `resample_scale` and enlarges it back (area down,
# bilinear up), so genuine images carry up-sampling traces too. `transpose` (rows and columns
# swapped) and `channel_shuffle` (the colour channels in a random order) change what an image
# shows more than the up-sampling and noise traces a generator leaves, so a classifier leans less
# on orientation and colour (a JPEG's chroma subsampling does move with the channels).
DEFAULT_AUGMENT = {
    "hflip": 0.5,
    "jpeg": 0.0,
    "jpeg_quality": (30, 100),
    "blur": 0.0,
    "blur_sigma": (0.1, 3.0),
    "rescale": 0.0,
    "rescale_limit": 0.2,
    "vflip": 0.0,
    "noise": 0.0,
    "noise_std": (0.02, 0.1),
    "resample": 0.0,
    "resample_scale": (0.5, 0.9),
    "transpose": 0.0,
    "channel_shuffle": 0.0,
}
# The point-6 recipe for manipulation localizers (masks follow every geometric step): flips, JPEG
# q30-100 and Gaussian blur sigma 0-3 each with probability 0.5, rescale +-0.2.
LOCALIZATION_AUGMENT = {"hflip": 0.5, "vflip": 0.5, "jpeg": 0.5, "blur": 0.5, "rescale": 0.5}


class Jpeg(A.ImageOnlyTransform):
    """`imageops.jpeg` at a quality drawn from `quality_range` (inclusive), so training sees the
    JPEG that generated data and the robustness curves see."""

    def __init__(self, quality_range: tuple[int, int], p: float) -> None:
        super().__init__(p=p)
        self.quality_range = (int(quality_range[0]), int(quality_range[1]))

    def get_params(self) -> dict[str, int]:
        return {"quality": self.py_random.randint(*self.quality_range)}

    def apply(self, img: np.ndarray, quality: int, **params: Any) -> np.ndarray:
        return imageops.jpeg(img, quality)

    def get_transform_init_args_names(self) -> tuple[str, ...]:
        return ("quality_range",)


class GaussianBlur(A.ImageOnlyTransform):
    """`imageops.gaussian_blur` at a sigma drawn from `sigma_range`."""

    def __init__(self, sigma_range: tuple[float, float], p: float) -> None:
        super().__init__(p=p)
        self.sigma_range = (float(sigma_range[0]), float(sigma_range[1]))

    def get_params(self) -> dict[str, float]:
        return {"sigma": self.py_random.uniform(*self.sigma_range)}

    def apply(self, img: np.ndarray, sigma: float, **params: Any) -> np.ndarray:
        return imageops.gaussian_blur(img, sigma)

    def get_transform_init_args_names(self) -> tuple[str, ...]:
        return ("sigma_range",)


class GaussianNoise(A.ImageOnlyTransform):
    """`imageops.gaussian_noise` with a standard deviation (a fraction of the full range) drawn from
    `std_range`, independent per pixel and channel."""

    def __init__(self, std_range: tuple[float, float], p: float) -> None:
        super().__init__(p=p)
        self.std_range = (float(std_range[0]), float(std_range[1]))

    def get_params(self) -> dict[str, Any]:
        return {"std": self.py_random.uniform(*self.std_range), "seed": int(self.random_generator.integers(2**32))}

    def apply(self, img: np.ndarray, std: float, seed: int, **params: Any) -> np.ndarray:
        return imageops.gaussian_noise(img, std, np.random.default_rng(seed))

    def get_transform_init_args_names(self) -> tuple[str, ...]:
        return ("std_range",)


class Resample(A.ImageOnlyTransform):
    """Shrink by a factor drawn from `scale_range` (area averaging) and enlarge back to the original
    size (bilinear) with `imageops.resize`: up-sampling traces on any image."""

    def __init__(self, scale_range: tuple[float, float], p: float) -> None:
        super().__init__(p=p)
        self.scale_range = (float(scale_range[0]), float(scale_range[1]))

    def get_params(self) -> dict[str, float]:
        return {"scale": self.py_random.uniform(*self.scale_range)}

    def apply(self, img: np.ndarray, scale: float, **params: Any) -> np.ndarray:
        height, width = img.shape[:2]
        small = imageops.resize(img, (round(width * scale), round(height * scale)), "area")
        return imageops.resize(small, (width, height), "bilinear")

    def get_transform_init_args_names(self) -> tuple[str, ...]:
        return ("scale_range",)


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
        return [
            A.Lambda(image=tile, mask=tile, name="tile"),
            A.RandomCrop(size, size) if train else A.Lambda(image=crop, mask=crop, name="centre_crop"),
        ]
    if preprocess.mode == "resize":
        return [A.Resize(size, size, interpolation=CV2_INTERPOLATION[preprocess.interpolation])]
    position = "top_left" if preprocess.mode == "pad" else "center"
    pad = A.PadIfNeeded(size, size, position=position, border_mode=cv2.BORDER_CONSTANT, fill=0, fill_mask=0)
    steps: list[A.BasicTransform] = [pad]
    if preprocess.mode == "resize_crop":
        short = int(preprocess.load_size or size)
        steps.insert(
            0,
            A.Lambda(
                image=partial(resize_short_side, short=short, interpolation=preprocess.interpolation),
                mask=partial(resize_short_side, short=short, interpolation="nearest"),
                name="resize_short_side",
            ),
        )
    if train:
        return steps + [A.RandomCrop(size, size)]
    if preprocess.mode != "pad":
        crop = partial(centre_crop, size=size)
        return steps + [A.Lambda(image=crop, mask=crop, name="centre_crop")]
    return [pad, A.Crop(0, 0, size, size)]


def check_augment(augment: Mapping[str, Any] | None) -> dict[str, Any]:
    """The augmentation options asked for; an option that does not exist (a mistyped one would be
    ignored silently) is refused, naming the closest that does."""
    unknown = sorted(set(augment or {}) - set(DEFAULT_AUGMENT))
    if unknown:
        meant = difflib.get_close_matches(unknown[0], DEFAULT_AUGMENT, n=1)
        raise ValueError(
            f"unknown augment options {unknown}{f' (did you mean augment.{meant[0]}?)' if meant else ''}; "
            f"expected among {sorted(DEFAULT_AUGMENT)}"
        )
    return dict(augment or {})


def build_transform(
    preprocess: Preprocess | Mapping[str, Any] | None,
    train: bool = False,
    augment: Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> A.Compose:
    """The pipeline for one split: augmentations (training only), then the detector's geometry."""
    preprocess = Preprocess.from_config(preprocess)
    steps: list[A.BasicTransform] = []
    if train:
        options = {**DEFAULT_AUGMENT, **check_augment(augment)}
        if options["rescale"] > 0:
            limit = float(options["rescale_limit"])
            steps.append(A.RandomScale(scale_limit=(-limit, limit), p=options["rescale"]))
        if options["resample"] > 0:
            steps.append(Resample(tuple(options["resample_scale"]), p=options["resample"]))
        if options["blur"] > 0:
            steps.append(GaussianBlur(tuple(options["blur_sigma"]), p=options["blur"]))
        if options["noise"] > 0:
            steps.append(GaussianNoise(tuple(options["noise_std"]), p=options["noise"]))
        if options["jpeg"] > 0:
            steps.append(Jpeg(tuple(options["jpeg_quality"]), p=options["jpeg"]))
        if options["hflip"] > 0:
            steps.append(A.HorizontalFlip(p=options["hflip"]))
        if options["vflip"] > 0:
            steps.append(A.VerticalFlip(p=options["vflip"]))
        if options["transpose"] > 0:
            steps.append(A.Transpose(p=options["transpose"]))
        if options["channel_shuffle"] > 0:
            steps.append(A.ChannelShuffle(p=options["channel_shuffle"]))
    return A.Compose(steps + geometry(preprocess, train), seed=seed)


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """H x W x 3 uint8 -> 3 x H x W float32 in [0, 1], the detectors' input."""
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div_(255.0)
