"""Hard pairs for duplication detectors: negatives that look alike, and pairs inside figure-like groups.

`synthesis.pair_set` adds them after its ordinary pairs, from the same photos (so a split stays
held out by source photo):

- panels of two *similar* photos: each photo with the other scene of its split whose colour
  histogram correlates most with its own (same palette and kind of scene, no shared pixels);
- further pairs of non-overlapping crops of one photo (same scene, no shared pixels);
- further pairs of two different figure panels of one kind (shared furniture: axes and tick labels,
  lane layout, scale bar and lettering);
- figure-like groups: several panels (photo panels of different scenes and chart / blot /
  micrograph panels) of which one or two are duplicated inside the group; every pair of the group
  is labelled, so a group of n panels gives n (n - 1) / 2 pairs, as a figure does.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import cv2
import numpy as np

from synthesis.duplication import MIN_LOCAL_SIDE, DuplicationPair, global_duplication, local_duplication
from synthesis.figure_panels import KINDS, figure_panel

AddPanel = Callable[[np.ndarray, str], str]


def colour_signature(photo: np.ndarray) -> np.ndarray:
    """A normalized 8 x 8 x 8 hue / saturation / value histogram."""
    hsv = cv2.cvtColor(np.ascontiguousarray(photo[..., :3]), cv2.COLOR_RGB2HSV)
    histogram = cv2.calcHist([hsv], [0, 1, 2], None, [8, 8, 8], [0, 180, 0, 256, 0, 256])
    return cv2.normalize(histogram, None).astype(np.float32)


def most_similar_photo(photos: Mapping[str, np.ndarray], scene_of: Callable[[str], str]) -> dict[str, str]:
    """For each photo, the photo of another scene whose colour histogram correlates most with it."""
    names = sorted(photos)
    signatures = {name: colour_signature(photos[name]) for name in names}
    nearest = {}
    for name in names:
        others = [n for n in names if scene_of(n) != scene_of(name)]
        if others:
            nearest[name] = max(
                others, key=lambda n: cv2.compareHist(signatures[name], signatures[n], cv2.HISTCMP_CORREL)
            )
    return nearest


def duplicate_panel(panel: np.ndarray, rng: np.random.Generator, photo_panel: bool) -> DuplicationPair:
    """A global or (for large photo panels, half of the time) local duplication of `panel`."""
    if photo_panel and min(panel.shape[:2]) >= MIN_LOCAL_SIDE and rng.random() < 0.5:
        return local_duplication(panel, rng)
    return global_duplication(panel, rng)


def figure_group(
    photos: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    add: AddPanel,
    random_panel: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    scene_of: Callable[[str], str],
    size: int = 5,
) -> list[tuple[str, str, int, tuple[str, ...], str, np.ndarray | None, np.ndarray | None]]:
    """One figure-like group: `size` panels, one or two of them duplicates of another panel of the
    group. Returns every pair (id_a, id_b, label, operations, source, mask_a, mask_b); a duplicated
    pair runs from the source panel to its copy, and no two copies share a source.

    Kept in one piece: drawing the panels, placing the copies and labelling the pairs share one
    slot table."""
    names = sorted(photos)
    by_scene: dict[str, list[str]] = {}
    for name in names:
        by_scene.setdefault(scene_of(name), []).append(name)
    scenes = [by_scene[s] for s in sorted(by_scene)]
    order = [scenes[i] for i in rng.permutation(len(scenes))]
    copies = 1 if size < 4 or rng.random() < 0.5 else 2
    originals = size - copies
    slots: list[dict] = []  # image, source label, whether it is a photo panel
    for index in range(originals):
        if index < len(order) and rng.random() < 0.6:
            name = order[index][int(rng.integers(len(order[index])))]
            slots.append({"image": random_panel(photos[name], rng), "source": name, "photo": True})
        else:
            kind = KINDS[int(rng.integers(len(KINDS)))]
            slots.append({"image": figure_panel(kind, rng), "source": kind, "photo": False})
    links: dict[tuple[int, int], DuplicationPair] = {}
    for copy_of in rng.choice(originals, size=copies, replace=False):
        slot = slots[int(copy_of)]
        pair = duplicate_panel(slot["image"], rng, slot["photo"])
        slot["image"] = pair.panel_a  # a local duplication's source is a crop of the panel
        slots.append({"image": pair.panel_b, "source": slot["source"], "photo": slot["photo"]})
        links[(int(copy_of), len(slots) - 1)] = pair
    ids = [add(slot["image"], slot["source"]) for slot in slots]
    rows = []
    for i in range(len(slots)):
        for j in range(i + 1, len(slots)):
            pair = links.get((i, j))
            if pair is not None:
                rows.append((ids[i], ids[j], 1, pair.operations, slots[i]["source"], pair.mask_a, pair.mask_b))
            else:
                rows.append((ids[i], ids[j], 0, (), f"{slots[i]['source']}|{slots[j]['source']}", None, None))
    return rows


def hard_negative_images(
    photos: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    random_panel: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    disjoint_crops: Callable[[np.ndarray, np.random.Generator], tuple[np.ndarray, np.ndarray] | None],
    scene_of: Callable[[str], str],
    similar_per_photo: int,
    crops_per_photo: int,
    furniture_pairs: int,
) -> list[tuple[np.ndarray, np.ndarray, str, str]]:
    """(panel A, panel B, kind, source) of the hard negatives described in the module docstring."""
    out = []
    nearest = most_similar_photo(photos, scene_of)
    for name in sorted(photos):
        if name in nearest:
            other = nearest[name]
            for _ in range(similar_per_photo):
                first, second = random_panel(photos[name], rng), random_panel(photos[other], rng)
                out.append((first, second, "similar_photo", f"{name}|{other}"))
        for _ in range(crops_per_photo):
            crops = disjoint_crops(photos[name], rng)
            if crops is not None:  # each half cut down further, so the pairs differ
                out.append((random_panel(crops[0], rng), random_panel(crops[1], rng), "same_photo", name))
    for kind in KINDS:
        for _ in range(furniture_pairs):
            out.append((figure_panel(kind, rng), figure_panel(kind, rng), "figure_furniture", kind))
    return out


__all__: Sequence[str] = ["figure_group", "hard_negative_images", "most_similar_photo"]
