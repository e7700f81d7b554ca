"""generate.py shard=i/n + merge=true: shards make disjoint parts of one dataset, the merge refuses
until every shard is done, and the merged set is byte for byte a single run's with the same seed;
a killed shard resumes like a single run, keeping what it finished."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generate import generate
from synthesis.dataset import DatasetSpec, GeneratorOptions, generate_dataset, make_generated_manifest
from synthesis.embedded import bundled_photo_paths
from tests.helpers import compose_config

PHOTOS = [p for p in bundled_photo_paths() if p.stem in ("astronaut", "coffee", "chelsea")]
SPEC = DatasetSpec(
    kind="all",
    ops={"rerender": 1.0, "copy_move": 1.0, "splicing": 0.5, "duplication_global": 0.5},
    seed=5,
    max_side=96,
    crops_per_photo=1,
    crop_size=64,
    generator=GeneratorOptions(steps=4, width=8, crop=32, batch_size=4),
)


def dataset_files(root: Path) -> dict[str, bytes]:
    """Every file of a dataset with paths relative to it, except the generators' timing sidecars
    and the shards' own records (which a single run has no use for)."""
    return {
        str(p.relative_to(root)): p.read_bytes().replace(str(root).encode(), b"<root>")
        for p in sorted(root.rglob("*"))
        if p.is_file() and not (p.parent.name == "generators" and p.suffix == ".json") and ".items/shards" not in str(p)
    }


@pytest.mark.slow
def test_merged_shards_equal_a_single_run_and_a_killed_shard_resumes(tmp_path):
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    make_generated_manifest(single, SPEC, photos=PHOTOS, progress=False)
    first = generate_dataset(sharded, SPEC, photos=PHOTOS, progress=False, shard=(0, 2))["summary"]
    with pytest.raises(ValueError, match=r"rerun shard=1/2"):
        make_generated_manifest(sharded, SPEC, photos=PHOTOS, progress=False, merge=True)
    second = generate_dataset(sharded, SPEC, photos=PHOTOS, progress=False, shard=(1, 2))["summary"]
    # the first shard cut the panels (and trained the generator); the second reused them
    assert first["made"] == first["items"] + len(PHOTOS) and first["reused"] == 0
    assert second["made"] == second["items"] and second["reused"] == len(PHOTOS)
    assert min(first["items"], second["items"]) >= 2

    # a shard killed mid-run: one item never finished (no fragment, no files); the merge names the
    # shards to rerun, and rerunning both makes that item only
    fragment = sorted((sharded / ".items" / "copy_move").glob("*.json"))[-1]
    for row in json.loads(fragment.read_text())["rows"]:
        (sharded / row["path"]).unlink()
    fragment.unlink()
    with pytest.raises(ValueError, match=r"rerun shard=\d/2"):
        make_generated_manifest(sharded, SPEC, photos=PHOTOS, progress=False, merge=True)
    reruns = [generate_dataset(sharded, SPEC, photos=PHOTOS, progress=False, shard=(i, 2))["summary"] for i in (0, 1)]
    assert sum(r["made"] for r in reruns) == 1
    _, summary = make_generated_manifest(sharded, SPEC, photos=PHOTOS, progress=False, merge=True)
    assert summary["made"] == 0 and summary["items"] == len(PHOTOS) + first["items"] + second["items"]
    assert dataset_files(sharded) == dataset_files(single)


def test_shard_option_is_checked_and_refused_where_it_does_not_apply(tmp_path):
    with pytest.raises(ValueError, match="i/n"):
        generate(compose_config("generate", [f"output={tmp_path}", "shard=2/2"]))
    with pytest.raises(ValueError, match="one process"):
        generate(compose_config("generate", [f"output={tmp_path}", "kind=aigi_quick", "shard=0/2"]))
    with pytest.raises(ValueError, match="no shard has finished"):
        generate_dataset(tmp_path / "empty", SPEC, photos=PHOTOS[:1], progress=False, merge=True)
