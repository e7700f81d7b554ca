"""Robust image reading: the one place where files become 8-bit RGB arrays.

Training, inference and synthesis all read through `read_image`, so every odd file (EXIF-rotated
phone photos, palette PNGs, CMYK JPEGs, 16-bit TIFFs, decompression bombs, truncated uploads) is
handled once, and failures carry the reason instead of a stack trace.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff")
DEFAULT_MAX_PIXELS = 128_000_000  # ~ 11,300 x 11,300; larger files are refused, not decoded

# PIL's own bomb check only warns below 2x its limit; ours refuses with a clear reason instead.
Image.MAX_IMAGE_PIXELS = None


class ImageReadError(Exception):
    """A file that could not be turned into an image, with the reason a user can act on."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


def is_image_file(path: str | os.PathLike) -> bool:
    return str(path).lower().endswith(IMAGE_EXTENSIONS)


def _to_rgb(image: Image.Image) -> Image.Image:
    """Every mode -> 8-bit RGB. High-bit-depth images are rescaled by their real range, not
    clipped, so a 16-bit scan does not come out white."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if image.mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        if image.mode == "F":
            low, high = float(values.min(initial=0)), float(values.max(initial=1))
            values = (values - low) / max(high - low, 1e-12) * 255.0
        else:
            values = values / top * 255.0
        image = Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), mode="L")
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        # Transparent pixels become white, as image viewers show them on a page.
        rgba = image.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(canvas, rgba)
    return image.convert("RGB") if image.mode != "RGB" else image


def read_image(path: str | os.PathLike, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Read `path` as an H x W x 3 uint8 RGB array, upright per its EXIF orientation.

    Raises `ImageReadError` for missing, unreadable, truncated, corrupt or oversized files.
    """
    path = Path(path)
    if not path.is_file():
        raise ImageReadError(path, "file not found" if not path.exists() else "not a regular file")
    try:
        with Image.open(path) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise ImageReadError(
                    path, f"{width} x {height} = {width * height:,} pixels exceeds the limit of "
                          f"{max_pixels:,} (decompression-bomb guard; raise max_pixels to allow it)")
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                image.load()
            image = ImageOps.exif_transpose(image)
            array = np.array(_to_rgb(image), dtype=np.uint8)  # a writable copy
    except ImageReadError:
        raise
    except UnidentifiedImageError:
        raise ImageReadError(path, "not a recognised image format (or the file is corrupt)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        reason = str(error) or type(error).__name__
        if "truncated" in reason.lower():
            reason = f"truncated file ({reason})"
        raise ImageReadError(path, reason) from None
    if array.ndim != 3 or array.shape[2] != 3 or array.size == 0:
        raise ImageReadError(path, f"decoded to an unexpected shape {array.shape}")
    return np.ascontiguousarray(array)


def read_mask(path: str | os.PathLike, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Read a binary mask (white = manipulated) as an H x W uint8 array of 0/1."""
    rgb = read_image(path, max_pixels)
    return (rgb.max(axis=2) > 127).astype(np.uint8)


def write_image(path: str | os.PathLike, image: np.ndarray, quality: int = 95) -> None:
    """Write an RGB (H x W x 3) or single-channel uint8 array atomically (tmp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pil = Image.fromarray(np.ascontiguousarray(image))
    fmt = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".webp": "WEBP", ".bmp": "BMP",
           ".tif": "TIFF", ".tiff": "TIFF"}.get(path.suffix.lower(), "PNG")
    options = {"quality": quality} if fmt in ("JPEG", "WEBP") else {}
    pil.save(tmp, format=fmt, **options)
    os.replace(tmp, path)
