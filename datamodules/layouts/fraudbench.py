"""FraudBench (App. B.1): `<Category>/{Positive,Negative,DeepFake}` folders of review photos and their fakes."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from datamodules.layouts.files import describe, images_under, load_json
from datamodules.records import LayoutError, Record

log = logging.getLogger(__name__)

FRAUDBENCH_SUBSETS = ("Positive", "Negative", "DeepFake")


def subsets_in(folder: Path) -> list[str]:
    return [s for s in FRAUDBENCH_SUBSETS if (folder / s).is_dir()]


def fraudbench_categories(root: Path) -> list[Path]:
    """The category folders of `root`: those holding any FraudBench subset, where at least one
    holds two (what tells the layout); `root` itself when it is one category folder."""
    if len(subsets_in(root)) >= 2:
        return [root]
    folders = sorted(p for p in root.iterdir() if p.is_dir() and subsets_in(p))
    return folders if any(len(subsets_in(p)) >= 2 for p in folders) else []


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
                out[f"{category.name}/{subset}/{meta.parent.name}"] = json_object(meta)
        for edit in sorted((category / "DeepFake").glob("Metadata/Edit_*.json")):
            review = "Review_" + edit.stem.split("_", 1)[1]
            out[f"{category.name}/DeepFake/{review}"] = json_object(edit)
    return out


def json_object(path: Path) -> dict[str, Any]:
    found = load_json(path)
    if not isinstance(found, dict):
        raise LayoutError(f"{path}: expected a JSON object of review fields, found a {type(found).__name__}")
    return found


def read_fraudbench(root: str | os.PathLike, include_positive: bool = False) -> list[Record]:
    """FraudBench (App. B.1): `<Category>/{Positive,Negative,DeepFake}`.

    `Negative/Review_*` are genuine damaged photos (label 0, group `real`); `DeepFake/<generator>/
    Review_*` are fakes (label 1, group = generator). `Positive` holds the sources only and is
    excluded from evaluation, so it is skipped unless `include_positive` (then label 0, group
    `positive`). `review` groups the images of one review. `category` is the folder name for every
    subset (a MetaReview's `category` is a display name, "All Beauty" for `All_Beauty`, which the
    fakes do not carry: two names would split one category's macro average). `source` keeps what
    must stay in one split: a fake's Positive image (the fakes of every generator made from it;
    named by review and file where the Positive folder is absent), a genuine review's images.
    """
    root = Path(root)
    categories = fraudbench_categories(root) if root.is_dir() else []
    if not categories:
        raise LayoutError(
            f"{root}: expected FraudBench category folders each holding "
            f"{'/'.join(FRAUDBENCH_SUBSETS)}; found {describe(root)}"
        )
    records = []
    for category in categories:
        subsets = [("Negative", 0, "real")] + ([("Positive", 0, "positive")] if include_positive else [])
        for subset, label, group in subsets:
            for review in sorted(p for p in (category / subset).glob("Review_*") if p.is_dir()):
                key = f"{category.name}/{subset}/{review.name}"
                for image in images_under(review):
                    records.append(
                        Record(
                            path=str(image), label=label, group=group, category=category.name, review=key, source=key
                        )
                    )
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
                            source=str(source) if source.is_file() else f"{category.name}/{review.name}/{image.stem}",
                        )
                    )
    if not records:
        raise LayoutError(
            f"{root}: FraudBench categories found but no images under "
            "Negative/Review_* or DeepFake/<generator>/Review_*"
        )
    say_categories_of_one_class(records)
    return records


def say_categories_of_one_class(records: list[Record]) -> None:
    """A category without genuine images or without fakes (a partial tree) is scored, but its
    balanced accuracy and F1 are not the benchmark's: named."""
    one_class = sorted({r.category for r in records} - {r.category for r in records if r.label == 0})
    one_class += sorted({r.category for r in records} - {r.category for r in records if r.label == 1})
    if one_class:
        log.warning(
            "FraudBench categories holding one class only (their balanced accuracy and F1 are not those of the "
            "benchmark): %s",
            ", ".join(one_class),
        )
