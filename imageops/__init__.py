"""The pixel operations that degrade an image (JPEG, Gaussian blur, resizing, Gaussian noise) and the
estimate of an image's noise level, in one implementation for training augmentation, generated
data, processing chains and robustness sweeps, so a JPEG at quality q or a blur of sigma s is the
same operation wherever it is applied.

Every operation takes and returns H x W x 3 uint8 RGB arrays. JPEG goes through OpenCV's libjpeg
(`JPEG_CODEC` names the build, for reports): baseline, 4:2:0 chroma as most uploads are, encoded
from the RGB planes in their true order. A leaf package: it imports nothing of the toolkit, so every
package may use it.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import cv2
import numpy as np

LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601 weights of R, G and B in an image's luma
# Immerkaer's kernel: the difference of two Laplacians; zero response to planar intensity.
IMMERKAER_KERNEL = ((1.0, -2.0, 1.0), (-2.0, 4.0, -2.0), (1.0, -2.0, 1.0))
SIGMA_PER_MEAN_ABS = math.sqrt(math.pi / 2.0) / 6.0
# resampling kernels by name, as the toolkit's configs and chain names spell them
RESAMPLING_KERNELS = {
    "nearest": cv2.INTER_NEAREST,
    "area": cv2.INTER_AREA,
    "bilinear": cv2.INTER_LINEAR,
    "bicubic": cv2.INTER_CUBIC,
    "lanczos": cv2.INTER_LANCZOS4,
}
# baseline JPEG with 4:2:0 chroma, written out so another OpenCV default cannot change it silently
_JPEG_SETTINGS = {
    cv2.IMWRITE_JPEG_SAMPLING_FACTOR: cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
    cv2.IMWRITE_JPEG_OPTIMIZE: 0,
    cv2.IMWRITE_JPEG_PROGRESSIVE: 0,
}


@lru_cache(maxsize=1)
def jpeg_codec() -> str:
    """The JPEG encoder every operation uses, as reports name it (library, version, settings)."""
    found = re.search(r"JPEG:\s*(.+)", cv2.getBuildInformation())
    library = found.group(1).strip() if found else "libjpeg"
    return f"OpenCV {cv2.__version__} ({library}), baseline, 4:2:0"


def check_image(image: np.ndarray) -> np.ndarray:
    """`image` as an array, refused with a clear message unless it is H x W x 3 uint8."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image operations take uint8 H x W x 3 RGB images, got {image.dtype} {image.shape}")
    return image


def jpeg(image: np.ndarray, quality: float) -> np.ndarray:
    """Encode as JPEG at `quality` (1-100) and decode again."""
    image = check_image(image)
    quality = int(round(quality))
    if not 1 <= quality <= 100:
        raise ValueError(f"JPEG quality must lie in 1-100, got {quality}")
    ok, data = cv2.imencode(
        ".jpg",
        np.ascontiguousarray(image[..., ::-1]),
        [cv2.IMWRITE_JPEG_QUALITY, quality, *(v for pair in _JPEG_SETTINGS.items() for v in pair)],
    )
    if not ok:
        raise RuntimeError(f"JPEG encoding failed for an image of shape {image.shape}")
    return cv2.imdecode(data, cv2.IMREAD_COLOR)[..., ::-1].copy()


def gaussian_blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur with standard deviation `sigma` pixels (OpenCV's kernel, radius 3 sigma,
    reflected border); sigma 0 returns a copy."""
    image = check_image(image)
    if sigma <= 0:
        return image.copy()
    return cv2.GaussianBlur(image, (0, 0), sigmaX=float(sigma), sigmaY=float(sigma))


def resize(image: np.ndarray, size: tuple[int, int], kernel: str = "bilinear") -> np.ndarray:
    """`image` at `size` = (width, height) with the named resampling `kernel`."""
    image = check_image(image)
    if kernel not in RESAMPLING_KERNELS:
        raise ValueError(f"unknown resampling kernel {kernel!r}; known: {sorted(RESAMPLING_KERNELS)}")
    width, height = size
    return cv2.resize(image, (max(1, int(width)), max(1, int(height))), interpolation=RESAMPLING_KERNELS[kernel])


def rescale(image: np.ndarray, factor: float, kernel: str | None = None) -> np.ndarray:
    """Resize by `factor`; the kernel defaults to area averaging when shrinking and bilinear when
    enlarging (what image services do), and factor 1 returns a copy."""
    image = check_image(image)
    if factor == 1:
        return image.copy()
    height, width = image.shape[:2]
    size = (max(1, round(width * factor)), max(1, round(height * factor)))
    return resize(image, size, kernel or ("area" if factor < 1 else "bilinear"))


def gaussian_noise(image: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
    """Add zero-mean Gaussian noise whose standard deviation is `std` of the full range (0.1 = 25.5
    grey levels), drawn per pixel and channel from `rng`, rounded and clipped to uint8."""
    image = check_image(image)
    noise = rng.normal(0.0, float(std) * 255.0, size=image.shape)
    return np.clip(np.rint(image + noise), 0, 255).astype(np.uint8)


def noise_sigma(gray: np.ndarray) -> float:
    """An image's noise level in grey levels (Immerkaer 1996: the mean absolute response of a
    kernel that cancels planar content, times sqrt(pi/2) / 6). `gray`: H x W, in 0-255 units."""
    response = cv2.filter2D(np.asarray(gray, np.float32), -1, np.float32(IMMERKAER_KERNEL))[1:-1, 1:-1]
    return float(SIGMA_PER_MEAN_ABS * np.abs(response).mean()) if response.size else 0.0
