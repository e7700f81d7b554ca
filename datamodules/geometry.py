"""The evaluation-time geometry of a detector's `Preprocess` in plain numpy (and OpenCV for resizing).

Scoring with an `.onnx` model must not import torch, and albumentations imports it. This module
reproduces `datamodules.transforms.build_transform(preprocess, train=False)` exactly (same padding
offsets, same crop window, the same `cv2.resize` call), which a test checks pixel for pixel, so the
ONNX path and the PyTorch path feed the network identical inputs.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from datamodules.preprocess import Preprocess

CV2_INTERPOLATION_NAMES = {"nearest": "INTER_NEAREST", "bilinear": "INTER_LINEAR", "bicubic": "INTER_CUBIC",
                           "area": "INTER_AREA", "lanczos": "INTER_LANCZOS4"}


def pad_to(image: np.ndarray, size: int, centre: bool) -> np.ndarray:
    """Zero-pad to at least `size` x `size`: centred (the extra pixel after, as albumentations'
    `PadIfNeeded` does) or at the bottom/right (the pixel grid keeps its phase)."""
    height, width = image.shape[:2]
    pad_h, pad_w = max(0, size - height), max(0, size - width)
    if not pad_h and not pad_w:
        return image
    top, left = (int(pad_h / 2.0), int(pad_w / 2.0)) if centre else (0, 0)
    widths = [(top, pad_h - top), (left, pad_w - left)] + [(0, 0)] * (image.ndim - 2)
    return np.pad(image, widths, mode="constant", constant_values=0)


def eval_geometry(preprocess: Preprocess) -> Callable[[np.ndarray], np.ndarray]:
    """`H x W x 3 uint8 -> size x size x 3 uint8` (or the image itself for mode `none`)."""
    preprocess = Preprocess.from_config(preprocess)
    size, mode = preprocess.size, preprocess.mode
    if mode == "none":
        return lambda image: image
    if mode == "resize":
        import cv2  # loaded only by resizing detectors

        flag = getattr(cv2, CV2_INTERPOLATION_NAMES[preprocess.interpolation])

        def resize(image: np.ndarray) -> np.ndarray:
            if image.shape[:2] == (size, size):
                return image
            return cv2.resize(image, (size, size), interpolation=flag)

        return resize
    if mode == "center_crop":
        def center_crop(image: np.ndarray) -> np.ndarray:
            image = pad_to(image, size, centre=True)
            top, left = (image.shape[0] - size) // 2, (image.shape[1] - size) // 2
            return image[top:top + size, left:left + size]

        return center_crop

    def pad(image: np.ndarray) -> np.ndarray:
        return pad_to(image, size, centre=False)[:size, :size]

    return pad


def to_network_input(images: list[np.ndarray]) -> np.ndarray:
    """Same-size `H x W x 3 uint8` images -> `N x 3 x H x W float32` in [0, 1], bit-identical to
    stacking `datamodules.transforms.to_tensor` of each."""
    batch = np.stack(images).transpose(0, 3, 1, 2).astype(np.float32)
    return np.divide(batch, np.float32(255.0), out=batch)
