"""generate_dataset end to end on a few bundled photos: every operation, honest masks, leak-free
splits, byte-identical results per seed whatever the worker count, and resumption without rework."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from datamodules.io import read_image, read_mask
from datamodules.records import read_manifest
from synthesis.common import changed_pixels
from synthesis.dataset import OPERATIONS, DatasetSpec, GeneratorOptions, make_generated_manifest
from synthesis.duplication import CMO_CATEGORIES, cmo_categories
from synthesis.embedded import bundled_photo_paths
from synthesis.families import DiffusionOptions

PHOTOS = [p for p in bundled_photo_paths() if p.stem in ("astronaut", "coffee", "chelsea", "coins", "ihc")]
SPEC = DatasetSpec(
    kind="all",
    ops={op: 1.0 for op in OPERATIONS},
    seed=3,
    max_side=160,
    crops_per_photo=1,
    crop_size=96,
    local_min_side=120,
    generator=GeneratorOptions(steps=8, width=8, crop=32, batch_size=4),
    diffusion=DiffusionOptions(
        strengths=(0.3, 0.6),
        sample_steps=4,
        latent={"steps": 4, "width": 8, "crop": 64, "batch_size": 2},
        ddpm={"steps": 4, "width": 8, "mults": [1, 2], "crop": 16, "batch_size": 4},
        latent_ddpm={"steps": 4, "width": 8, "mults": [1], "crop": 4, "batch_size": 4},
    ),
)
FAMILY_GROUPS = {
    "latent_ae",
    "ddpm_pixel_sdedit_0.3",
    "ddpm_pixel_sdedit_0.6",
    "ddpm_latent_sdedit_0.3",
    "ddpm_latent_sdedit_0.6",
    "ddpm_pixel_inpaint",
    "ddpm_latent_inpaint",
}
KNOWN_MASK_GROUPS = ("splicing", "copy_move", "inpainting")


def _files(root: Path) -> dict[str, bytes]:
    """Every file of a dataset except the generators' timing sidecars."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not (p.parent.name == "generators" and p.suffix == ".json")
    }


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    manifest, summary = make_generated_manifest(out, SPEC, photos=PHOTOS, workers=1, progress=False)
    return out, manifest, summary


def test_every_operation_is_in_the_manifest_with_its_files(serial):
    out, manifest, summary = serial
    records = read_manifest(manifest)
    groups = {r.group for r in records}
    assert {
        "genuine",
        "splicing",
        "copy_move",
        "inpainting",
        "duplication_global",
        "duplication_local",
        "damage",
    } <= groups
    assert {g for g in groups if g.startswith("ae_") and not g.endswith("_region")}, groups  # re-renders
    assert {g for g in groups if g.endswith("_region")}, groups  # region edits
    for r in records:
        assert Path(r.path).is_file() and r.split in ("train", "val", "test") and r.source
        assert (r.label == 1) == (r.mask is not None)
        if r.mask:
            assert read_mask(r.mask).shape == read_image(r.path).shape[:2]
            assert read_mask(r.mask).any() and Path(r.mask).with_suffix(".json").is_file()
    assert summary["images"] == len(records) and summary["made"] == summary["items"]
    assert read_image(summary["contact_sheet"]).shape[0] > 8 * 160  # a row per operation
    assert all("PSNR" in status for status in summary["generators"].values())
    assert {"latent", "ddpm_pixel", "ddpm_latent"} <= set(summary["generators"])


def test_latent_and_diffusion_families_are_distinct_groups_with_fidelity_in_the_summary(serial):
    out, manifest, summary = serial
    records = read_manifest(manifest)
    assert FAMILY_GROUPS <= {r.group for r in records}
    assert FAMILY_GROUPS <= set(summary["psnr_db"]) and all(v > 0 for v in summary["psnr_db"].values())
    for r in records:
        if r.group in FAMILY_GROUPS:
            info = json.loads(Path(r.mask).with_suffix(".json").read_text())
            if r.group.endswith("_inpaint"):  # the rest of the panel is kept exactly
                changed = changed_pixels(read_image(out / info["source_panel"]), read_image(r.path))
                assert not (changed & ~read_mask(r.mask).astype(bool)).any(), r.path
                assert info["meta"]["space"] in r.group
            elif r.group.startswith("ddpm_"):
                assert read_mask(r.mask).all() and f"{info['meta']['strength']:g}" in r.group
    sheet_rows = read_image(summary["contact_sheet"]).shape[0]
    assert sheet_rows > 11 * 160  # every operation, the three new ones included


def test_masks_cover_every_changed_pixel(serial):
    out, manifest, _ = serial
    checked = 0
    for r in read_manifest(manifest):
        if r.group in KNOWN_MASK_GROUPS or (r.group or "").endswith("_region"):
            info = json.loads(Path(r.mask).with_suffix(".json").read_text())
            changed = changed_pixels(read_image(out / info["source_panel"]), read_image(r.path))
            assert changed.any() and not (changed & ~read_mask(r.mask).astype(bool)).any(), r.path
            assert info["regions"] and info["regions"][0]["primary"]
            checked += 1
    assert checked >= 10


def test_damage_masks_come_from_the_pair_and_agree_with_the_drawing(serial):
    out, manifest, _ = serial
    damage = [r for r in read_manifest(manifest) if r.group == "damage"]
    ious = []
    for r in damage:
        info = json.loads(Path(r.mask).with_suffix(".json").read_text())
        assert info["meta"]["mask_origin"] == "c4_from_pair"
        assert all(region["machine_derived"] and "peak_z" in region for region in info["regions"])
        assert read_mask(out / info["meta"]["ground_truth_d15"]).any()
        ious.append(info["meta"]["drawn_iou_c4"])
    print(f"damage: C.4 mask vs drawn damage IoU mean {np.mean(ious):.2f} over {len(ious)} edits (small panels)")
    assert len(damage) >= 3 and np.mean(ious) >= 0.5


def test_splits_never_share_a_source_and_splice_partners_share_the_split(serial):
    out, manifest, _ = serial
    records = read_manifest(manifest)
    splits = defaultdict(set)
    for r in records:
        splits[r.source].add(r.split)
    assert all(len(s) == 1 for s in splits.values()) and {r.split for r in records} == {"train", "val", "test"}
    split_of = {str(Path(r.path).relative_to(out)): r.split for r in records if r.label == 0}
    for r in records:
        if r.group == "splicing":
            meta = json.loads(Path(r.mask).with_suffix(".json").read_text())["meta"]
            assert split_of[meta["object_panel"]] == r.split


def test_duplication_pairs_carry_their_operation_sets(serial):
    out, manifest, summary = serial
    with (out / "duplication_pairs.csv").open() as handle:
        pairs = list(csv.DictReader(handle))
    assert len(pairs) == summary["pairs"] > 0 and {p["scope"] for p in pairs} == {"global", "local"}
    reviews = defaultdict(list)
    for r in read_manifest(manifest):
        if r.review:
            reviews[r.review].append(r)
    for pair in pairs:
        ops = pair["operations"].split(";")
        assert set(ops) <= set(CMO_CATEGORIES) and pair["categories"].split(";") == sorted(cmo_categories(ops))
        assert len(reviews[pair["pair"]]) == 2
        meta = json.loads((out / pair["mask_b"]).with_suffix(".json").read_text())["meta"]
        assert meta["operations"] == ops


@pytest.mark.slow  # several generation runs (~20 s)
def test_same_seed_gives_identical_bytes_with_any_worker_count_and_resumes(serial, tmp_path):
    out, _, _ = serial
    parallel = tmp_path / "parallel"
    make_generated_manifest(parallel, SPEC, photos=PHOTOS, workers=2, progress=False)
    assert _files(parallel) == _files(out)

    # an interrupted run: some items never finished (no fragment, partial files), the manifest is missing
    fragments = (
        sorted((parallel / ".items" / "copy_move").glob("*.json"))
        + sorted((parallel / ".items" / "damage").glob("*.json"))[:1]
    )
    for fragment in fragments:
        for row in json.loads(fragment.read_text())["rows"]:
            (parallel / row["path"]).unlink()
        fragment.unlink()
    (parallel / "manifest.csv").unlink()
    kept = {p: p.stat().st_mtime_ns for p in (parallel / "fake").rglob("*.png")}
    _, summary = make_generated_manifest(parallel, SPEC, photos=PHOTOS, workers=1, progress=False)
    assert summary["made"] == len(fragments) and summary["reused"] == summary["items"] - len(fragments)
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # finished items were not redone
    assert _files(parallel) == _files(out)


def test_other_options_into_the_same_folder_are_refused(serial):
    out, _, _ = serial
    with pytest.raises(ValueError, match="other options"):
        make_generated_manifest(out, DatasetSpec(kind="aigi", seed=4), photos=PHOTOS, progress=False)
