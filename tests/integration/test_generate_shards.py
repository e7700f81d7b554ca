"""generate.py shard=i/n + merge=true: shards make disjoint parts of one dataset, the merge refuses
until every shard is done, and the merged set is byte for byte a single run's with the same seed;
a killed shard resumes like a single run, keeping what it finished."""

from __future__ import annotations

import json
from dataclasses import replace
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
    assert not (tmp_path / "empty").exists()  # refused before the panels and generators were made
    with pytest.raises(ValueError, match="merge must be true or false, got 'no'"):
        generate(compose_config("generate", [f"output={tmp_path}", "merge=no"]))


def test_a_merge_joins_shards_of_several_splittings_once_every_item_is_on_disk(tmp_path, monkeypatch):
    from synthesis import shards

    for index, count in ((0, 3), (1, 3), (0, 2)):
        shards.mark_shard_done(tmp_path, index, count, items=2)
    items = [{"id": k} for k in range(6)]
    monkeypatch.setattr(shards, "item_done", lambda item: item["id"] != 3)
    with pytest.raises(ValueError, match=r"rerun shard=1/2 \(a rerun"):  # the latest splitting's shard of item 3
        shards.check_shards(tmp_path, items)
    monkeypatch.setattr(shards, "item_done", lambda item: True)
    shards.check_shards(tmp_path, items)


def test_an_output_that_is_a_file_under_one_or_inside_the_source_is_refused_before_anything_is_made(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    (tmp_path / "photos").mkdir()
    for output, message in (
        (afile, "afile is a file, not a folder"),
        (afile / "sub", "afile is a file, not a folder"),
        (tmp_path / "photos" / "generated", "is inside source"),
    ):
        with pytest.raises(ValueError, match=message):
            generate(compose_config("generate", [f"output={output}", f"source={tmp_path / 'photos'}"]))
    assert afile.read_text() == "mine" and not (tmp_path / "photos" / "generated").exists()


def test_a_folder_of_the_users_own_files_is_not_written_over(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "manifest.csv").write_text("path,label\nmy/own.png,0\n")
    with pytest.raises(ValueError, match="already holds manifest.csv, real, which no generation made there"):
        generate_dataset(tmp_path, SPEC, photos=PHOTOS[:1], progress=False)
    assert (tmp_path / "manifest.csv").read_text() == "path,label\nmy/own.png,0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.csv", "real"]


def test_a_run_killed_while_writing_its_sources_is_not_resumed_with_other_options(tmp_path):
    """The options are stamped before the genuine kinds' sources are written: a run of another seed
    finds the stamp and is refused, rather than keeping the killed run's sources as its own."""
    from synthesis.photos import stamped_table

    kinds = replace(SPEC, genuine_kinds={"chart": 1}, seed=1)
    stamped_table(tmp_path, kinds, PHOTOS[:1], None)
    (tmp_path / ".items" / "spec.json").write_text(
        json.dumps({**json.loads((tmp_path / ".items" / "spec.json").read_text()), "photos": None})
    )  # as a run killed while writing its sources leaves it
    written = sorted(p.name for p in (tmp_path / "sources").rglob("*"))
    with pytest.raises(ValueError, match="generated with other options"):
        stamped_table(tmp_path, replace(kinds, seed=0), PHOTOS[:1], None)
    assert sorted(p.name for p in (tmp_path / "sources").rglob("*")) == written
    assert [p["key"] for p in stamped_table(tmp_path, kinds, PHOTOS[:1], None)]  # the same options: resumed


def test_the_workers_of_a_killed_run_end_with_it(tmp_path):
    """`workers>1`: a run killed with SIGKILL (no cleanup runs) leaves no worker behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from multiprocessing import get_context\n"
        "from synthesis.items import init_worker\n"
        "if __name__ == '__main__':\n"
        "    pool = ProcessPoolExecutor(1, mp_context=get_context('spawn'), initializer=init_worker)\n"
        "    import os\n"
        "    print(pool.submit(os.getpid).result(), flush=True)\n"
        "    time.sleep(60)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=Path.cwd())
    worker = int(run.stdout.readline())
    run.send_signal(signal.SIGKILL)
    run.wait()
    for _ in range(100):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    pytest.fail("the worker outlived its killed run by 10 s")


def test_an_output_path_through_a_folder_that_does_not_exist_makes_no_such_folder(tmp_path):
    spec = DatasetSpec(kind="forgery", ops={"copy_move": 1.0}, max_side=96, crops_per_photo=1, crop_size=64)
    manifest, _ = make_generated_manifest(tmp_path / "nx" / ".." / "set", spec, photos=PHOTOS[:1], progress=False)
    assert manifest == tmp_path / "set" / "manifest.csv" and manifest.is_file()
    assert not (tmp_path / "nx").exists()


def test_a_killed_generator_trainings_marker_is_not_left_in_the_finished_set(tmp_path):
    stale = tmp_path / ".items" / "generator" / "transposed_5_1796620343701894522.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")  # what a run killed while training its generator leaves
    make_generated_manifest(tmp_path, SPEC, photos=PHOTOS[:1], progress=False)
    assert not list(stale.parent.glob("*.json"))
