"""Published dataset layouts -> `Record`s, with automatic detection.

Users arrive with public datasets as their authors ship them. Each reader turns one layout into the
same flat list of records (the manifest columns of docs/architecture.md), so every Dataset class, split
and metric sees one
shape. `read_layout(path)` detects the layout where that is unambiguous; `layout=` selects it
explicitly. A tree that does not match says what was expected and what was found.

Layouts: `manifest` (CSV/JSONL), `folder` (`0_real`/`1_fake` at any depth), `genimage`
(`<generator>/.../{train,val}/{ai,nature}`), `fraudbench` (App. B.1), `imdl` (`Tp`/`Gt` [+ `Au`]
folders), `imdl_json` (`[[image, mask or "Negative"], ...]`), `casia_list` (MVSS text lists
`image mask label`), `themis` (`original`/`forged`/`mask` triplets paired by name).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from datamodules.io import is_image_file
from datamodules.records import LayoutError, Record, list_images, read_manifest, scan_folder

__all__ = [
    "LAYOUTS", "detect_layout", "read_layout", "records_from_input", "read_genimage", "read_fraudbench",
    "fraudbench_metadata", "read_imdl", "read_imdl_json", "read_casia_list", "read_themis",
]

GENIMAGE_LABELS = {"ai": 1, "nature": 0}
GENIMAGE_SPLITS = {"train": "train", "val": "val", "validation": "val", "test": "test"}
FRAUDBENCH_SUBSETS = ("Positive", "Negative", "DeepFake")
FILE_LAYOUTS = {".csv": "manifest", ".jsonl": "manifest", ".ndjson": "manifest", ".json": "imdl_json",
                ".txt": "casia_list"}
MASK_SUFFIXES = ("", "_gt", "_mask", "-gt", "_GT", "-mask")
THEMIS_FOLDERS = {"original": ("original", "originals", "source", "au"),
                  "forged": ("forged", "forgery", "fake", "tampered", "tp"),
                  "mask": ("mask", "masks", "gt")}


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and is_image_file(p))


def _found(path: Path, limit: int = 8) -> str:
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


def _child(folder: Path, names: tuple[str, ...]) -> Path | None:
    wanted = {n.lower() for n in names}
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if entry.is_dir() and entry.name.lower() in wanted:
            return entry
    return None


# ---------------------------------------------------------------- GenImage
def read_genimage(root: str | os.PathLike) -> list[Record]:
    """GenImage: `<generator>/[...]/{train,val}/{ai,nature}/*`; ai = fake (1), nature = genuine (0).

    The generator (first folder under `root`) becomes `group`; `val` becomes the split `val`.
    """
    root = Path(root)
    records = []
    for label_dir in sorted(p for p in root.rglob("*") if p.is_dir() and p.name.lower() in GENIMAGE_LABELS):
        if label_dir.parent.name.lower() not in GENIMAGE_SPLITS:
            continue
        rel = label_dir.relative_to(root).parts
        group = rel[0] if len(rel) > 2 else None
        for image in _images(label_dir):
            records.append(Record(path=str(image), label=GENIMAGE_LABELS[label_dir.name.lower()],
                                  group=group, split=GENIMAGE_SPLITS[label_dir.parent.name.lower()]))
    if not records:
        raise LayoutError(f"{root}: expected GenImage folders <generator>/{{train,val}}/{{ai,nature}} "
                          f"with images; found {_found(root)}")
    return records


# ---------------------------------------------------------------- FraudBench
def _fraudbench_categories(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir()
                  and sum((p / s).is_dir() for s in FRAUDBENCH_SUBSETS) >= 2)


def _load_json(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise LayoutError(f"{path}: unreadable JSON ({error})") from None


def fraudbench_metadata(root: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Review text, category and damage type per review, from `MetaReview_*.json` and `Edit_*.json`.

    Keys are the records' `review` ids (`<category>/<subset>/Review_XXX`, and for edits
    `<category>/DeepFake/Review_XXX`, shared by all generators). Values keep the JSON fields.
    """
    root = Path(root)
    out: dict[str, dict[str, Any]] = {}
    for category in _fraudbench_categories(root):
        for subset in ("Positive", "Negative"):
            for meta in sorted((category / subset).glob("Review_*/MetaReview_*.json")):
                out[f"{category.name}/{subset}/{meta.parent.name}"] = _load_json(meta)
        for edit in sorted((category / "DeepFake").glob("Metadata/Edit_*.json")):
            review = "Review_" + edit.stem.split("_", 1)[1]
            out[f"{category.name}/DeepFake/{review}"] = _load_json(edit)
    return out


def read_fraudbench(root: str | os.PathLike, include_positive: bool = False) -> list[Record]:
    """FraudBench (App. B.1): `<Category>/{Positive,Negative,DeepFake}`.

    `Negative/Review_*` are genuine damaged photos (label 0, group `real`); `DeepFake/<generator>/
    Review_*` are fakes (label 1, group = generator, `source` = the Positive image of the same name
    when present). `Positive` holds the sources only and is excluded from evaluation, so it is
    skipped unless `include_positive` (then label 0, group `positive`). `review` groups the images of
    one review; `category` is the folder name, or the MetaReview's `category` when it has one.
    """
    root = Path(root)
    categories = _fraudbench_categories(root) if root.is_dir() else []
    if not categories:
        raise LayoutError(f"{root}: expected FraudBench category folders each holding "
                          f"{'/'.join(FRAUDBENCH_SUBSETS)}; found {_found(root)}")
    meta = fraudbench_metadata(root)
    records = []
    for category in categories:
        subsets = [("Negative", 0, "real")] + ([("Positive", 0, "positive")] if include_positive else [])
        for subset, label, group in subsets:
            for review in sorted(p for p in (category / subset).glob("Review_*") if p.is_dir()):
                key = f"{category.name}/{subset}/{review.name}"
                name = meta.get(key, {}).get("category") or category.name
                for image in _images(review):
                    records.append(Record(path=str(image), label=label, group=group,
                                          category=str(name), review=key))
        deepfake = category / "DeepFake"
        for generator in sorted(p for p in deepfake.iterdir() if p.is_dir()) if deepfake.is_dir() else []:
            if generator.name == "Metadata":
                continue
            for review in sorted(p for p in generator.glob("Review_*") if p.is_dir()):
                for image in _images(review):
                    source = category / "Positive" / review.name / image.name
                    records.append(Record(
                        path=str(image), label=1, group=generator.name, category=category.name,
                        review=f"{category.name}/DeepFake/{generator.name}/{review.name}",
                        source=str(source) if source.is_file() else None))
    if not records:
        raise LayoutError(f"{root}: FraudBench categories found but no images under "
                          "Negative/Review_* or DeepFake/<generator>/Review_*")
    return records


# ---------------------------------------------------------------- IMDL
def _mask_for(image: Path, masks: dict[str, Path]) -> Path | None:
    for suffix in MASK_SUFFIXES:
        hit = masks.get(image.stem + suffix)
        if hit is not None:
            return hit
    return None


def read_imdl(root: str | os.PathLike) -> list[Record]:
    """IMDL folders: `Tp/` (tampered, label 1) paired by name with `Gt/` masks, optional `Au/` (0).

    A mask matches `<stem>.*`, `<stem>_gt.*`, `<stem>_mask.*` or `<stem>-gt.*`. Tampered images
    without a mask are an error (the layout promises one), listing a few of them.
    """
    root = Path(root)
    tp, gt, au = _child(root, ("Tp",)), _child(root, ("Gt",)), _child(root, ("Au",))
    if tp is None or gt is None:
        raise LayoutError(f"{root}: expected IMDL folders Tp/ and Gt/ (and optionally Au/); "
                          f"found {_found(root)}")
    masks = {p.stem: p for p in _images(gt)}
    records, missing = [], []
    for image in _images(tp):
        mask = _mask_for(image, masks)
        if mask is None:
            missing.append(image.name)
        records.append(Record(path=str(image), label=1, mask=str(mask) if mask else None))
    if missing:
        raise LayoutError(f"{root}: {len(missing)} tampered images in Tp/ have no mask in Gt/ "
                          f"(expected <name>.png or <name>_gt.png), e.g. {', '.join(missing[:5])}")
    records += [Record(path=str(p), label=0) for p in (_images(au) if au else [])]
    if not records:
        raise LayoutError(f"{root}: Tp/ and Gt/ exist but hold no images")
    return records


def read_imdl_json(path: str | os.PathLike) -> list[Record]:
    """IMDL-BenCo JSON list `[[image, mask or "Negative"], ...]`; paths relative to the file."""
    path = Path(path)
    data = _load_json(path)
    if not isinstance(data, list) or not all(isinstance(e, (list, tuple)) and len(e) == 2 for e in data):
        kind = type(data).__name__
        raise LayoutError(f"{path}: expected a JSON list of [image, mask or \"Negative\"] pairs; "
                          f"found a {kind}" + (f" starting with {data[:1]!r}" if isinstance(data, list) else ""))
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
                raise LayoutError(f"{path}:{number}: expected `image mask label` (mask None for genuine, "
                                  f"label 0 or 1); found {line.strip()!r}")
            image, mask, label = parts

            def resolve(p: str) -> str:
                return str(Path(p) if Path(p).is_absolute() else base / p)

            records.append(Record(path=resolve(image), label=int(label),
                                  mask=None if mask.lower() == "none" else resolve(mask)))
    if not records:
        raise LayoutError(f"{path}: empty list; expected lines `image mask label`")
    return records


# ---------------------------------------------------------------- THEMIS triplets
def read_themis(root: str | os.PathLike) -> list[Record]:
    """THEMIS-style triplets: `original/`, `forged/`, `mask/` folders paired by file name.

    Each forged image is label 1 with its mask and `source` = the original of the same stem; each
    original is label 0. Forged images without a mask are an error.
    """
    root = Path(root)
    folders = {role: _child(root, names) for role, names in THEMIS_FOLDERS.items()}
    if folders["forged"] is None or folders["mask"] is None:
        raise LayoutError(f"{root}: expected THEMIS triplet folders original/, forged/ and mask/; "
                          f"found {_found(root)}")
    masks = {p.stem: p for p in _images(folders["mask"])}
    originals = {p.stem: p for p in _images(folders["original"])} if folders["original"] else {}
    records, missing = [], []
    for image in _images(folders["forged"]):
        mask = _mask_for(image, masks)
        if mask is None:
            missing.append(image.name)
            continue
        source = originals.get(image.stem)
        records.append(Record(path=str(image), label=1, mask=str(mask), group="themis",
                              source=str(source) if source else None))
    if missing:
        raise LayoutError(f"{root}: {len(missing)} forged images have no mask in "
                          f"{folders['mask'].name}/, e.g. {', '.join(missing[:5])}")
    records += [Record(path=str(p), label=0, source=str(p)) for p in originals.values()]
    return records


# ---------------------------------------------------------------- detection
def _is_genimage(root: Path) -> bool:
    return any(p.is_dir() and p.name.lower() in GENIMAGE_LABELS and p.parent.name.lower() in GENIMAGE_SPLITS
               for p in root.rglob("*"))


def _is_folder(root: Path) -> bool:
    names = {"0_real", "1_fake", "real", "fake"}
    return any(p.is_dir() and p.name.lower() in names for p in root.rglob("*"))


LAYOUTS: dict[str, Callable[[Path], list[Record]]] = {
    "manifest": read_manifest, "folder": scan_folder, "genimage": read_genimage,
    "fraudbench": read_fraudbench, "imdl": read_imdl, "imdl_json": read_imdl_json,
    "casia_list": read_casia_list, "themis": read_themis,
}
_EXPECTED = {
    "manifest": "a .csv/.jsonl manifest (or manifest.csv in the folder)",
    "folder": "0_real/ and 1_fake/ folders at any depth",
    "genimage": "<generator>/{train,val}/{ai,nature}/",
    "fraudbench": "<Category>/{Positive,Negative,DeepFake}/",
    "imdl": "Tp/ and Gt/ (+ Au/)",
    "imdl_json": "a .json list of [image, mask or \"Negative\"]",
    "casia_list": "a .txt list of `image mask label`",
    "themis": "original/, forged/ and mask/",
}


def _matching_layouts(path: Path) -> list[str]:
    """Every folder layout that `path` looks like; a top-level manifest wins (it indexes the folder)."""
    matches = []
    if (path / "manifest.csv").is_file() or (path / "manifest.jsonl").is_file():
        return ["manifest"]  # an explicit index of the folder (generate.py writes one)
    if _child(path, ("Tp",)) and _child(path, ("Gt",)):
        matches.append("imdl")
    if _child(path, THEMIS_FOLDERS["forged"]) and _child(path, THEMIS_FOLDERS["mask"]) \
            and "imdl" not in matches:
        matches.append("themis")
    if _fraudbench_categories(path):
        matches.append("fraudbench")
    if _is_genimage(path):
        matches.append("genimage")
    if _is_folder(path):
        matches.append("folder")
    return matches


def detect_layout(path: str | os.PathLike) -> str:
    """Name of the layout at `path`; a LayoutError when none or several match."""
    path = Path(path)
    if not path.exists():
        raise LayoutError(f"{path} does not exist")
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in FILE_LAYOUTS:
            return FILE_LAYOUTS[suffix]
        raise LayoutError(f"{path}: cannot tell the layout of a {suffix or 'suffix-less'} file; expected "
                          ".csv/.jsonl (manifest), .json (IMDL list) or .txt (CASIA/MVSS list)")
    matches = _matching_layouts(path)
    if len(matches) == 1:
        return matches[0]
    expected = "; ".join(f"{k}: {v}" for k, v in _EXPECTED.items())
    if not matches:
        raise LayoutError(f"{path}: no known dataset layout. Expected one of: {expected}. "
                          f"Found: {_found(path)}")
    raise LayoutError(f"{path}: ambiguous layout, matches {', '.join(matches)}; "
                      f"choose one with layout=<name>")


def read_layout(path: str | os.PathLike, layout: str = "auto") -> list[Record]:
    """Records from `path` in `layout` (one of LAYOUTS, or `auto` to detect it)."""
    path = Path(path)
    if layout == "auto":
        layout = detect_layout(path)
        if layout == "manifest" and path.is_dir():
            path = path / "manifest.csv" if (path / "manifest.csv").is_file() else path / "manifest.jsonl"
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
        raise LayoutError(f"input {path} does not exist")
    if layout != "auto":
        return read_layout(path, layout)
    if path.is_file():  # a list or manifest by its suffix; any other file is one image to score
        return read_layout(path) if path.suffix.lower() in FILE_LAYOUTS else [Record(path=str(path))]
    if not _matching_layouts(path):
        return list_images(path)
    return read_layout(path)
