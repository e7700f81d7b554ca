"""Manipulation datasets with true masks: IMDL `Tp`/`Gt`/`Au` folders, IMDL-BenCo JSON lists, CASIA/MVSS text
lists and THEMIS `original`/`forged`/`mask` triplets."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from datamodules.layouts.files import NameIndex, child_folder, describe, images_under, load_json, pair_masks
from datamodules.records import LayoutError, Record

log = logging.getLogger(__name__)

THEMIS_FOLDERS = {
    "original": ("original", "originals", "source", "au"),
    "forged": ("forged", "forgery", "fake", "tampered", "tp"),
    "mask": ("mask", "masks", "gt"),
}
# The last part of a forgery's name that numbers it among an original's forgeries (`cm0`, `sp1`,
# `v2`, `2`): only such a name is paired with an original its name extends (`p1_cm0` with `p1`);
# `p1-final` or `p1.edited` tells nothing of `p1`, and names are the only link the layout has.
VARIANT_TAG = re.compile(r"[A-Za-z]*\d+")


def read_imdl(root: str | os.PathLike) -> list[Record]:
    """IMDL folders: `Tp/` (tampered, label 1) paired by name with `Gt/` masks, optional `Au/` (0).

    A mask matches `<stem>.*`, `<stem>_gt.*`, `<stem>_mask.*` or `<stem>-gt.*`, in the sub-folder of
    `Gt/` that matches the image's in `Tp/`. Tampered images without a mask are listed without one
    (and said): localization drops them, takes them as wholly tampered or refuses them, as
    `data.missing_masks` says.
    """
    root = Path(root)
    tp, gt, au = child_folder(root, ("Tp",)), child_folder(root, ("Gt",)), child_folder(root, ("Au",))
    if tp is None or gt is None:
        raise LayoutError(f"{root}: expected IMDL folders Tp/ and Gt/ (and optionally Au/); found {describe(root)}")
    masks = pair_masks(images_under(tp), tp, NameIndex(gt))
    say_missing_masks(root, "tampered images in Tp/", "Gt/", masks)
    records = [Record(path=str(image), label=1, mask=str(mask) if mask else None) for image, mask in masks.items()]
    records += [Record(path=str(p), label=0) for p in (images_under(au) if au else [])]
    if not records:
        raise LayoutError(f"{root}: Tp/ and Gt/ exist but hold no images")
    return records


def say_missing_masks(root: Path, images: str, folder: str, masks: dict[Path, Path | None]) -> None:
    """One warning naming a few of the images that have no mask (data.missing_masks decides)."""
    missing = [image.name for image, mask in masks.items() if mask is None]
    if missing:
        log.warning(
            "%s: %d %s have no mask in %s (expected <name>.png or <name>_gt.png, in the sub-folder that "
            "matches the image's), e.g. %s",
            root,
            len(missing),
            images,
            folder,
            ", ".join(missing[:5]),
        )


def read_imdl_json(path: str | os.PathLike) -> list[Record]:
    """IMDL-BenCo JSON list `[[image, mask or "Negative"], ...]`; paths relative to the file."""
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, list) or not all(isinstance(e, (list, tuple)) and len(e) == 2 for e in data):
        kind = type(data).__name__
        raise LayoutError(
            f'{path}: expected a JSON list of [image, mask or "Negative"] pairs; '
            f"found a {kind}" + (f" starting with {data[:1]!r}" if isinstance(data, list) else "")
        )
    base, records = path.parent, []
    for index, (image, mask) in enumerate(data):
        for what, value in (("image", image), ("mask", mask)):
            if not isinstance(value, str) or not value.strip():  # null or "" would name the JSON's own folder
                raise LayoutError(
                    f"{path}: entry {index} ({json.dumps([image, mask])}): the {what} must be a path"
                    + (' or "Negative"' if what == "mask" else "")
                    + f", got {json.dumps(value)}"
                )
        image_path = Path(image) if Path(image).is_absolute() else base / image
        if str(mask).lower() == "negative":
            records.append(Record(path=str(image_path), label=0))
        else:
            mask_path = Path(mask) if Path(mask).is_absolute() else base / mask
            records.append(Record(path=str(image_path), label=1, mask=str(mask_path)))
    return records


def read_casia_list(path: str | os.PathLike) -> list[Record]:
    """CASIA/MVSS-Net text list: one `image mask label` per line, mask `None` for genuine images."""
    path = Path(path)
    base, records = path.parent, []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if len(parts) != 3 or parts[2] not in ("0", "1"):
                raise LayoutError(
                    f"{path}:{number}: expected `image mask label` (mask None for genuine, "
                    f"label 0 or 1); found {line.strip()!r}"
                )
            image, mask, label = parts

            def resolve(p: str) -> str:
                return str(Path(p) if Path(p).is_absolute() else base / p)

            records.append(
                Record(path=resolve(image), label=int(label), mask=None if mask.lower() == "none" else resolve(mask))
            )
    if not records:
        raise LayoutError(f"{path}: empty list; expected lines `image mask label`")
    return records


def is_themis_tree(folder: Path) -> bool:
    return child_folder(folder, THEMIS_FOLDERS["forged"]) is not None and (
        child_folder(folder, THEMIS_FOLDERS["mask"]) is not None
    )


def themis_trees(root: Path) -> list[Path]:
    """`root` when it holds the triplet folders, else its sub-folders that do (one tree per fraud type,
    `splicing/{original,forged,mask}/`...)."""
    if is_themis_tree(root):
        return [root]
    return (
        [child for child in sorted(root.iterdir()) if child.is_dir() and is_themis_tree(child)] if root.is_dir() else []
    )


def read_themis(root: str | os.PathLike) -> list[Record]:
    """THEMIS-style triplets: `original/`, `forged/`, `mask/` folders paired by file name, at the top
    or in one sub-folder per fraud type (`splicing/forged/...`: the sub-folder leads the group).

    Each forged image is label 1 with its mask, `group` = its sub-folder of `forged/` (the fraud type:
    `splicing`, `copy_move`, `ai_generated/tre`...; `themis` at the top level) and `source` = the
    original of its name, or, when its name ends in a numbered tag (`VARIANT_TAG`), of the longest
    name it extends before a `_`, `-` or `.` (`p1_cm0` and `p1_cm1` are forgeries of `p1`; `p1-final`
    is not), in the matching sub-folder, so that splits keep them with it; each original is label 0.
    Forged images without a mask or an original, and folders that are none of the three, are said.
    """
    root = Path(root)
    trees = themis_trees(root)
    if not trees:
        raise LayoutError(
            f"{root}: expected THEMIS triplet folders original/, forged/ and mask/ (or one sub-folder per "
            f"fraud type holding them); found {describe(root)}"
        )
    if trees == [root]:
        return read_themis_tree(root)
    unread = sorted(
        p.name + "/" for p in root.iterdir() if p.is_dir() and p not in trees and not p.name.startswith(".")
    )
    if unread:
        log.warning("%s: folders without original/, forged/ and mask/ are not read: %s", root, ", ".join(unread))
    return [record for tree in trees for record in read_themis_tree(tree, prefix=tree.name)]


def read_themis_tree(root: Path, prefix: str = "") -> list[Record]:
    """One THEMIS-style tree (see `read_themis`), its groups led by `prefix`."""
    folders = {role: child_folder(root, names) for role, names in THEMIS_FOLDERS.items()}
    say_unread_folders(root, folders)
    forged = folders["forged"]
    masks = pair_masks(images_under(forged), forged, NameIndex(folders["mask"]))
    say_missing_masks(root, "forged images", f"{folders['mask'].name}/", masks)
    originals = NameIndex(folders["original"], suffixes=("",)) if folders["original"] else None
    records, orphans = [], []
    for image, mask in masks.items():
        source = original_of(image, forged, originals) if originals else None
        if originals and source is None:
            orphans.append(image.name)
        sub_folder = image.parent.relative_to(forged).as_posix()
        group = (prefix or "themis") if sub_folder == "." else prefix + ("/" if prefix else "") + sub_folder
        records.append(
            Record(str(image), 1, str(mask) if mask else None, group, source=str(source) if source else None)
        )
    if orphans:
        log.warning(
            "%s: %d forged images have no original of their name (or of a name they extend with a numbered "
            "tag, p1_cm0 of p1) in %s/, so their split cannot follow one, e.g. %s",
            root,
            len(orphans),
            folders["original"].name,
            ", ".join(orphans[:5]),
        )
    records += [Record(path=str(p), label=0, source=str(p)) for p in (originals.by_path.values() if originals else ())]
    return records


def original_of(image: Path, forged: Path, originals: NameIndex) -> Path | None:
    """The original `image` was forged from: the one of its name, else, when the name ends in a
    numbered tag (`VARIANT_TAG`: `p1_cm0`, not `p1-final`), the one with the longest name that
    `image`'s name starts with before a `_`, `-` or `.`. Each is looked for in the
    matching sub-folder first, then by name alone where one original only has that name (a flat
    original/ beside forgeries sorted into sub-folders), as `NameIndex.find` does."""
    exact = originals.find(image, forged)
    if exact is not None or not VARIANT_TAG.fullmatch(re.split(r"[_\-.]", image.stem)[-1]):
        return exact
    relative = image.relative_to(forged).with_suffix("").as_posix()
    cuts = [i for i, char in enumerate(relative) if char in "_-." and "/" not in relative[i:]]
    by_path = (originals.by_path.get(relative[:i]) for i in reversed(cuts))
    folder = len(relative) - len(image.stem)  # where the name starts in `relative`
    by_name = (originals.by_name.get(relative[folder:i], []) for i in reversed(cuts))
    return next((p for p in by_path if p is not None), None) or next((o[0] for o in by_name if len(o) == 1), None)


def say_unread_folders(root: Path, folders: dict[str, Path | None]) -> None:
    """One warning for what a THEMIS tree holds besides its three folders (genuine images under
    another name than `original/` would otherwise go unscored without a word)."""
    used = {folder for folder in folders.values() if folder is not None}
    unread = sorted(p.name + "/" for p in root.iterdir() if p.is_dir() and p not in used and not p.name.startswith("."))
    if folders["original"] is None:
        log.warning(
            "%s: no original/ folder (original, originals, source or au): no genuine images are read%s",
            root,
            f"; not read: {', '.join(unread)}" if unread else "",
        )
    elif unread:
        log.warning("%s: folders that are not original/, forged/ or mask/ are not read: %s", root, ", ".join(unread))
