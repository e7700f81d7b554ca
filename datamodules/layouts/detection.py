"""Which layout a dataset path is in, and its records read through that layout's reader."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

from datamodules.io import looked_for
from datamodules.layouts.files import child_folder, describe
from datamodules.layouts.fraudbench import fraudbench_categories, read_fraudbench
from datamodules.layouts.genimage import is_genimage, read_genimage
from datamodules.layouts.manipulation import read_casia_list, read_imdl, read_imdl_json, read_themis, themis_trees
from datamodules.records import LayoutError, Record, every_image, list_images, paths_below, read_manifest, scan_folder

FILE_LAYOUTS = {
    ".csv": "manifest",
    ".jsonl": "manifest",
    ".ndjson": "manifest",
    ".json": "imdl_json",
    ".txt": "casia_list",
}

log = logging.getLogger(__name__)


def _is_folder(root: Path) -> bool:
    names = {"0_real", "1_fake", "real", "fake"}
    return any(p.is_dir() and p.name.lower() in names for p in paths_below(root))


LAYOUTS: dict[str, Callable[[Path], list[Record]]] = {
    "manifest": read_manifest,
    "folder": scan_folder,
    "images": every_image,
    "genimage": read_genimage,
    "fraudbench": read_fraudbench,
    "imdl": read_imdl,
    "imdl_json": read_imdl_json,
    "casia_list": read_casia_list,
    "themis": read_themis,
}
_EXPECTED = {
    "manifest": "a .csv/.jsonl manifest (or manifest.csv in the folder)",
    "folder": "0_real/ and 1_fake/ folders at any depth",
    "images": "every image below the folder, unlabelled (chosen with layout=images, never detected)",
    "genimage": "<generator>/{train,val}/{ai,nature}/",
    "fraudbench": "<Category>/{Positive,Negative,DeepFake}/",
    "imdl": "Tp/ and Gt/ (+ Au/)",
    "imdl_json": 'a .json list of [image, mask or "Negative"]',
    "casia_list": "a .txt list of `image mask label`",
    "themis": "original/, forged/ and mask/ (or a sub-folder per fraud type holding them)",
}


def _matching_layouts(path: Path) -> list[str]:
    """Every folder layout that `path` looks like; a top-level manifest wins (it indexes the folder)."""
    matches = []
    if (path / "manifest.csv").is_file() or (path / "manifest.jsonl").is_file():
        return ["manifest"]  # an explicit index of the folder (generate.py writes one)
    if child_folder(path, ("Tp",)) and child_folder(path, ("Gt",)):
        matches.append("imdl")
    if themis_trees(path) and "imdl" not in matches:
        matches.append("themis")
    if fraudbench_categories(path):
        matches.append("fraudbench")
    if is_genimage(path):
        matches.append("genimage")
    if _is_folder(path):
        matches.append("folder")
    return matches


def detect_layout(path: str | os.PathLike) -> str:
    """Name of the layout at `path`; a LayoutError when none or several match."""
    path = Path(path)
    if not path.exists():
        raise LayoutError(f"{path} does not exist{looked_for(path)}")
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in FILE_LAYOUTS:
            return FILE_LAYOUTS[suffix]
        raise LayoutError(
            f"{path}: cannot tell the layout of a {suffix or 'suffix-less'} file; expected "
            ".csv/.jsonl (manifest), .json (IMDL list) or .txt (CASIA/MVSS list)"
        )
    matches = _matching_layouts(path)
    if len(matches) == 1:
        return matches[0]
    expected = "; ".join(f"{k}: {v}" for k, v in _EXPECTED.items())
    if not matches:
        raise LayoutError(f"{path}: no known dataset layout. Expected one of: {expected}. Found: {describe(path)}")
    raise LayoutError(f"{path}: ambiguous layout, matches {', '.join(matches)}; choose one with layout=<name>")


def read_layout(path: str | os.PathLike, layout: str = "auto") -> list[Record]:
    """Records from `path` in `layout` (one of LAYOUTS, or `auto` to detect it)."""
    path = Path(path)
    if layout == "auto":
        layout = detect_layout(path)
        log.info("%s: read as the %s layout (detected; layout= chooses another)", path, layout)
    if layout == "manifest" and path.is_dir():  # a folder stands for the manifest indexing it
        found = [path / name for name in ("manifest.csv", "manifest.jsonl") if (path / name).is_file()]
        if not found:
            raise LayoutError(f"{path}: layout=manifest needs a manifest.csv or manifest.jsonl in this folder")
        path = found[0]
    if layout not in LAYOUTS:
        raise LayoutError(f"unknown layout {layout!r}; expected auto or one of {', '.join(LAYOUTS)}")
    return LAYOUTS[layout](path)


def records_from_input(path: str | os.PathLike, layout: str = "auto") -> list[Record]:
    """What `infer.py input=...` scores: one image file, or anything `train.py data=layout` reads.

    The layout is detected exactly as for training, so a manifest, a `0_real`/`1_fake` tree, GenImage,
    FraudBench (without its `Positive` sources, which are not evidence), IMDL or THEMIS folders and
    the list files all come with their labels, groups, categories and masks. A folder in no known
    layout is scored as unlabelled images (recursively); an ambiguous one asks for `layout=`.
    """
    path = Path(path)
    if not path.exists():
        raise LayoutError(f"input {path} does not exist{looked_for(path)}")
    if layout != "auto":
        return read_layout(path, layout)
    if path.is_file():  # a list or manifest by its suffix; any other file is one image to score
        return read_layout(path) if path.suffix.lower() in FILE_LAYOUTS else [Record(path=str(path))]
    if not _matching_layouts(path):
        return list_images(path)
    return read_layout(path)
