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


def mask_for(image: Path, masks: dict[str, Path]) -> Path | None:
    """The mask of `image` among `masks` (by stem), trying each of MASK_SUFFIXES."""
    for suffix in MASK_SUFFIXES:
        hit = masks.get(image.stem + suffix)
        if hit is not None:
            return hit
    return None
