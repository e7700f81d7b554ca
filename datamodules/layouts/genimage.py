"""GenImage: `<generator>/[...]/{train,val}/{ai,nature}` folders of AI-generated and natural images."""

from __future__ import annotations

import os
from pathlib import Path

from datamodules.layouts.files import describe, images_under
from datamodules.records import LayoutError, Record, paths_below

GENIMAGE_LABELS = {"ai": 1, "nature": 0}
GENIMAGE_SPLITS = {"train": "train", "val": "val", "validation": "val", "test": "test"}


def read_genimage(root: str | os.PathLike) -> list[Record]:
    """GenImage: `<generator>/[...]/{train,val}/{ai,nature}/*`; ai = fake (1), nature = genuine (0).

    The generator (first folder under `root`) becomes `group`; `val` becomes the split `val`.
    """
    root = Path(root)
    records = []
    for label_dir in (p for p in paths_below(root) if p.is_dir() and p.name.lower() in GENIMAGE_LABELS):
        if label_dir.parent.name.lower() not in GENIMAGE_SPLITS:
            continue
        rel = label_dir.relative_to(root).parts
        group = rel[0] if len(rel) > 2 else None
        for image in images_under(label_dir):
            records.append(
                Record(
                    path=str(image),
                    label=GENIMAGE_LABELS[label_dir.name.lower()],
                    group=group,
                    split=GENIMAGE_SPLITS[label_dir.parent.name.lower()],
                )
            )
    if not records:
        raise LayoutError(
            f"{root}: expected GenImage folders <generator>/{{train,val}}/{{ai,nature}} "
            f"with images; found {describe(root)}"
        )
    return records


def is_genimage(root: Path) -> bool:
    """Some `{train,val}/{ai,nature}` folder pair exists under `root`."""
    return any(
        p.is_dir() and p.name.lower() in GENIMAGE_LABELS and p.parent.name.lower() in GENIMAGE_SPLITS
        for p in paths_below(root)
    )
