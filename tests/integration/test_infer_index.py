"""infer.py index=DIR: each input panel searched in a collection index, candidates verified by the pair detector."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")

from datamodules.io import write_image  # noqa: E402
from detectors.training_free import save_checkpoint  # noqa: E402
from index import IndexFailed, index  # noqa: E402
from infer import InferenceFailed, infer  # noqa: E402
from inference.writer import read_results  # noqa: E402
from synthesis.collection import planted_copy, texture_panel  # noqa: E402
from tests.duplication_helpers import hand_set_pair_module  # noqa: E402
from tests.helpers import compose_config  # noqa: E402


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> dict:
    """Eight textures in two reviews, indexed; queries: a mirrored, cropped, recoloured JPEG copy of
    one of them, an unrelated texture and a file no decoder reads."""
    root = tmp_path_factory.mktemp("collection")
    rng = np.random.default_rng(5)
    panels = [texture_panel(rng, 192) for _ in range(9)]
    for number, panel in enumerate(panels[:8]):
        write_image(root / "archive" / f"paper{number % 2}" / f"panel{number}.png", panel)
    copy = planted_copy(panels[3], np.random.default_rng(2), "hflip", min_area=0.5)
    write_image(root / "queries" / "paper1" / "copy.png", copy.image)
    write_image(root / "queries" / "paper1" / "unrelated.png", panels[8])
    (root / "queries" / "paper1" / "broken.png").write_bytes(b"not an image")
    index(compose_config("index", [f"input={root / 'archive'}", f"index={root / 'index'}"]))
    model = save_checkpoint(hand_set_pair_module(), root / "dup.ckpt", None)
    return {"root": root, "model": model, "source": str(root / "archive" / "paper1" / "panel3.png")}


def search(indexed: dict, output: Path, *extra: str, index_dir: Path | None = None) -> list[dict]:
    root = indexed["root"]
    overrides = [f"model={indexed['model']}", f"input={root / 'queries'}", f"index={index_dir or root / 'index'}"]
    infer(compose_config("infer", [*overrides, f"output={output}", "progress=false", *extra]))
    return read_results(output)


def test_each_verified_match_is_a_row_with_its_source_operations_and_transform(indexed, tmp_path):
    rows = {Path(r["path"]).name: r for r in search(indexed, tmp_path / "found.csv", "top_k=3", "save_masks=true")}
    copy = rows["copy.png"]
    assert copy["match"] == indexed["source"] and copy["source_id"] == "paper1"
    assert "flip" in copy["operations"].split(";")
    assert json.loads(copy["transform"])["flipped"] is True
    assert Path(copy["mask_a"]).is_file() and Path(copy["mask_b"]).is_file()
    assert rows["unrelated.png"]["match"] == "" and rows["unrelated.png"]["status"] == "ok"
    assert rows["broken.png"]["status"] == "error" and "corrupt" in rows["broken.png"]["error"]


def test_exclude_same_review_skips_matches_from_the_query_s_own_review(indexed, tmp_path):
    rows = search(indexed, tmp_path / "other_reviews.csv", "exclude_same=review")
    assert not [r for r in rows if r["match"]]  # the copy's source is in paper1, as the query


def test_index_nprobe_reaches_the_search_and_zero_is_refused_with_a_message(indexed, tmp_path):
    with pytest.raises(InferenceFailed, match="index_nprobe must be a whole number of at least 1, got 0"):
        search(indexed, tmp_path / "none.csv", "index_nprobe=0")
    rows = {Path(r["path"]).name: r for r in search(indexed, tmp_path / "more.csv", "index_nprobe=64")}
    assert rows["copy.png"]["match"] == indexed["source"]


def test_an_index_of_another_descriptor_or_no_index_is_refused_with_a_message(indexed, tmp_path):
    with pytest.raises(InferenceFailed, match="holds local_sift-v2.* descriptors, not phash"):
        search(indexed, tmp_path / "x.csv", "descriptor=phash")
    with pytest.raises(InferenceFailed, match="no meta.json"):
        infer(
            compose_config(
                "infer",
                [
                    f"model={indexed['model']}",
                    f"input={indexed['root'] / 'queries'}",
                    f"index={tmp_path}",
                    f"output={tmp_path / 'y.csv'}",
                ],
            )
        )
    with pytest.raises(IndexFailed, match="holds local_sift"):
        index(
            compose_config(
                "index",
                [f"input={indexed['root'] / 'queries'}", f"index={indexed['root'] / 'index'}", "descriptor=phash"],
            )
        )


def test_a_pairnet_index_finds_its_checkpoint_again_and_refuses_a_changed_one(indexed, tmp_path):
    from tests.helpers import write_pairnet_checkpoint

    root, checkpoint = indexed["root"], write_pairnet_checkpoint(tmp_path / "pairnet.ckpt", seed=0)
    with pytest.raises(IndexFailed, match="needs descriptor_checkpoint"):
        index(compose_config("index", [f"input={root / 'archive'}", f"index={tmp_path / 'x'}", "descriptor=pairnet"]))
    learned = [f"input={root / 'archive'}", f"index={tmp_path / 'index'}", "descriptor=pairnet"]
    index(compose_config("index", [*learned, f"descriptor_checkpoint={checkpoint}"]))
    found = search(indexed, tmp_path / "a.csv", "top_k=8", index_dir=tmp_path / "index")
    rows = {Path(r["path"]).name: r for r in found}
    assert rows["copy.png"]["match"] == indexed["source"]  # every panel is a candidate: the verification decides
    write_pairnet_checkpoint(checkpoint, seed=1)
    with pytest.raises(InferenceFailed, match="now has SHA-256"):
        search(indexed, tmp_path / "b.csv", index_dir=tmp_path / "index")


def test_a_match_whose_indexed_file_is_gone_is_an_unverified_row_not_no_reuse(indexed, tmp_path):
    source = Path(indexed["source"])  # moved away after it was indexed
    parked = tmp_path / "parked.png"
    source.rename(parked)
    try:
        rows = {Path(r["path"]).name: r for r in search(indexed, tmp_path / "gone.csv", "top_k=3")}
    finally:
        parked.rename(source)
    assert rows["copy.png"]["status"] == "error" and rows["copy.png"]["match"] == str(source)
    assert rows["copy.png"]["error"].startswith("not verified:")


def test_a_match_whose_indexed_file_was_replaced_is_an_unverified_row_not_a_crash(indexed, tmp_path):
    import os

    source = Path(indexed["source"])
    kept, stat = source.read_bytes(), source.stat()
    try:  # smaller than the panel box the index holds: the box would crop nothing
        write_image(source, np.zeros((8, 8, 3), np.uint8))
        rows = {Path(r["path"]).name: r for r in search(indexed, tmp_path / "replaced.csv", "top_k=3")}
    finally:  # as indexed, for the other searches of this module
        source.write_bytes(kept)
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert rows["copy.png"]["status"] == "error" and rows["copy.png"]["match"] == str(source)
    assert "changed since it was indexed" in rows["copy.png"]["error"]


@pytest.mark.parametrize("option", ["resume=true", "shard=0/2", "report=html", "overlays=true"])
def test_options_a_search_does_not_take_are_refused_before_the_output_is_written(indexed, tmp_path, option):
    output = tmp_path / "found.csv"
    output.write_text("path\nearlier rows\n")
    with pytest.raises(InferenceFailed, match=f"an index search runs in one process .* {option.split('=')[0]}"):
        search(indexed, output, option)
    assert output.read_text() == "path\nearlier rows\n"  # a resume used to start the file anew


def test_a_search_inside_its_input_folder_does_not_search_its_own_masks(indexed, tmp_path):
    import shutil

    queries = shutil.copytree(indexed["root"] / "queries", tmp_path / "queries")
    overrides = [f"model={indexed['model']}", f"input={queries}", f"index={indexed['root'] / 'index'}"]
    runs = []
    for _ in range(2):  # the second finds the first one's masks in its input folder
        infer(compose_config("infer", [*overrides, f"output={queries / 'found.csv'}", "save_masks=true"]))
        runs.append(sorted(r["path"] for r in read_results(queries / "found.csv")))
    assert list((queries / "found_masks").glob("*.png")) and runs[1] == runs[0]


@pytest.mark.parametrize("top_k", ["0", "-1", "2.5"])
def test_a_top_k_that_is_not_a_whole_number_of_at_least_one_is_refused(indexed, tmp_path, top_k):
    with pytest.raises(InferenceFailed, match="top_k must be a whole number of at least 1"):
        search(indexed, tmp_path / "k.csv", f"top_k={top_k}")


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncate_vectors", "is damaged"),
        ("truncate_database", "is damaged"),
        ("remove_database", "panels.sqlite is missing: the index is incomplete"),
        ("meta_list", "is not an index's meta.json"),
        ("meta_not_json", "meta.json is damaged"),
    ],
)
def test_a_damaged_index_is_refused_in_one_line_and_left_as_it_was(indexed, tmp_path, damage, message):
    import shutil

    damaged = tmp_path / "index"
    shutil.copytree(indexed["root"] / "index", damaged)
    if damage == "truncate_vectors":
        vectors = next(damaged.glob("vectors-*.faiss"))
        vectors.write_bytes(vectors.read_bytes()[:100])
    elif damage == "truncate_database":
        database = damaged / "panels.sqlite"
        database.write_bytes(database.read_bytes()[:3000])
    elif damage == "remove_database":
        (damaged / "panels.sqlite").unlink()
    else:
        (damaged / "meta.json").write_text("[]" if damage == "meta_list" else '{"format_version": 2,')
    before = sorted(p.name for p in damaged.iterdir())
    with pytest.raises(InferenceFailed, match=message):
        search(indexed, tmp_path / "out.csv", index_dir=damaged)
    assert sorted(p.name for p in damaged.iterdir()) == before


def test_an_unknown_exclude_same_is_refused_before_the_output_is_written(indexed, tmp_path):
    with pytest.raises(InferenceFailed, match="exclude_same must be one of"):
        search(indexed, tmp_path / "x.csv", "exclude_same=bogus")
    assert not (tmp_path / "x.csv").exists()


def test_a_search_stamps_its_detector_index_and_settings_and_says_when_it_replaces_rows_found_otherwise(
    indexed, tmp_path, caplog
):
    """The rows of a search depend on the index and the search settings as much as on the model:
    run.json names them all, and a search into an output of another one says what changed."""
    import shutil

    from datamodules.io import file_sha256

    output = tmp_path / "found.csv"
    search(indexed, output, "top_k=3")
    stamp = json.loads((tmp_path / "found.run.json").read_text())
    assert stamp["model_sha256"] == file_sha256(indexed["model"])
    index_dir = (indexed["root"] / "index").resolve()
    assert stamp["index"]["path"] == str(index_dir) and stamp["index"]["panels"] == 8
    assert stamp["index"]["descriptor"].startswith("local_sift-v2") and stamp["index"]["index_type"] == "flat"
    assert stamp["searched_with"]["top_k"] == 3 and stamp["searched_with"]["exclude_same"] == "path"
    with caplog.at_level("WARNING"):
        search(indexed, output, "top_k=3")  # the same search again: nothing to say
    assert "replaces them" not in caplog.text
    with caplog.at_level("WARNING"):
        search(indexed, output, "top_k=3", "exclude_same=review")
    assert "searched_with.exclude_same: path -> review" in caplog.text and "replaces them" in caplog.text
    caplog.clear()
    copy = shutil.copytree(indexed["root"] / "index", tmp_path / "other_index")
    with caplog.at_level("WARNING"):
        search(indexed, output, "top_k=3", "exclude_same=review", index_dir=copy)
    assert f"index.path: {index_dir} -> {copy.resolve()}" in caplog.text
    assert json.loads((tmp_path / "found.run.json").read_text())["index"]["path"] == str(copy.resolve())
