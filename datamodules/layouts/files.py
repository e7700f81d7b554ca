"""Finding images, masks and named folders in a dataset tree, and saying what was found instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datamodules.io import is_image_file
from datamodules.records import LayoutError, paths_below

# a mask is named after its image, with one of these suffixes
MASK_SUFFIXES = ("", "_gt", "_mask", "-gt", "_GT", "-mask")


def images_under(folder: Path) -> list[Path]:
    """Every image file under `folder`, at any depth, sorted."""
    return [p for p in paths_below(folder) if p.is_file() and is_image_file(p)]


def describe(path: Path, limit: int = 8) -> str:
    """A short description of what is at `path`, for error messages."""
    if path.is_file():
        return f"a file ({path.suffix or 'no extension'})"
    try:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
    except OSError as error:
        return f"an unreadable folder ({error})"
    if not names:
        return "an empty folder"
    more = f", ... ({len(names)} entries)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def child_folder(folder: Path, names: tuple[str, ...]) -> Path | None:
    """The sub-folder of `folder` named one of `names` (case-insensitive), or None."""
    wanted = {n.lower() for n in names}
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if entry.is_dir() and entry.name.lower() in wanted:
            return entry
    return None


def load_json(path: Path) -> Any:
    """The JSON at `path`; a LayoutError naming the file when it cannot be read."""
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise LayoutError(f"{path}: unreadable JSON ({error})") from None


class NameIndex:
    """The files under `folder` named after images (their masks, their originals), found for an
    image by its path below its own folder (`A/x.png` -> `A/x_gt.png`: images of one name in two
    sub-folders each get their own), or by name alone where one file only has that name (a flat
    mask folder beside images sorted into sub-folders)."""

    def __init__(self, folder: Path, suffixes: tuple[str, ...] = MASK_SUFFIXES) -> None:
        self.suffixes = suffixes
        self.by_path = {p.relative_to(folder).with_suffix("").as_posix(): p for p in images_under(folder)}
        self.by_name: dict[str, list[Path]] = {}
        for key, path in self.by_path.items():
            self.by_name.setdefault(key.rsplit("/", 1)[-1], []).append(path)

    def find(self, image: Path, image_folder: Path) -> Path | None:
        """The file named after `image` (found under `image_folder`), trying each suffix."""
        relative = image.relative_to(image_folder).with_suffix("").as_posix()
        for suffix in self.suffixes:
            if (hit := self.by_path.get(relative + suffix)) is not None:
                return hit
        for suffix in self.suffixes:
            if len(named := self.by_name.get(image.stem + suffix, [])) == 1:
                return named[0]
        return None


def pair_masks(images: list[Path], image_folder: Path, masks: NameIndex) -> dict[Path, Path | None]:
    """Each image's mask (None where it has none); a mask two images would share is refused, since
    it can be the mask of one of them only."""
    found = {image: masks.find(image, image_folder) for image in images}
    claimed: dict[Path, list[Path]] = {}
    for image, mask in found.items():
        if mask is not None:
            claimed.setdefault(mask, []).append(image)
    shared = next(((mask, owners) for mask, owners in claimed.items() if len(owners) > 1), None)
    if shared is not None:
        mask, owners = shared
        raise LayoutError(
            f"{owners[0]} and {owners[1]} both pair with the mask {mask} by name: put each mask in the "
            "sub-folder that matches its image's, or give the images distinct names"
        )
    return found
