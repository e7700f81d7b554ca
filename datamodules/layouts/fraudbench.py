"""FraudBench (App. B.1): `<Category>/{Positive,Negative,DeepFake}` folders of review photos and their fakes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from datamodules.layouts.files import describe, images_under, load_json
from datamodules.records import LayoutError, Record

FRAUDBENCH_SUBSETS = ("Positive", "Negative", "DeepFake")


def fraudbench_categories(root: Path) -> list[Path]:
    """The category folders of `root`: those holding at least two of the FraudBench subsets."""
    return sorted(p for p in root.iterdir() if p.is_dir() and sum((p / s).is_dir() for s in FRAUDBENCH_SUBSETS) >= 2)


def fraudbench_metadata(root: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Review text, category and damage type per review, from `MetaReview_*.json` and `Edit_*.json`.

    Keys are the records' `review` ids (`<category>/<subset>/Review_XXX`, and for edits
    `<category>/DeepFake/Review_XXX`, shared by all generators). Values keep the JSON fields.
    """
    root = Path(root)
    out: dict[str, dict[str, Any]] = {}
    for category in fraudbench_categories(root):
        for subset in ("Positive", "Negative"):
            for meta in sorted((category / subset).glob("Review_*/MetaReview_*.json")):
                out[f"{category.name}/{subset}/{meta.parent.name}"] = load_json(meta)
        for edit in sorted((category / "DeepFake").glob("Metadata/Edit_*.json")):
            review = "Review_" + edit.stem.split("_", 1)[1]
            out[f"{category.name}/DeepFake/{review}"] = load_json(edit)
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
    categories = fraudbench_categories(root) if root.is_dir() else []
    if not categories:
        raise LayoutError(
            f"{root}: expected FraudBench category folders each holding "
            f"{'/'.join(FRAUDBENCH_SUBSETS)}; found {describe(root)}"
        )
    meta = fraudbench_metadata(root)
    records = []
    for category in categories:
        subsets = [("Negative", 0, "real")] + ([("Positive", 0, "positive")] if include_positive else [])
        for subset, label, group in subsets:
            for review in sorted(p for p in (category / subset).glob("Review_*") if p.is_dir()):
                key = f"{category.name}/{subset}/{review.name}"
                name = meta.get(key, {}).get("category") or category.name
                for image in images_under(review):
                    records.append(Record(path=str(image), label=label, group=group, category=str(name), review=key))
        deepfake = category / "DeepFake"
        for generator in sorted(p for p in deepfake.iterdir() if p.is_dir()) if deepfake.is_dir() else []:
            if generator.name == "Metadata":
                continue
            for review in sorted(p for p in generator.glob("Review_*") if p.is_dir()):
                for image in images_under(review):
                    source = category / "Positive" / review.name / image.name
                    records.append(
                        Record(
                            path=str(image),
                            label=1,
                            group=generator.name,
                            category=category.name,
                            review=f"{category.name}/DeepFake/{generator.name}/{review.name}",
                            source=str(source) if source.is_file() else None,
                        )
                    )
    if not records:
        raise LayoutError(
            f"{root}: FraudBench categories found but no images under "
            "Negative/Review_* or DeepFake/<generator>/Review_*"
        )
    return records
