"""Labelled panel pairs for fitting and measuring duplication detectors, split by source photo.

Positives are THEMIS duplications (`synthesis.duplication`: global and local, with their operation
sets and masks) of panels cut from the photos, and copies of chart, blot and micrograph panels.
Negatives are panels of two different photos, two non-overlapping crops of one photo (hard: same
scene, no shared pixels) and two different panels of one figure kind (hard: shared furniture).
Optionally (`synthesis.hard_pairs`), more hard negatives (panels of similar photos, more disjoint
crops, more panels of one figure kind) and figure-like groups whose every pair is labelled.
Panels carry ids, so a detector describes each panel once however many pairs it is in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import cv2
import numpy as np

from synthesis.common import PairDataError
from synthesis.duplication import MIN_LOCAL_SIDE, global_duplication, local_duplication
from synthesis.figure_panels import KINDS, figure_panel
from synthesis.hard_pairs import figure_group, hard_negative_images

__all__ = ["PanelPair", "PairSet", "generated_pair_splits", "make_pair_set", "pair_splits", "split_sources"]


@dataclass
class PanelPair:
    id_a: str
    id_b: str
    label: int  # 1: B reuses content of A
    operations: tuple[str, ...]  # fine operation names (synthesis.duplication), () for negatives
    kind: str  # global | local | figure_copy | other_photo | same_photo | figure_furniture | similar_photo
    source: str
    mask_a: np.ndarray | None = None
    mask_b: np.ndarray | None = None
    subset: str = "base"  # base: the ordinary pairs | hard: extra hard negatives | group: inside a figure group
    group: str = ""  # the figure-like group both panels belong to


@dataclass
class PairSet:
    panels: dict[str, np.ndarray]
    pairs: list[PanelPair]


def split_sources(names: Sequence[str], held_out: float = 0.3, seed: int = 0) -> tuple[list[str], list[str]]:
    """(fitting, held-out) photo names; photos of one scene (a stereo pair) stay together."""
    scenes = sorted({scene_of(n) for n in names})
    rng = np.random.default_rng(seed)
    order = [scenes[i] for i in rng.permutation(len(scenes))]
    cut = max(1, round(len(order) * held_out))
    held = set(order[:cut])
    return sorted(n for n in names if scene_of(n) not in held), sorted(n for n in names if scene_of(n) in held)


def scene_of(name: str) -> str:
    return name.split(".")[0].replace("_left", "").replace("_right", "")


def random_panel(photo: np.ndarray, rng: np.random.Generator, min_side: int = 160, max_side: int = 512) -> np.ndarray:
    """A crop of 50-100 % of the photo's sides, scaled so its longer side is at most `max_side`."""
    height, width = photo.shape[:2]
    ch = int(height * rng.uniform(0.5, 1.0)) if height > min_side else height
    cw = int(width * rng.uniform(0.5, 1.0)) if width > min_side else width
    y, x = int(rng.integers(0, height - ch + 1)), int(rng.integers(0, width - cw + 1))
    panel = photo[y : y + ch, x : x + cw]
    factor = min(1.0, max_side / max(ch, cw))
    if factor < 1.0:
        panel = cv2.resize(panel, (round(cw * factor), round(ch * factor)), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(panel)


def disjoint_crops(photo: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """Two crops of one photo that share no pixel (left / right or top / bottom, with a gap)."""
    height, width = photo.shape[:2]
    if rng.random() < 0.5 and width >= 200:
        cut = int(width * rng.uniform(0.4, 0.6))
        gap = int(width * 0.05)
        return photo[:, : cut - gap].copy(), photo[:, cut + gap :].copy()
    if height >= 200:
        cut = int(height * rng.uniform(0.4, 0.6))
        gap = int(height * 0.05)
        return photo[: cut - gap].copy(), photo[cut + gap :].copy()
    return None


def make_pair_set(
    photos: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    positives_per_photo: int = 8,
    negatives_per_photo: int = 8,
    figure_pairs: int = 12,
    prefix: str = "",
    similar_per_photo: int = 0,
    crops_per_photo: int = 0,
    furniture_pairs: int = 0,
    figure_groups: int = 0,
    group_size: int = 5,
) -> PairSet:
    """Positives and negatives from `photos` (name -> RGB uint8) and from fresh figure panels.

    Per photo: `positives_per_photo` duplications (global or local, as the panel allows),
    `negatives_per_photo` pairs with another photo's panel, and one pair of disjoint crops. Per
    figure kind: `figure_pairs` copies and as many pairs of two different panels. Then, drawn after
    these (so they stay the same pairs for a seed), subset `hard`: per photo `similar_per_photo`
    pairs with its most similar photo and `crops_per_photo` more disjoint crops, per figure kind
    `furniture_pairs` more pairs of different panels; subset `group`: `figure_groups` groups of
    `group_size` panels with all their pairs (`synthesis.hard_pairs`).

    Kept in one piece: positives, negatives and figure pairs draw from one generator
    and one panel table, in an order that keeps a seed's pairs reproducible.
    """
    panels: dict[str, np.ndarray] = {}
    pairs: list[PanelPair] = []
    names = sorted(photos)

    def add(image: np.ndarray, name: str) -> str:
        key = f"{prefix}{name}#{len(panels)}"
        panels[key] = image
        return key

    bases: dict[str, list[str]] = {}
    for name in names:
        for _ in range(positives_per_photo):
            panel = random_panel(photos[name], rng)
            local = min(panel.shape[:2]) >= MIN_LOCAL_SIDE and rng.random() < 0.5
            pair = local_duplication(panel, rng) if local else global_duplication(panel, rng)
            id_a, id_b = add(pair.panel_a, name), add(pair.panel_b, name)
            bases.setdefault(name, []).append(id_a)
            pairs.append(PanelPair(id_a, id_b, 1, pair.operations, pair.scope, name, pair.mask_a, pair.mask_b))
        crops = disjoint_crops(photos[name], rng)
        if crops is not None:
            pairs.append(PanelPair(add(crops[0], name), add(crops[1], name), 0, (), "same_photo", name))
    drawn: set[frozenset[str]] = set()
    for name in names:
        others = [n for n in names if scene_of(n) != scene_of(name)]
        for _ in range(negatives_per_photo if others else 0):
            other = others[int(rng.integers(len(others)))]
            id_a = bases[name][int(rng.integers(len(bases[name])))]
            id_b = bases[other][int(rng.integers(len(bases[other])))]
            if frozenset((id_a, id_b)) in drawn:  # drawn twice (either way round): counted once; the draws
                continue  # go on as before, so the later pairs of a seed stay the same
            drawn.add(frozenset((id_a, id_b)))
            pairs.append(PanelPair(id_a, id_b, 0, (), "other_photo", f"{name}|{other}"))
    for kind in KINDS:
        for _ in range(figure_pairs):
            first, second = figure_panel(kind, rng), figure_panel(kind, rng)
            copy = global_duplication(first, rng)
            id_a = add(first, kind)
            pairs.append(
                PanelPair(
                    id_a, add(copy.panel_b, kind), 1, copy.operations, "figure_copy", kind, copy.mask_a, copy.mask_b
                )
            )
            pairs.append(PanelPair(id_a, add(second, kind), 0, (), "figure_furniture", kind))
    hard = hard_negative_images(
        photos, rng, random_panel, disjoint_crops, scene_of, similar_per_photo, crops_per_photo, furniture_pairs
    )
    for first, second, kind, source in hard:
        name = source.split("|")[0]
        pairs.append(PanelPair(add(first, name), add(second, name), 0, (), kind, source, subset="hard"))
    for index in range(figure_groups if names else 0):
        group = f"{prefix}group{index}"
        for id_a, id_b, label, operations, source, mask_a, mask_b in figure_group(
            photos, rng, add, random_panel, scene_of, group_size
        ):
            kind = "group_copy" if label else "group_other"
            pairs.append(PanelPair(id_a, id_b, label, operations, kind, source, mask_a, mask_b, "group", group))
    return PairSet(panels, pairs)


def load_photos(folder: str | None = None, max_side: int = 1024) -> dict[str, np.ndarray]:
    """Photos of `folder` (every readable image) or, with None, the bundled sample photographs,
    shrunk to at most `max_side` px."""
    from pathlib import Path

    from datamodules.io import is_image_file, read_image
    from synthesis.embedded import bundled_photo_paths

    paths = sorted(p for p in Path(folder).rglob("*") if is_image_file(p)) if folder else bundled_photo_paths()
    if not paths:
        raise PairDataError(f"no images found in {folder}: give data.photos a folder of photographs")
    photos = {}
    for path in paths:
        image = read_image(path)
        factor = min(1.0, max_side / max(image.shape[:2]))
        if factor < 1.0:
            image = cv2.resize(
                image, (round(image.shape[1] * factor), round(image.shape[0] * factor)), interpolation=cv2.INTER_AREA
            )
        photos[path.name] = image
    return photos


def pair_splits(
    photos: str | None = None,
    held_out: float = 0.3,
    val_fraction: float = 0.35,
    positives_per_photo: int = 8,
    negatives_per_photo: int = 16,
    figure_pairs: int = 12,
    seed: int = 0,
    splits: Sequence[str] = ("train", "val", "test"),
    similar_per_photo: int = 0,
    crops_per_photo: int = 0,
    furniture_pairs: int = 0,
    figure_groups: int = 0,
    group_size: int = 5,
    train_rounds: int = 1,
    pairs_csv: str | None = None,
) -> dict[str, PairSet]:
    """Pair sets for fitting (`train`), calibrating (`val`) and measuring (`test`), from disjoint
    photos: `held_out` of the scenes are kept for test, `val_fraction` of the rest for val. Figure
    panels are drawn fresh for each split. The hard pairs and groups (`make_pair_set`) are what
    brings the val split's negatives to the 299 a 1 % false-positive target needs. `train_rounds`
    > 1 adds as many more draws from the training photos to `train` (the other splits are
    unchanged). `pairs_csv`: read generate.py's `duplication_pairs.csv` instead
    (`generated_pair_splits`)."""
    if pairs_csv:
        return {k: v for k, v in generated_pair_splits(pairs_csv, np.random.default_rng(seed)).items() if k in splits}
    table = load_photos(photos)
    fitting, testing = split_sources(sorted(table), held_out, seed)
    training, validating = split_sources(fitting, val_fraction, seed + 1)
    names = {"train": training, "val": validating, "test": testing}
    unknown = sorted(set(splits) - set(names))
    if unknown:
        raise ValueError(f"unknown splits {unknown}; expected among {sorted(names)}")
    sets = {
        split: make_pair_set(
            {n: table[n] for n in names[split]},
            np.random.default_rng([seed, ("train", "val", "test").index(split)]),
            positives_per_photo,
            negatives_per_photo,
            figure_pairs,
            f"{split}/",
            similar_per_photo,
            crops_per_photo,
            furniture_pairs,
            figure_groups,
            group_size,
        )
        for split in splits
    }
    if "train" in sets:
        photos_of_training = {n: table[n] for n in training}
        counts = (positives_per_photo, negatives_per_photo, figure_pairs)
        for extra in range(1, max(1, int(train_rounds))):
            more = make_pair_set(photos_of_training, np.random.default_rng([seed, 0, extra]), *counts, f"train{extra}/")
            sets["train"].panels.update(more.panels)
            sets["train"].pairs.extend(more.pairs)
    return sets


def generated_pair_splits(path: str, rng: np.random.Generator) -> dict[str, PairSet]:
    """`generate.py`'s `duplication_pairs.csv` as one `PairSet` per split, with negatives added
    (panel A of a pair with panel B of a pair from another source photo of the same split)."""
    import csv
    from pathlib import Path

    from datamodules.io import read_image, read_mask

    folder = Path(path).parent
    if not Path(path).is_file():
        raise PairDataError(f"{path} not found: give the duplication_pairs.csv generate.py wrote")
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    missing = {"panel_a", "panel_b", "mask_a", "mask_b", "operations", "source", "split"} - set(rows[0] if rows else {})
    if not rows or missing:
        raise PairDataError(f"{path}: not a generate.py duplication_pairs.csv (no rows, or no {sorted(missing)})")
    sets: dict[str, PairSet] = {}
    for split in ("train", "val", "test"):
        chosen = [r for r in rows if r["split"] == split]
        if not chosen:
            raise PairDataError(f"{path}: no pairs in split {split!r}; generate more panels")
        panels = {r[key]: read_image(folder / r[key]) for r in chosen for key in ("panel_a", "panel_b")}
        pairs = [
            PanelPair(
                r["panel_a"],
                r["panel_b"],
                1,
                tuple(r["operations"].split(";")),
                r.get("scope") or "generated",
                r["source"],
                read_mask(folder / r["mask_a"]),
                read_mask(folder / r["mask_b"]),
            )
            for r in chosen
        ]
        for r in chosen:
            others = [o for o in chosen if o["source"] != r["source"]]
            if others:
                other = others[int(rng.integers(len(others)))]
                pairs.append(
                    PanelPair(r["panel_a"], other["panel_b"], 0, (), "other_photo", f"{r['source']}|{other['source']}")
                )
        sets[split] = PairSet(panels, pairs)
    return sets
