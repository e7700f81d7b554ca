"""What the reviewers' page draws: thumbnails, maps in one fixed colour scale over them, masks at
the threshold, duplication pairs side by side, and links to the scored images. Every picture is a
file under the page's sibling folder, or the scored file itself where it is small (`shown_as_itself`);
nothing here writes HTML."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

import numpy as np

from datamodules.io import IMAGE_EXTENSIONS, ImageReadError, read_image, write_image

THUMBNAIL_SIDE = 160  # px, longest side
OVERLAY_ALPHA = 0.55  # how much of the colour map covers the thumbnail
PICTURE_QUALITY = 75  # JPEG quality of thumbnails and overlays
# A scored image this small, in a format browsers show, can be its own thumbnail: the page shows
# the file instead of a drawn copy (a sharper picture, and no work while scoring).
SOURCE_AS_THUMBNAIL_SIDE = 4 * THUMBNAIL_SIDE  # px, longest side (the browser shrinks it at most 4 times)
SOURCE_AS_THUMBNAIL_BYTES = 256_000
BROWSER_FORMATS = frozenset(IMAGE_EXTENSIONS) - {".tif", ".tiff"}  # what the toolkit reads, but TIFF


def colour_lut() -> np.ndarray:
    """256 x 3 uint8 RGB: probability p (as 8-bit 0-255) to colour, the same for every image
    (inferno, OpenCV's table: matplotlib's to the last bit, without importing matplotlib)."""
    import cv2

    return np.ascontiguousarray(
        cv2.applyColorMap(np.arange(256, dtype=np.uint8).reshape(256, 1), cv2.COLORMAP_INFERNO)[:, 0, ::-1]
    )


def thumbnail(image: np.ndarray, side: int = THUMBNAIL_SIDE) -> np.ndarray:
    """The image shrunk so its longest side is at most `side` (never enlarged; a copy either way).

    Every drawn image gets one, so it must cost little beside decoding. Halving by 2 x 2 area
    averaging is OpenCV's fast path: an image up to twice `side` is halved (its longest side lands
    between 3/4 of `side` and `side`), one up to four times `side` is first resampled bilinearly
    to twice the thumbnail and then halved (16 samples per thumbnail pixel). A larger one is
    resampled bilinearly straight to the thumbnail (4 samples per pixel), so a 4000 px photo costs
    what an 800 px one does."""
    import cv2

    height, width = image.shape[:2]
    longest = max(height, width)
    if longest <= side:
        return image.copy()
    size = (max(1, round(width * side / longest)), max(1, round(height * side / longest)))
    if longest < 1.5 * side or longest > 4 * side:
        return cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)
    if longest > 2 * side:
        image = cv2.resize(image, (2 * size[0], 2 * size[1]), interpolation=cv2.INTER_LINEAR)
        height, width = image.shape[:2]
    image = image[: height // 2 * 2 or 2, : width // 2 * 2 or 2]
    return cv2.resize(image, (max(1, width // 2), max(1, height // 2)), interpolation=cv2.INTER_AREA)


def shown_as_itself(path: str, shape: tuple[int, ...]) -> bool:
    """Whether the scored file at `path` (decoded to `shape`) is small enough to be its own
    thumbnail: a browser format, at most `SOURCE_AS_THUMBNAIL_SIDE` px and `SOURCE_AS_THUMBNAIL_BYTES`."""
    if max(shape[:2]) > SOURCE_AS_THUMBNAIL_SIDE or os.path.splitext(path)[1].lower() not in BROWSER_FORMATS:
        return False
    try:
        return os.stat(path).st_size <= SOURCE_AS_THUMBNAIL_BYTES
    except OSError:
        return False


def write_picture(path: Path, picture: np.ndarray) -> None:
    """A thumbnail-size RGB or grey picture as JPEG (.jpg) or PNG: OpenCV encodes without holding
    Python's lock and one write makes the file (the page that names it is written after it)."""
    import cv2

    # OpenCV's own conversion to its BGR order: a reversed numpy view costs as much as the encoding
    bgr = cv2.cvtColor(picture, cv2.COLOR_RGB2BGR) if picture.ndim == 3 else picture
    path.write_bytes(encode_picture(bgr, path.suffix))


def encode_picture(bgr: np.ndarray, suffix: str) -> bytes:
    """A BGR or grey picture as the bytes of a `suffix` (.jpg or .png) file."""
    import cv2

    options = [cv2.IMWRITE_JPEG_QUALITY, PICTURE_QUALITY] if suffix == ".jpg" else []
    ok, encoded = cv2.imencode(suffix, np.ascontiguousarray(bgr), options)
    if not ok:
        raise OSError(f"could not encode a {suffix} picture")
    return encoded.tobytes()


def map_overlay(image_thumb: np.ndarray, map_u8: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """The map in fixed colours over the thumbnail (map resized to the thumbnail)."""
    import cv2

    height, width = image_thumb.shape[:2]
    small = cv2.resize(map_u8, (width, height), interpolation=cv2.INTER_AREA)
    colour = lut[small].astype(np.float32)
    blended = image_thumb.astype(np.float32) * (1 - OVERLAY_ALPHA) + colour * OVERLAY_ALPHA
    return blended.round().astype(np.uint8)


def mask_at_threshold(map_u8: np.ndarray, threshold: float) -> np.ndarray:
    """The pixels the decision rule counts as manipulated (8-bit maps: value / 255 >= threshold)."""
    return map_u8.astype(np.float32) / 255 >= threshold


@dataclass
class RowEvidence:
    """The files drawn for one row, relative to the page, and what they say."""

    thumb: str | None = None
    thumb_is_source: bool = False  # the page shows the scored file itself (`shown_as_itself`)
    overlay: str | None = None
    mask: str | None = None
    pixel_share: float | None = None
    problem: str | None = None
    # where a picture sits in a strip file of several (`inference.report_pictures`): (x, width, height)
    thumb_box: tuple[int, int, int] | None = None
    overlay_box: tuple[int, int, int] | None = None
    mask_box: tuple[int, int, int] | None = None


def draw_row(
    name: str,
    row: Mapping[str, Any],
    files: Path,
    threshold: float,
    lut: np.ndarray,
    relative_to: Path,
    maps: bool = True,
) -> RowEvidence:
    """Thumbnail (and for a row with a saved map, unless `maps` is off, overlay and mask) of one
    row, read from its files and written under `files` as `<name>.jpg` / `<name>.png`."""
    try:
        small = thumbnail(read_image(row["path"]))
    except (ImageReadError, OSError, ValueError) as error:
        return RowEvidence(problem=f"thumbnail not drawn: {error}")
    map_u8 = None
    if row.get("mask") and maps:
        try:
            map_u8 = read_image(row["mask"])[..., 0]
        except (ImageReadError, OSError, ValueError) as error:
            evidence = write_evidence(files, name, small, None, threshold, lut, relative_to)
            evidence.problem = f"map not drawn: {error}"
            return evidence
    return write_evidence(files, name, small, map_u8, threshold, lut, relative_to)


def write_evidence(
    files: Path,
    name: str,
    small: np.ndarray,
    map_u8: np.ndarray | None,
    threshold: float,
    lut: np.ndarray,
    relative_to: Path,
) -> RowEvidence:
    """Write the thumbnail `small` and, given the 8-bit map at the image's original size, its
    overlay and the mask at the threshold (thumbnail size) with the share of pixels above it."""
    evidence = RowEvidence()
    write_picture(files / "thumbs" / f"{name}.jpg", small)
    evidence.thumb = relative(files / "thumbs" / f"{name}.jpg", relative_to)
    if map_u8 is None:
        return evidence
    overlay, mask, evidence.pixel_share = map_pictures(small, map_u8, threshold, lut)
    write_picture(files / "overlays" / f"{name}.jpg", overlay)
    write_picture(files / "masks" / f"{name}.png", mask)
    evidence.overlay = relative(files / "overlays" / f"{name}.jpg", relative_to)
    evidence.mask = relative(files / "masks" / f"{name}.png", relative_to)
    return evidence


def map_pictures(
    small: np.ndarray, map_u8: np.ndarray, threshold: float, lut: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """(overlay, mask at the threshold, both at thumbnail size; share of the map's pixels above it)."""
    import cv2

    binary = mask_at_threshold(map_u8, threshold)
    mask_small = cv2.resize(binary.astype(np.uint8) * 255, small.shape[1::-1], interpolation=cv2.INTER_NEAREST)
    return map_overlay(small, map_u8, lut), mask_small, float(binary.mean())


def relative(path: Path, folder: Path) -> str:
    """`path` relative to `folder`, with `/` (both absolute or both relative to the same place)."""
    return os.path.relpath(path, folder).replace(os.sep, "/")


def image_link(path: str, relative_to: str | os.PathLike) -> str:
    """A link to a scored image: relative when it shares a drive with the page, else a file URL.

    Made from the absolute paths as written (no symlink resolution, which costs file-system calls
    per row): a browser joins a relative link to the page's address the same lexical way."""
    folder, name = os.path.split(path)
    prefix = folder_prefix(folder, os.fspath(relative_to))  # once per folder: a run's images share a few
    if prefix is None:
        return Path(absolute_folder(folder), name).as_uri()
    return f"{prefix}/{name if URL_SAFE_NAME.fullmatch(name) else quote(name)}"


URL_SAFE_NAME = re.compile(r"[A-Za-z0-9_.~-]+")  # what `quote` leaves as it is


@functools.lru_cache(maxsize=4096)
def folder_prefix(folder: str, relative_to: str) -> str | None:
    """`folder` as a quoted URL path relative to `relative_to`; None when it cannot be (another drive)."""
    try:
        return folder_link(absolute_folder(folder), absolute_folder(relative_to))
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def absolute_folder(folder: str) -> str:
    return os.path.abspath(folder)


@functools.lru_cache(maxsize=4096)
def folder_link(folder: str, relative_to: str) -> str:
    """`folder` relative to `relative_to` as a quoted URL path (cached: a run's images share folders)."""
    return quote(os.path.relpath(folder, relative_to).replace(os.sep, "/"))


def transform_in_words(transform: Mapping[str, Any] | None, operations: str = "") -> str:
    """'B is A rotated 180 degrees, scaled x0.50, mirrored left-right, brightness +12 %'.

    Reads the pair detector's transform (`rotation` in degrees, `scale`, `flipped`, `brightness` as
    the fractional change of B's mean level on the shared content), or `flip` by name and
    per-channel `gain`; `operations` (the row's, `;`-separated) names a change of colours or
    levels the transform has no words for (a copy turned grey keeps its brightness)."""
    if not transform:
        return ""
    parts = []
    rotation = float(transform.get("rotation", 0) or 0)
    if abs(rotation) >= 1:
        parts.append(f"rotated {rotation:.0f} degrees")
    scale = float(transform.get("scale", 1) or 1)
    if abs(scale - 1) >= 0.02:
        parts.append(f"scaled x{scale:.2f}")
    flip = transform.get("flip") or ("horizontal" if transform.get("flipped") else None)
    if flip and flip != "none":
        parts.append(
            {"horizontal": "mirrored left-right", "vertical": "mirrored top-bottom"}.get(flip, f"flipped ({flip})")
        )
    before_colour = len(parts)
    brightness = transform.get("brightness")
    if brightness is None and transform.get("gain") is not None:
        brightness = float(np.mean(transform["gain"])) - 1
    if brightness is not None and abs(float(brightness)) >= 0.03:
        parts.append(f"brightness {100 * float(brightness):+.0f} %")
    hue = transform.get("hue_shift")
    if hue is not None and abs(float(hue)) >= 3:
        parts.append(f"hue shifted {float(hue):+.0f} degrees")
    if "parameter" in operations.split(";") and len(parts) == before_colour:  # no colour change said
        parts.append("with colours or levels changed")
    return "B is A " + (", ".join(parts) if parts else "reused as it is")


def draw_pair(index: int, pair: Mapping[str, Any], files: Path) -> Path | None:
    """A and B side by side (same height) with the shared regions outlined and the matched points
    joined; None when either image cannot be read."""
    import cv2

    try:
        images = [read_image(pair["path_a"]), read_image(pair["path_b"])]
    except (ImageReadError, OSError, ValueError):
        return None
    height = 240
    scales = [height / im.shape[0] for im in images]
    panels = [
        cv2.resize(im, (max(1, round(im.shape[1] * s)), height), interpolation=cv2.INTER_AREA)
        for im, s in zip(images, scales)
    ]
    for panel, key, scale in zip(panels, ("mask_a", "mask_b"), scales):
        if pair.get(key):
            try:
                mask = read_image(pair[key])[..., 0] >= 128
            except (ImageReadError, OSError, ValueError):
                continue
            small = cv2.resize(mask.astype(np.uint8), panel.shape[1::-1], interpolation=cv2.INTER_NEAREST)
            contours, _ = cv2.findContours(small, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            cv2.drawContours(panel, contours, -1, (0, 255, 255), 2)
    gap = 8
    canvas = np.full((height, panels[0].shape[1] + gap + panels[1].shape[1], 3), 255, np.uint8)
    canvas[:, : panels[0].shape[1]] = panels[0]
    canvas[:, panels[0].shape[1] + gap :] = panels[1]
    offset = panels[0].shape[1] + gap
    for xa, ya, xb, yb in (pair.get("points") or [])[:60]:
        start = (round(xa * scales[0]), round(ya * scales[0]))
        end = (round(xb * scales[1]) + offset, round(yb * scales[1]))
        cv2.line(canvas, start, end, (0, 200, 0), 1, cv2.LINE_AA)
    target = files / "pairs" / f"{index:07d}.jpg"
    write_image(target, canvas, quality=85)
    return target
