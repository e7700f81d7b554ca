"""Small helpers shared by the forgery operations: input checks and mask-bounded blending."""

from __future__ import annotations

import cv2
import numpy as np

__all__ = [
    "PairDataError",
    "as_rgb_uint8",
    "as_bool_mask",
    "inner_alpha",
    "composite",
    "changed_pixels",
    "random_ellipse",
]


def as_rgb_uint8(image: np.ndarray, name: str = "image") -> np.ndarray:
    """Validate an H x W x 3 uint8 RGB image (grey is expanded, alpha dropped)."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise TypeError(f"{name} must be uint8 RGB, got dtype {image.dtype}")
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=2)
    if image.ndim != 3 or image.shape[2] not in (3, 4):
        raise ValueError(f"{name} must be H x W x 3 RGB, got shape {image.shape}")
    return np.ascontiguousarray(image[..., :3])


def as_bool_mask(mask: np.ndarray, shape: tuple[int, int], name: str = "mask") -> np.ndarray:
    mask = np.asarray(mask)
    if mask.ndim == 3:
        mask = mask[..., 0]
    if mask.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {mask.shape}")
    return mask.astype(bool)


def inner_alpha(mask: np.ndarray, feather: float) -> np.ndarray:
    """Soft alpha that ramps from 0 at the mask boundary to 1 inside, and is exactly 0 outside.

    Blending softens the seam (the boundary blending the seeds describe) while guaranteeing that
    every changed pixel lies inside the binary mask, so the mask is an honest label.
    """
    mask = mask.astype(bool)
    if feather <= 0 or not mask.any():
        return mask.astype(np.float32)
    dist = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 3)
    return np.clip(dist / float(feather), 0.0, 1.0).astype(np.float32)


def composite(foreground: np.ndarray, background: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """alpha * foreground + (1 - alpha) * background, rounded back to uint8."""
    a = alpha.astype(np.float32)[..., None]
    out = a * foreground.astype(np.float32) + (1.0 - a) * background.astype(np.float32)
    out = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    # pixels with alpha 0 are copied exactly (no float round trip)
    keep = alpha <= 0
    out[keep] = background[keep]
    return out


def changed_pixels(a: np.ndarray, b: np.ndarray, tolerance: int = 0) -> np.ndarray:
    """Boolean map of pixels that differ by more than `tolerance` in any channel."""
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return diff.reshape(diff.shape[0], diff.shape[1], -1).max(axis=2) > tolerance


def random_ellipse(shape: tuple[int, int], rng: np.random.Generator, fraction: float) -> np.ndarray:
    """A randomly placed and rotated ellipse covering about `fraction` of the frame."""
    h, w = shape
    mask = np.zeros((h, w), np.uint8)
    ax = max(4, int(np.sqrt(fraction * h * w / np.pi) * rng.uniform(0.7, 1.4)))
    ay = max(4, int(fraction * h * w / (np.pi * ax)))
    ax, ay = min(ax, w // 3), min(ay, h // 3)
    cx = int(rng.integers(ax, w - ax)) if w > 2 * ax else w // 2
    cy = int(rng.integers(ay, h - ay)) if h > 2 * ay else h // 2
    cv2.ellipse(mask, (cx, cy), (ax, ay), float(rng.uniform(0, 180)), 0, 360, 1, -1)
    return mask.astype(bool)


class PairDataError(ValueError):
    """The pair data cannot be made from what was given (no photos, a missing or foreign pairs CSV):
    a setting the user fixes, said in one line (train.py ends with status 2)."""
