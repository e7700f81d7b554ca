"""Genuine images of the users' kinds: seeded, varied, grainy where the kind is, and part of a
generated dataset as categories that keep their photo's split and get fakes of every family."""

from __future__ import annotations

import csv
from functools import partial

import cv2
import numpy as np
import pytest

from datamodules.io import read_image
from synthesis.dataset import DatasetSpec, GeneratorOptions, make_generated_manifest
from synthesis.embedded import bundled_photo_paths
from synthesis.genuine_kinds import GENUINE_KINDS, GRAINY_KINDS, phone_photo, write_genuine_sources

FAST_KINDS = ("fluorescence", "histology", "electron_micrograph", "blot", "gel", "document")


def grain(image: np.ndarray) -> float:
    """Robust noise level: median absolute deviation of a Laplacian residual of the grey image."""
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
    residual = cv2.Laplacian(grey, cv2.CV_32F)
    return float(np.median(np.abs(residual - np.median(residual))))


@pytest.mark.parametrize("kind", sorted(GENUINE_KINDS))
def test_every_kind_is_an_rgb_image_that_the_seed_fixes_and_varies(kind):
    make = GENUINE_KINDS[kind]
    if kind == "phone_photo":  # from a given photograph (the default draws one of the bundled ones)
        photo = read_image(bundled_photo_paths()[0])
        make = partial(phone_photo, photo=photo)
    first, again, other = make(np.random.default_rng(1)), make(np.random.default_rng(1)), make(np.random.default_rng(2))
    assert first.pixels.dtype == np.uint8 and first.pixels.ndim == 3 and first.pixels.shape[2] == 3
    assert min(first.pixels.shape[:2]) >= 64
    assert np.array_equal(first.pixels, again.pixels) and first.codec == again.codec
    assert first.pixels.shape != other.pixels.shape or not np.array_equal(first.pixels, other.pixels)
    assert first.pixels.std() > 5  # not a flat canvas
    assert first.codec in ("png", "jpeg")


def test_a_chart_with_fewer_points_than_its_error_bars_would_take_still_renders():
    """Seed 22 draws an error-bar chart of fewer than 10 points: a bar for each point there is."""
    chart = GENUINE_KINDS["chart"](np.random.default_rng(22))
    assert chart.pixels.ndim == 3 and chart.pixels.std() > 5


def test_grainy_kinds_are_grainier_than_charts():
    charts = [grain(GENUINE_KINDS["chart"](np.random.default_rng(s)).pixels) for s in range(3)]
    for kind in ("fluorescence", "electron_micrograph"):
        assert kind in GRAINY_KINDS
        levels = [grain(GENUINE_KINDS[kind](np.random.default_rng(s)).pixels) for s in range(3)]
        assert min(levels) > max(charts), (kind, levels, charts)


def test_a_phone_photo_is_the_photograph_reprocessed_not_another_scene():
    photo = read_image(bundled_photo_paths()[0])
    processed = phone_photo(np.random.default_rng(0), photo).pixels
    assert processed.shape[0] == processed.shape[1] <= 384
    assert not np.array_equal(processed, photo[: processed.shape[0], : processed.shape[1]])


def test_sources_are_written_once_and_phone_photos_keep_their_photo_as_source(tmp_path):
    photos = {p.stem: str(p) for p in bundled_photo_paths()[:2]}
    entries = write_genuine_sources(tmp_path, {"blot": 2, "phone_photo": 3}, seed=0, photos=photos)
    assert [e["category"] for e in entries] == ["blot", "blot", "phone_photo", "phone_photo", "phone_photo"]
    assert {e["source"] for e in entries if e["category"] == "phone_photo"} <= set(photos)
    assert len({e["source"] for e in entries if e["category"] == "blot"}) == 2
    stamps = {e["photo"]: (tmp_path / e["photo"]).stat().st_mtime_ns for e in entries}
    assert write_genuine_sources(tmp_path, {"blot": 2, "phone_photo": 3}, seed=0, photos=photos) == entries
    assert {e["photo"]: (tmp_path / e["photo"]).stat().st_mtime_ns for e in entries} == stamps
    with pytest.raises(ValueError, match="unknown genuine kinds"):
        write_genuine_sources(tmp_path, {"selfie": 1})


@pytest.mark.slow
def test_a_generated_dataset_has_each_kind_as_a_category_with_fakes_made_from_it(tmp_path):
    spec = DatasetSpec(
        kind="forgery",
        ops={"copy_move": 1.0, "inpainting": 1.0},
        seed=0,
        max_side=128,
        crops_per_photo=1,
        crop_size=64,
        genuine_kinds={k: 2 for k in FAST_KINDS},
        generator=GeneratorOptions(steps=2, width=8, crop=32, batch_size=2),
    )
    photos = bundled_photo_paths()[:2]
    manifest, _ = make_generated_manifest(tmp_path, spec, photos=photos, workers=1, progress=False)
    with open(manifest, newline="") as handle:
        rows = list(csv.DictReader(handle))
    genuine = {r["category"] for r in rows if r["label"] == "0"}
    fakes = {r["category"] for r in rows if r["label"] == "1"}
    assert set(FAST_KINDS) <= genuine and set(FAST_KINDS) <= fakes
    split_of: dict[str, set[str]] = {}
    for row in rows:
        split_of.setdefault(row["source"], set()).add(row["split"])
    assert all(len(splits) == 1 for splits in split_of.values())
