"""Manipulation datasets with true masks: IMDL `Tp`/`Gt`/`Au` folders, IMDL-BenCo JSON lists, CASIA/MVSS text
lists and THEMIS `original`/`forged`/`mask` triplets."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from datamodules.layouts.files import NameIndex, child_folder, describe, images_under, load_json, pair_masks
from datamodules.records import LayoutError, Record

log = logging.getLogger(__name__)

THEMIS_FOLDERS = {
    "original": ("original", "originals", "source", "au"),
    "forged": ("forged", "forgery", "fake", "tampered", "tp"),
    "mask": ("mask", "masks", "gt"),
}


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
    for image, mask in data:
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


def read_themis(root: str | os.PathLike) -> list[Record]:
    """THEMIS-style triplets: `original/`, `forged/`, `mask/` folders paired by file name.

    Each forged image is label 1 with its mask and `source` = the original of the same name (in the
    matching sub-folder); each original is label 0. Forged images without a mask are listed without
    one (and said), for `data.missing_masks` to decide.
    """
    root = Path(root)
    folders = {role: child_folder(root, names) for role, names in THEMIS_FOLDERS.items()}
    if folders["forged"] is None or folders["mask"] is None:
        raise LayoutError(
            f"{root}: expected THEMIS triplet folders original/, forged/ and mask/; found {describe(root)}"
        )
    forged = folders["forged"]
    masks = pair_masks(images_under(forged), forged, NameIndex(folders["mask"]))
    say_missing_masks(root, "forged images", f"{folders['mask'].name}/", masks)
    originals = NameIndex(folders["original"], suffixes=("",)) if folders["original"] else None
    records = []
    for image, mask in masks.items():
        source = originals.find(image, forged) if originals else None
        records.append(
            Record(
                path=str(image),
                label=1,
                mask=str(mask) if mask else None,
                group="themis",
                source=str(source) if source else None,
            )
        )
    records += [Record(path=str(p), label=0, source=str(p)) for p in (originals.by_path.values() if originals else ())]
    return records
