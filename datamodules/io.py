"""Robust image reading: the one place where files become 8-bit RGB arrays; and the few facts about
datasets on disk that the makers of datasets (`synthesis`) and their readers share: split names, the
split assigner, the manifest writer, file hashes, and the named processing chains (`apply_chain`) that both
fingerprint training and splice donors use.

Training, inference and synthesis all read through `read_image`, so every odd file (EXIF-rotated
phone photos, palette PNGs, CMYK JPEGs, 16-bit TIFFs, decompression bombs, truncated uploads) is
handled once, and failures carry the reason instead of a stack trace. `synthesis` may import this
module and no other part of `datamodules`, so what both sides must agree on lives here.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import os
import random
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff")
SPLITS = ("train", "val", "test")
MANIFEST_COLUMNS = ("path", "label", "mask", "group", "category", "source", "split", "review")
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


# The bit depths high-bit-depth files hold: microscopy cameras store 10-, 12- or 14-bit data in 16-bit files
STORED_DEPTHS = (8, 10, 12, 14, 16)


def _depth_scaled(values: np.ndarray) -> np.ndarray:
    """High-bit-depth values -> 0..255 (float) by the smallest of `STORED_DEPTHS` that holds the
    brightest value: a 12-bit micrograph in a 16-bit file is read as 12-bit, not as nearly black."""
    brightest = values.max(initial=0)
    depth = next((bits for bits in STORED_DEPTHS if brightest <= 2**bits - 1), 32)
    return values / float(2**depth - 1) * 255.0


# EXIF orientation -> the transposition that makes the stored pixels upright (as ImageOps.exif_transpose)
_UPRIGHT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def _wide_colour(image: Image.Image, path: Path) -> Image.Image | None:
    """A 16-bit colour (or grey + alpha) file as 8-bit RGB(A) by its own depth, or None for other
    files. Pillow keeps only the high byte of such files (a 12-bit colour micrograph read nearly
    black), so they are decoded with OpenCV at full depth."""
    if image.mode not in ("RGB", "RGBA", "LA") or not any(";16" in str(tile.args) for tile in image.tile):
        return None
    import cv2

    stored = cv2.imdecode(np.fromfile(path, np.uint8), cv2.IMREAD_UNCHANGED)
    if stored is None or stored.dtype != np.uint16:
        return None
    stored = stored[..., None] if stored.ndim == 2 else stored
    colour = stored[..., :3][..., ::-1] if stored.shape[2] >= 3 else np.repeat(stored[..., :1], 3, axis=2)
    channels = [np.rint(_depth_scaled(colour.astype(np.float64)))]
    if stored.shape[2] in (2, 4):  # alpha, kept as 8 bits
        channels.append(np.rint(stored[..., -1:].astype(np.float64) / 257.0))
    wide = Image.fromarray(np.clip(np.concatenate(channels, axis=2), 0, 255).astype(np.uint8))
    orientation = image.getexif().get(0x0112, 1)
    return wide.transpose(_UPRIGHT[orientation]) if orientation in _UPRIGHT else wide


def _has_alpha(image: Image.Image) -> bool:
    """Whether some pixels may be (partly) transparent: an alpha channel or a palette's transparency."""
    return image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)


def _to_rgb(image: Image.Image) -> Image.Image:
    """Every mode -> 8-bit RGB. High-bit-depth images are rescaled by their real range, not
    clipped, so a 16-bit scan does not come out white (`_depth_scaled`)."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        values = np.asarray(image, dtype=np.float64)
        if image.mode == "F":
            low, high = float(values.min(initial=0)), float(values.max(initial=1))
            values = (values - low) / max(high - low, 1e-12) * 255.0
        else:
            values = _depth_scaled(values)
        image = Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), mode="L")
    if _has_alpha(image):
        # Transparent pixels become white, as image viewers show them on a page.
        rgba = image.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(canvas, rgba)
    return image.convert("RGB") if image.mode != "RGB" else image


def read_image(path: str | os.PathLike, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Read `path` as an H x W x 3 uint8 RGB array, upright per its EXIF orientation.

    Raises `ImageReadError` for missing, unreadable, truncated, corrupt or oversized files.
    """
    array = np.array(_to_rgb(_open_upright(path, max_pixels)), dtype=np.uint8)  # a writable copy
    if array.ndim != 3 or array.shape[2] != 3 or array.size == 0:
        raise ImageReadError(path, f"decoded to an unexpected shape {array.shape}")
    return np.ascontiguousarray(array)


def read_mask(path: str | os.PathLike, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Read a binary mask as an H x W uint8 array of 0/1, as datasets store them: white (a channel
    at half its range or more) is manipulated, a mask stored as 0/1 is read as such (not as
    black), and transparent pixels are not manipulated (a shape drawn on a transparent layer)."""
    image = _open_upright(path, max_pixels)
    alpha = None
    if _has_alpha(image):
        rgba = image.convert("RGBA")
        image, alpha = rgba.convert("RGB"), np.asarray(rgba.getchannel("A"))
    values = np.asarray(_to_rgb(image), dtype=np.uint8).max(axis=2)
    manipulated = values >= (128 if values.max(initial=0) > 1 else 1)
    if alpha is not None:
        manipulated &= alpha >= 128
    return manipulated.astype(np.uint8)


def _open_upright(path: str | os.PathLike, max_pixels: int) -> Image.Image:
    """The decoded image, turned upright by its EXIF orientation; every failure an `ImageReadError`."""
    path = Path(path)
    if not path.is_file():
        raise ImageReadError(path, "file not found" if not path.exists() else "not a regular file")
    try:
        with Image.open(path) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise ImageReadError(
                    path,
                    f"{width} x {height} = {width * height:,} pixels exceeds the limit of "
                    f"{max_pixels:,} (decompression-bomb guard; raise max_pixels to allow it)",
                )
            if (wide := _wide_colour(image, path)) is not None:
                return wide
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                image.load()
            upright = ImageOps.exif_transpose(image)
            return upright.copy() if upright is image else upright
    except ImageReadError:
        raise
    except UnidentifiedImageError:
        raise ImageReadError(path, "not a recognised image format (or the file is corrupt)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        reason = str(error) or type(error).__name__
        if "truncated" in reason.lower():
            reason = f"truncated file ({reason})"
        raise ImageReadError(path, reason) from None


def write_image(path: str | os.PathLike, image: np.ndarray, quality: int = 95) -> None:
    """Write an RGB (H x W x 3) or single-channel uint8 array atomically (tmp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pil = Image.fromarray(np.ascontiguousarray(image))
    fmt = {
        ".jpg": "JPEG",
        ".jpeg": "JPEG",
        ".png": "PNG",
        ".webp": "WEBP",
        ".bmp": "BMP",
        ".tif": "TIFF",
        ".tiff": "TIFF",
    }.get(path.suffix.lower(), "PNG")
    options = {"quality": quality} if fmt in ("JPEG", "WEBP") else {}
    pil.save(tmp, format=fmt, **options)
    os.replace(tmp, path)


def looked_for(path: str | os.PathLike) -> str:
    """For a message that a path the user gave does not exist: where it was looked for, when it is
    relative (from the current folder, which `hydra.job.chdir=true` makes the run's folder); "" for
    an absolute path, which says it already."""
    path = Path(path)
    return "" if path.is_absolute() else f" (looked for {path.absolute()})"


def file_in_the_way(path: str | os.PathLike, itself: bool = True) -> Path | None:
    """The file (not folder) at `path` (with `itself`) or at one of its parents: what would stop a
    run from making its output folders there, found before anything is written."""
    path = Path(path).absolute()
    return next((p for p in ((path,) if itself else ()) + tuple(path.parents) if p.exists() and not p.is_dir()), None)


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file (a model or checkpoint named in reports and indexes), read in blocks."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def split_keys(keys: Iterable[str], fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0) -> dict[str, str]:
    """The split of every key (a source: an authentic image and everything made from it).

    Keys are sorted, shuffled by `seed` and cut by cumulative rounding of `fractions`, so the sizes
    always sum to the number of keys. With three keys or more, val and test get at least one key
    each when their fraction is positive (taken from the largest split): a handful of photos must
    still give a usable validation and test split. The one split assigner of the toolkit.
    """
    fractions = tuple(float(f) for f in fractions)
    if len(fractions) != 3 or abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ValueError(f"split fractions must be three non-negative numbers summing to 1, got {fractions}")
    ordered = sorted(set(keys))
    random.Random(seed).shuffle(ordered)
    n = len(ordered)
    train_end, val_end = round(fractions[0] * n), round((fractions[0] + fractions[1]) * n)
    sizes = [train_end, val_end - train_end, n - val_end]
    if n >= 3:
        for i in (1, 2):
            if fractions[i] > 0 and sizes[i] == 0:
                sizes[max(range(3), key=lambda j: sizes[j])] -= 1
                sizes[i] += 1
    bounds = (sizes[0], sizes[0] + sizes[1])
    return {
        key: SPLITS[0] if i < bounds[0] else SPLITS[1] if i < bounds[1] else SPLITS[2] for i, key in enumerate(ordered)
    }


def split_keys_by_group(
    groups: Mapping[str, str], fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0
) -> dict[str, str]:
    """`split_keys` within each group of keys (`groups`: key -> group), so every group (a kind of
    image) has its sources in train, val and test in the fractions asked: a kind whose few sources
    all fell in test would otherwise be one the detector never trained on."""
    members: dict[str, list[str]] = {}
    for key, group in groups.items():
        members.setdefault(group, []).append(key)
    return {key: split for keys in members.values() for key, split in split_keys(keys, fractions, seed).items()}


def write_manifest(rows: Iterable[Mapping[str, Any] | Any], path: str | os.PathLike) -> None:
    """Write manifest rows (mappings or `Record`s) as a CSV with `MANIFEST_COLUMNS`, atomically.

    Paths inside the manifest's folder are written relative to it, so the folder can be moved.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    base = path.parent.resolve()
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=MANIFEST_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for item in rows:
            values = dataclasses.asdict(item) if dataclasses.is_dataclass(item) else dict(item)
            row = {key: "" if values.get(key) is None else str(values[key]) for key in MANIFEST_COLUMNS}
            for key in ("path", "mask"):
                if row[key]:
                    absolute = Path(row[key]).resolve()
                    row[key] = os.path.relpath(absolute, base) if absolute.is_relative_to(base) else str(absolute)
            writer.writerow(row)
    os.replace(tmp, path)


def apply_chain(image: np.ndarray, chain: str) -> np.ndarray:
    """`image` (H x W x 3 uint8 RGB) after the processing `chain`: an image's history in a name.

    `genuine` (unchanged), `jpeg<quality>`, `resize<factor>_<kernel>` (kernel: nearest, area,
    bilinear, bicubic, lanczos; the size changes by `factor`), `median<k>`, `bilateral`,
    `blur<sigma>`. Unknown names raise ValueError listing the known forms. JPEG, resizing and blur
    are `imageops`' (imported here, so reading images does not load OpenCV).
    """
    import cv2

    import imageops

    if chain == "genuine":
        return image
    if match := re.fullmatch(r"jpeg(\d+)", chain):
        return imageops.jpeg(image, int(match[1]))
    if match := re.fullmatch(r"resize([\d.]+)_(\w+)", chain):
        factor, kernel = float(match[1]), match[2]
        if kernel not in imageops.RESAMPLING_KERNELS:
            raise ValueError(
                f"unknown resampling kernel {kernel!r} in chain {chain!r}; known: {sorted(imageops.RESAMPLING_KERNELS)}"
            )
        return imageops.rescale(image, factor, kernel)
    if match := re.fullmatch(r"median(\d+)", chain):
        return cv2.medianBlur(image, int(match[1]))
    if chain == "bilateral":
        return cv2.bilateralFilter(image, 5, 25, 5)
    if match := re.fullmatch(r"blur([\d.]+)", chain):
        return imageops.gaussian_blur(image, float(match[1]))
    raise ValueError(
        f"unknown processing chain {chain!r}; names: genuine, jpeg<q>, resize<f>_<kernel>, "
        "median<k>, bilateral, blur<sigma>"
    )
