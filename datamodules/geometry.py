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

CV2_INTERPOLATION_NAMES = {
    "nearest": "INTER_NEAREST",
    "bilinear": "INTER_LINEAR",
    "bicubic": "INTER_CUBIC",
    "area": "INTER_AREA",
    "lanczos": "INTER_LANCZOS4",
}


def centre_start(spare: int) -> int:
    """First row (column) of a centred window with `spare` rows left over: torchvision's
    `CenterCrop`, `round(spare / 2)` with halves to even, which the released detectors were
    evaluated with (`spare // 2` puts the window one pixel earlier for spare = 3, 7, 11, ...)."""
    return round(spare / 2)


def centre_crop(image: np.ndarray, size: int, **_: object) -> np.ndarray:
    """The centre `size` x `size` window of an image at least that large (`centre_start`)."""
    top, left = centre_start(image.shape[0] - size), centre_start(image.shape[1] - size)
    return image[top : top + size, left : left + size]


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


def tile_to_cover(image: np.ndarray, size: int, **_: object) -> np.ndarray:
    """Repeat the image along each side shorter than `size` (whole copies, from the top-left)
    until it reaches `size`; longer sides are left as they are (mode `tile`)."""
    reps = [max(1, -(-size // image.shape[axis])) for axis in (0, 1)]
    if reps == [1, 1]:
        return image
    return np.tile(image, reps + [1] * (image.ndim - 2))


def resize_short_side(image: np.ndarray, short: int, interpolation: str = "bilinear", **_: object) -> np.ndarray:
    """Scale so the short side is `short`, the long side `int(short * long / short_side)`: the
    sizes torchvision's `Resize(short)` picks, which the CO-SPY weights were trained with."""
    import cv2

    height, width = image.shape[:2]
    if min(height, width) == short:
        return image
    if height <= width:
        new_h, new_w = short, int(short * width / height)
    else:
        new_h, new_w = int(short * height / width), short
    flag = getattr(cv2, CV2_INTERPOLATION_NAMES[interpolation])
    return cv2.resize(image, (new_w, new_h), interpolation=flag)


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
    if mode in ("center_crop", "tile", "resize_crop"):
        short, interpolation = int(preprocess.load_size or size), preprocess.interpolation

        def center_crop(image: np.ndarray) -> np.ndarray:
            if mode == "resize_crop":
                image = resize_short_side(image, short, interpolation)
            image = tile_to_cover(image, size) if mode == "tile" else pad_to(image, size, centre=True)
            return centre_crop(image, size)

        return center_crop

    def pad(image: np.ndarray) -> np.ndarray:
        return pad_to(image, size, centre=False)[:size, :size]

    return pad


def to_network_input(images: list[np.ndarray]) -> np.ndarray:
    """Same-size `H x W x 3 uint8` images -> `N x 3 x H x W float32` in [0, 1], bit-identical to
    stacking `datamodules.transforms.to_tensor` of each."""
    batch = np.stack(images).transpose(0, 3, 1, 2).astype(np.float32)
    return np.divide(batch, np.float32(255.0), out=batch)
