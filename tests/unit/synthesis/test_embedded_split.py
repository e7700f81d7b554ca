"""The quickstart's embedded set is split by photograph: its test split holds photos never trained on."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

from datamodules.io import write_manifest
from synthesis.embedded import ensure_embedded_manifest, make_embedded_manifest
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


def _splits_of_photo(rows):
    splits = defaultdict(set)
    for row in rows:
        splits[row["category"]].add(row["split"])
    return splits


def test_a_set_an_earlier_version_split_by_crop_is_split_again_by_photo_with_its_images_unchanged(tmp_path):
    manifest = make_embedded_manifest(tmp_path, seed=0, crop_size=48, scales=(0.5, 0.25), max_crops_per_scale=2)
    rows = [{**row, "path": str(tmp_path / row["path"])} for row in csv.DictReader(manifest.open())]
    # as the earlier version wrote it: each crop its own source, crops of one photo in every split
    by_crop = [
        {**row, "source": Path(row["path"]).stem, "split": ("train", "val", "test")[i % 3]}
        for i, row in enumerate(rows)
    ]
    write_manifest(by_crop, manifest)
    assert any(len(splits) > 1 for splits in _splits_of_photo(by_crop).values())

    assert ensure_embedded_manifest(tmp_path, seed=0) == manifest
    again = list(csv.DictReader(manifest.open()))
    assert [str(tmp_path / row["path"]) for row in again] == [row["path"] for row in rows]
    assert all(row["source"] == scene_of(row["category"]) for row in again)
    assert all(len(splits) == 1 for splits in _splits_of_photo(again).values())


def test_any_other_manifest_in_the_default_folder_is_left_as_it_is(tmp_path):
    image = tmp_path / "real" / "mine.png"
    rows = [{"path": str(image), "label": 0, "category": "mine", "source": "mine", "split": "test"}]
    write_manifest(rows, tmp_path / "manifest.csv")
    before = (tmp_path / "manifest.csv").read_bytes()
    assert ensure_embedded_manifest(tmp_path, seed=0) == tmp_path / "manifest.csv"
    assert (tmp_path / "manifest.csv").read_bytes() == before
