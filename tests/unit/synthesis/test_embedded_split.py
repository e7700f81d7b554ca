"""The quickstart's embedded set is split by photograph: its test split holds photos never trained on."""

from __future__ import annotations

import csv
from collections import defaultdict

from synthesis.embedded import make_embedded_manifest
from synthesis.photos import scene_of


def test_every_crop_of_a_photo_and_its_fake_land_in_one_split_and_a_stereo_pair_counts_as_one(tmp_path):
    manifest = make_embedded_manifest(tmp_path, seed=0, crop_size=48, scales=(0.5, 0.25), max_crops_per_scale=2)
    rows = list(csv.DictReader(manifest.open()))
    splits_of_photo = defaultdict(set)
    for row in rows:
        splits_of_photo[row["category"]].add(row["split"])
        assert row["source"] == scene_of(row["category"])
    assert all(len(splits) == 1 for splits in splits_of_photo.values()), splits_of_photo
    if {"motorcycle_left", "motorcycle_right"} <= set(splits_of_photo):
        assert splits_of_photo["motorcycle_left"] == splits_of_photo["motorcycle_right"]
    assert set.union(*splits_of_photo.values()) == {"train", "val", "test"}


def test_a_stereo_pair_is_one_scene():
    assert scene_of("motorcycle_left") == scene_of("motorcycle_right") == "motorcycle"
    assert scene_of("coffee") == "coffee"
