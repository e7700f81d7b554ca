"""Generated duplication pairs: held out by photo, hard negatives, figure-like groups."""

from __future__ import annotations

from itertools import combinations

import cv2
import numpy as np
import pytest

from synthesis.hard_pairs import most_similar_photo
from synthesis.pair_set import make_pair_set, scene_of, split_sources

EXTRAS = {"similar_per_photo": 2, "crops_per_photo": 2, "furniture_pairs": 1, "figure_groups": 3, "group_size": 5}


def textured_photo(seed: int, tint: tuple[int, int, int], size: int = 360) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0, 1, (size, size)).astype(np.float32)
    grey = cv2.normalize(cv2.GaussianBlur(noise, (0, 0), 3), None, 0, 255, cv2.NORM_MINMAX)
    return np.clip(grey[..., None] * 0.6 + np.asarray(tint, np.float32) * 0.4, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def photos() -> dict[str, np.ndarray]:
    tints = {
        "red_a.png": (230, 40, 40),
        "red_b.png": (210, 60, 50),
        "blue.png": (30, 60, 220),
        "green.png": (40, 200, 60),
    }
    return {name: textured_photo(i, tint) for i, (name, tint) in enumerate(tints.items())}


def pair_set(photos, **extras):
    return make_pair_set(photos, np.random.default_rng(0), 2, 2, 1, **extras)


@pytest.fixture(scope="module")
def extended(photos):
    return pair_set(photos, **EXTRAS)


def test_the_extra_pairs_leave_the_ordinary_pairs_of_a_seed_unchanged(photos, extended):
    plain = pair_set(photos)
    base = [p for p in extended.pairs if p.subset == "base"]
    assert len(base) == len(plain.pairs) and len(extended.pairs) > len(plain.pairs)
    for old, new in zip(plain.pairs, base):
        assert (old.id_a, old.id_b, old.kind, old.label) == (new.id_a, new.id_b, new.kind, new.label)
        assert np.array_equal(plain.panels[old.id_a], extended.panels[new.id_a])


def test_similar_photos_are_chosen_by_colour_among_other_scenes(photos):
    nearest = most_similar_photo(photos, scene_of)
    assert nearest["red_a.png"] == "red_b.png" and nearest["red_b.png"] == "red_a.png"


def test_hard_negatives_cover_similar_photos_disjoint_crops_and_figure_kinds(photos, extended):
    hard = [p for p in extended.pairs if p.subset == "hard"]
    kinds = {p.kind for p in hard}
    assert kinds == {"similar_photo", "same_photo", "figure_furniture"}
    assert all(p.label == 0 and p.mask_a is None for p in hard)
    similar = [p for p in hard if p.kind == "similar_photo"]
    assert len(similar) == 2 * len(photos)
    assert all(scene_of(p.source.split("|")[0]) != scene_of(p.source.split("|")[1]) for p in similar)


def test_every_pair_of_a_figure_group_is_labelled_and_copies_carry_masks(extended):
    generated = extended
    groups: dict[str, list] = {}
    for pair in generated.pairs:
        if pair.subset == "group":
            groups.setdefault(pair.group, []).append(pair)
    assert len(groups) == 3
    for pairs in groups.values():
        panels = sorted({p.id_a for p in pairs} | {p.id_b for p in pairs})
        assert len(panels) == 5 and len(pairs) == len(list(combinations(panels, 2)))
        copies = [p for p in pairs if p.label]
        assert 1 <= len(copies) <= 2 and all(p.kind == "group_copy" and p.operations for p in copies)
        for copy in copies:
            assert copy.mask_a.shape == generated.panels[copy.id_a].shape[:2] and copy.mask_a.any()
            assert copy.mask_b.shape == generated.panels[copy.id_b].shape[:2] and copy.mask_b.any()
        assert all(p.mask_a is None and not p.operations for p in pairs if not p.label)


def test_splits_are_held_out_by_photo_and_a_stereo_pair_stays_together():
    names = [f"photo{i}.png" for i in range(10)] + ["bike_left.png", "bike_right.png"]
    fitting, held_out = split_sources(names, 0.3, seed=0)
    assert not set(fitting) & set(held_out) and sorted(fitting + held_out) == sorted(names)
    assert ("bike_left.png" in held_out) == ("bike_right.png" in held_out)


def test_more_training_rounds_add_training_pairs_and_leave_val_and_test_as_they_were(photos, tmp_path):
    from synthesis.pair_set import pair_splits

    for i, name in enumerate(["p0.png", "p1.png", "p2.png", "p3.png", "p4.png", "p5.png"]):
        cv2.imwrite(str(tmp_path / name), textured_photo(10 + i, (40 * i, 120, 200 - 30 * i), size=200))
    small = {"positives_per_photo": 1, "negatives_per_photo": 1, "figure_pairs": 0, "held_out": 0.3}
    once = pair_splits(str(tmp_path), **small)
    thrice = pair_splits(str(tmp_path), train_rounds=3, **small)
    for split in ("val", "test"):
        assert [(p.id_a, p.id_b, p.kind, p.operations) for p in thrice[split].pairs] == [
            (p.id_a, p.id_b, p.kind, p.operations) for p in once[split].pairs
        ]
        assert all(np.array_equal(thrice[split].panels[k], v) for k, v in once[split].panels.items())
    assert len(thrice["train"].pairs) > len(once["train"].pairs)
    assert {p.id_a for p in once["train"].pairs} <= {p.id_a for p in thrice["train"].pairs}


def test_pair_data_that_cannot_be_made_is_said_as_a_setting_to_fix(tmp_path):
    from synthesis.common import PairDataError
    from synthesis.pair_set import generated_pair_splits, load_photos

    with pytest.raises(PairDataError, match=f"{tmp_path / 'nope.csv'} not found: give the duplication_pairs.csv"):
        generated_pair_splits(str(tmp_path / "nope.csv"), np.random.default_rng(0))
    (tmp_path / "empty").mkdir()
    with pytest.raises(PairDataError, match="no images found in .*empty: give data.photos a folder"):
        load_photos(str(tmp_path / "empty"))


def test_no_pair_is_drawn_twice_either_way_round():
    """Negatives drawn with replacement repeated (a, b) or (b, a): one pair counted twice in the
    calibration negatives and the test figures (infer.py scored it once: the two disagreed)."""
    from synthesis.pair_set import load_photos

    pairs = make_pair_set(load_photos(), np.random.default_rng(0), negatives_per_photo=24).pairs
    keys = [frozenset((p.id_a, p.id_b)) for p in pairs]
    assert len(keys) == len(set(keys))
