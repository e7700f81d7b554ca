"""Datasets on disk -> a flat list of `Record`s: the manifest and `0_real`/`1_fake` folder trees.

Every layout ends up as records, so Dataset classes, splits and `infer.py` only ever see one shape.
"""

from __future__ import annotations

import csv
import difflib
import functools
import json
import logging
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from datamodules.io import MANIFEST_COLUMNS, SPLITS, is_image_file, looked_for, split_keys, write_manifest

__all__ = [
    "SPLITS",
    "MANIFEST_COLUMNS",
    "LayoutError",
    "Record",
    "read_manifest",
    "write_manifest",
    "scan_folder",
    "list_images",
    "assign_splits",
]

GENUINE_FOLDERS = {"0_real": 0, "real": 0}
FAKE_FOLDERS = {"1_fake": 1, "fake": 1}
log = logging.getLogger(__name__)


class LayoutError(ValueError):
    """A dataset on disk that does not look like the layout it was read as."""


class SettingError(ValueError):
    """A setting outside what it can be (its message names the setting and its range): always an
    expected failure of an entry point."""


@dataclass
class Record:
    """One image and what is known about it: the manifest columns (docs/architecture.md, "Data contracts")."""

    path: str
    label: int | None = None
    mask: str | None = None
    group: str | None = None
    category: str | None = None
    source: str | None = None
    split: str | None = None
    review: str | None = None

    def to_row(self) -> dict[str, str]:
        return {k: "" if v is None else str(v) for k, v in asdict(self).items()}


def _clean(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _resolve(base: Path, value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value)
    return str(path if path.is_absolute() else base / path)


def parse_label(value: object, where: str, meaning: str = "0 (genuine) or 1 (fake)") -> int | None:
    """A row's 0/1 label (None when empty); anything else is refused naming `where` and `meaning`."""
    text = _clean(value)
    if text is None:
        return None
    try:
        number = float(text)
    except ValueError:
        number = None
    if number not in (0.0, 1.0):  # 0.7, -0.5 or inf are no label to round
        raise LayoutError(f"{where}: label must be {meaning}, got {text!r}")
    return int(number)


def jsonl_rows(path: Path) -> list[dict]:
    """The objects of a JSONL manifest (of images or of pairs), one per non-empty line; a line that
    is none is refused by its number."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise LayoutError(f"{path}:{number}: not JSON ({error.msg})") from None
            if not isinstance(row, dict):
                raise LayoutError(f"{path}:{number}: each line must be a JSON object, got {line.strip()[:60]}")
            rows.append(row)
    return rows


def sources_as_paths(base: Path, records: list[Record]) -> list[Record]:
    """A `source` that names another row's image, written as paths are written, becomes that
    row's resolved path: a genuine row without a source is its own source under its resolved path,
    so its fakes must carry the same key to stay in its split (they straddled splits)."""
    paths = {record.path for record in records}
    resolved = {r.source: _resolve(base, r.source) for r in records if r.source}
    return [replace(r, source=resolved[r.source]) if r.source and resolved[r.source] in paths else r for r in records]


def csv_rows(path: Path) -> tuple[list[dict[str, Any]], set[str]]:
    """A CSV manifest's rows and columns; a column named twice in the header, or a row with more
    fields than the header (an unquoted comma in a path), is refused rather than read one way."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        names = list(reader.fieldnames or ())
    if repeated := sorted({name for name in names if names.count(name) > 1}):
        raise LayoutError(f"manifest {path}: column {repeated[0]!r} appears twice in the header; which is meant?")
    if longer := next((number for number, row in enumerate(rows, start=2) if None in row), None):
        raise LayoutError(f"{path}:{longer}: more fields than the header has columns (a comma in a path unquoted?)")
    return rows, set(names)


def read_manifest(path: str | os.PathLike) -> list[Record]:
    """Read a CSV (with header) or JSONL manifest; relative paths are taken from its folder."""
    path = Path(path)
    if not path.is_file():
        raise LayoutError(f"manifest {path} does not exist{looked_for(path)}")
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        rows = jsonl_rows(path)
        columns = set().union(*(row.keys() for row in rows)) if rows else set()
    else:
        rows, columns = csv_rows(path)
    if "path" not in columns:
        raise LayoutError(
            f"manifest {path} has no `path` column (found: {', '.join(sorted(columns)) or 'nothing'}); "
            f"expected columns: {', '.join(MANIFEST_COLUMNS)}"
        )
    if {"score", "status", "label"} <= columns:
        raise LayoutError(
            f"{path} is a results file (columns score, status): its label column holds the decisions, not the "
            "truth; give a manifest whose label is the truth (a results file's true_label column, renamed)"
        )
    unknown = columns - set(MANIFEST_COLUMNS)
    for name in sorted(unknown):
        meant = difflib.get_close_matches(name.strip().lower(), MANIFEST_COLUMNS, n=1, cutoff=0.75)
        if meant and meant[0] not in columns:  # a misspelled `label` would make every row unlabelled
            raise LayoutError(
                f"manifest {path}: column {name!r} is not one of {', '.join(MANIFEST_COLUMNS)}; "
                f"did you mean {meant[0]!r}?"
            )
    base = path.parent
    records = []
    for number, row in enumerate(rows, start=1 if path.suffix.lower() in (".jsonl", ".ndjson") else 2):
        where = f"{path}:{number}"
        split = _clean(row.get("split"))
        if split is not None and split not in SPLITS:
            raise LayoutError(f"{where}: split must be one of {SPLITS}, got {split!r}")
        if _clean(row.get("path")) is None:
            raise LayoutError(f"{where}: empty path")
        records.append(
            Record(
                path=_resolve(base, _clean(row["path"])),
                label=parse_label(row.get("label"), where),
                mask=_resolve(base, _clean(row.get("mask"))),
                group=_clean(row.get("group")),
                category=_clean(row.get("category")),
                source=_clean(row.get("source")),
                split=split,
                review=_clean(row.get("review")),
            )
        )
    check_repeated_paths(path, records)
    say_unlabelled(path, records)
    if unknown:
        log.info(
            "manifest %s: columns %s are not record columns; only an option that names one (group_by=...) reads it",
            path,
            sorted(unknown),
        )
    return sources_as_paths(base, records)


def say_unlabelled(manifest: Path, records: list[Record]) -> None:
    """Rows without a label in a manifest that labels others are neither genuine nor fake: said once
    here, for every reader (infer.py's metrics, calibrate.py, the benchmarks' splits), with their
    count. A manifest that labels nothing is a list of images to score: nothing to say."""
    unlabelled = sum(record.label is None for record in records)
    if 0 < unlabelled < len(records):
        log.warning(
            "manifest %s: %d of %d row(s) have no label, so they are left out of metrics and calibration "
            "(neither genuine nor fake)",
            manifest,
            unlabelled,
            len(records),
        )


def check_repeated_paths(manifest: Path, records: list[Record]) -> None:
    """An image listed with both labels, or in two categories, has no truth (metrics and per-category
    thresholds would take one of them): refused. One listed more than once alike is said (training
    draws it once per row; infer.py scores it once)."""
    labels: dict[str, set[int | None]] = {}
    categories: dict[str, set[str]] = {}
    for record in records:
        labels.setdefault(record.path, set()).add(record.label)
        categories.setdefault(record.path, set()).add(record.category or "")
    conflicting = [p for p, found in labels.items() if len(found - {None}) > 1]
    if conflicting:
        raise LayoutError(
            f"manifest {manifest}: {len(conflicting)} image(s) listed as both genuine and fake, e.g. {conflicting[0]}"
        )
    if twice := {p: sorted(found - {""}) for p, found in categories.items() if len(found - {""}) > 1}:
        path, found = next(iter(twice.items()))
        raise LayoutError(
            f"manifest {manifest}: {len(twice)} image(s) listed in two categories or more, e.g. {path} "
            f"({', '.join(map(repr, found))})"
        )
    if len(labels) < len(records):
        log.warning("manifest %s lists %d image(s) more than once", manifest, len(records) - len(labels))


def walk_folders(root: str | os.PathLike) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk` of `root`, folders in name order, into linked folders too (an archive assembled
    from links is read whole), each real folder once, and not a link to a folder on the way to it
    (a link back up the tree ends there, even one above `root`)."""
    seen: set[str] = set()
    real = functools.lru_cache(maxsize=None)(os.path.realpath)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        here = real(dirpath)
        if here in seen or here in {real(str(folder)) for folder in Path(dirpath).absolute().parents}:
            dirnames[:] = []
            continue
        seen.add(here)
        dirnames.sort()
        yield dirpath, dirnames, filenames


def paths_below(root: str | os.PathLike) -> list[Path]:
    """Every folder and file below `root` (`walk_folders`' rules), sorted: `Path.rglob` skips linked
    folders."""
    found = []
    for dirpath, dirnames, filenames in walk_folders(root):
        found += [Path(dirpath) / name for name in [*dirnames, *filenames]]
    return sorted(found)


def scan_folder(root: str | os.PathLike) -> list[Record]:
    """Images under `0_real`/`1_fake` (or `real`/`fake`) folders at any depth below `root`.

    The folders between `root` and the label folder name the generator (`group`), as in the
    CNNSpot / UnivFD trees; a `train`/`val`/`test` folder on the way sets the split.
    """
    root = Path(root)
    if not root.is_dir():
        raise LayoutError(f"{root} is not a folder")
    records, outside = [], 0
    for dirpath, _, filenames in walk_folders(root):
        relative = Path(dirpath).relative_to(root).parts
        lowered = [part.lower() for part in relative]
        label_at = [i for i, part in enumerate(lowered) if part in GENUINE_FOLDERS or part in FAKE_FOLDERS]
        if not label_at:
            outside += sum(1 for name in filenames if is_image_file(name))
            continue
        at = label_at[-1]
        label = {**GENUINE_FOLDERS, **FAKE_FOLDERS}[lowered[at]]
        split = next((part for part in lowered[:at] if part in SPLITS), None)
        group_parts = [p for p, low in zip(relative[:at], lowered[:at]) if low not in SPLITS]
        for name in sorted(filenames):
            if is_image_file(name):
                records.append(
                    Record(
                        path=str(Path(dirpath) / name), label=label, group="/".join(group_parts) or None, split=split
                    )
                )
    if not records:
        raise LayoutError(
            f"{root}: expected images under `0_real`/`1_fake` (or `real`/`fake`) sub-folders at any depth, found none"
        )
    if outside:  # read as labelled: the images beside the label folders are not read, and that is said
        log.warning(
            "%s: read as a real/fake folder tree, %d image(s) outside its label folders are left out "
            "(layout=images reads every image, unlabelled)",
            root,
            outside,
        )
    return records


def every_image(root: str | os.PathLike) -> list[Record]:
    """`layout=images`: every image file below `root`, unlabelled, whatever its folders are named."""
    root = Path(root)
    if not root.is_dir():
        raise LayoutError(f"{root} is not a folder")
    return [Record(path=str(p)) for p in paths_below(root) if p.is_file() and is_image_file(p)]


def list_images(root: str | os.PathLike) -> list[Record]:
    """Every image file below `root` (recursively), unlabelled unless it sits in a label folder."""
    root = Path(root)
    try:
        return scan_folder(root)
    except LayoutError:  # no label folders: the images are simply unlabelled
        files = [p for p in paths_below(root) if p.is_file() or (p.is_symlink() and not p.is_dir())]
        paths = sorted(p for p in files if p.is_file() and is_image_file(p))
        if len(paths) < len(files):  # other formats, notes, broken links: no row, so said here
            kinds = sorted({p.suffix.lower() or p.name for p in files if not (p.is_file() and is_image_file(p))})
            log.info("%s: %d file(s) not read as images (%s)", root, len(files) - len(paths), ", ".join(kinds[:8]))
        return [Record(path=str(p)) for p in paths]


def assign_splits(
    records: Sequence[Record], fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0
) -> list[Record]:
    """Give every record without a split one, keeping all images of one `source` together.

    Fakes made from one authentic image must never straddle train and test: the detector would
    be scored on content it has seen. Records without a source are their own source. The splits
    come from `datamodules.io.split_keys`, the one assigner that generated datasets use too.
    """
    chosen = split_keys((r.source or r.path for r in records if r.split is None), fractions, seed)
    return [r if r.split is not None else Record(**{**asdict(r), "split": chosen[r.source or r.path]}) for r in records]
