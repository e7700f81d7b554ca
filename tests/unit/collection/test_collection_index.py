"""The collection index: planted copies found, incremental and resumed builds, refusals, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from skimage import data

faiss = pytest.importorskip("faiss")

from collection.build import build_index, merge_parts, open_store  # noqa: E402
from collection.descriptors import LocalSift  # noqa: E402
from collection.panels import split_figure  # noqa: E402
from collection.query import open_index, retrieve  # noqa: E402
from collection.store import NPROBE, IndexBusy, IndexRefused  # noqa: E402
from datamodules.io import read_image, write_image  # noqa: E402
from synthesis.collection import planted_copy, texture_panel  # noqa: E402


@pytest.fixture(scope="module")
def tiles() -> list[np.ndarray]:
    """Sixteen generated 192 px textures (each draw a different image)."""
    rng = np.random.default_rng(1)
    return [texture_panel(rng, 192) for _ in range(16)]


def write_panels(folder: Path, panels: list[np.ndarray], reviews: int = 2, start: int = 0) -> list[Path]:
    paths = []
    for number, panel in enumerate(panels, start):
        paths.append(folder / f"review{number % reviews}" / f"panel{number:02d}.png")
        write_image(paths[-1], panel)
    return paths


def test_a_flipped_cropped_recoloured_jpeg_copy_finds_its_source(tmp_path, tiles):
    paths = write_panels(tmp_path / "collection", tiles)
    build_index(tmp_path / "collection", tmp_path / "index")
    source = read_image(paths[2])
    copy = planted_copy(source, np.random.default_rng(3), "hflip", min_area=0.4)
    store = open_index(tmp_path / "index")
    found = [row["path"] for row, _ in retrieve(store, copy.image, top_k=3)]
    assert found[0] == str(paths[2]), (copy.operations, found)
    rotated = planted_copy(source, np.random.default_rng(4), "rotate180", min_area=0.4)
    assert retrieve(store, rotated.image, top_k=3)[0][0]["path"] == str(paths[2])


def test_an_ivf_index_scans_nprobe_lists_and_a_user_can_ask_for_more(tmp_path, tiles):
    rng = np.random.default_rng(2)  # enough keypoints to train 64 inverted lists
    paths = write_panels(tmp_path / "collection", tiles + [texture_panel(rng, 192) for _ in range(40)])
    build_index(tmp_path / "collection", tmp_path / "index", index_type="ivf")
    copy = planted_copy(read_image(paths[5]), np.random.default_rng(6), "vflip", min_area=0.5)
    (vectors_file,) = (tmp_path / "index").glob("vectors-*.faiss")
    built_before = faiss.read_index(str(vectors_file))  # as an index built when the default was 32 lists
    built_before.nprobe = 32
    faiss.write_index(built_before, str(vectors_file))
    default = open_index(tmp_path / "index")
    assert default.index_type == "ivf" and default.index.nprobe == NPROBE
    every_list = open_index(tmp_path / "index", nprobe=64)
    assert every_list.index.nprobe == 64
    assert retrieve(every_list, copy.image, top_k=3)[0][0]["path"] == str(paths[5])
    with pytest.raises(ValueError, match="index_nprobe must be a whole number of at least 1, got 0"):
        open_index(tmp_path / "index", nprobe=0)


def test_adding_a_folder_later_describes_only_the_new_panels(tmp_path, tiles, monkeypatch):
    write_panels(tmp_path / "collection", tiles[:8])
    first = build_index(tmp_path / "collection", tmp_path / "index")
    write_panels(tmp_path / "collection", tiles[8:], start=8)
    calls = []
    original = LocalSift.describe_located
    monkeypatch.setattr(LocalSift, "describe_located", lambda self, image: calls.append(1) or original(self, image))
    second = build_index(tmp_path / "collection", tmp_path / "index")
    assert first["panels"] == 8
    assert second["panels"] == len(calls) == 8
    assert second["total_panels"] == 16
    changed = tmp_path / "collection" / "review0" / "panel00.png"
    write_image(changed, tiles[9])  # a file that changed is described again, its old panel forgotten
    third = build_index(tmp_path / "collection", tmp_path / "index")
    assert (third["panels"], third["total_panels"], len(calls)) == (1, 16, 9)
    store = open_index(tmp_path / "index")
    assert store.index.ntotal == store.db.execute("SELECT SUM(n_vectors) FROM panels").fetchone()[0]


def test_a_file_removed_from_the_folder_leaves_the_index_at_the_next_build_and_other_folders_stay(tmp_path, tiles):
    paths = write_panels(tmp_path / "collection", tiles[:4])
    other = write_panels(tmp_path / "elsewhere", tiles[4:6])
    build_index(tmp_path / "collection", tmp_path / "index")
    build_index(tmp_path / "elsewhere", tmp_path / "index")
    copy = planted_copy(read_image(paths[2]), np.random.default_rng(3), "hflip", min_area=0.4)
    assert retrieve(open_index(tmp_path / "index"), copy.image, top_k=1)[0][0]["path"] == str(paths[2])
    paths[2].unlink()
    other[0].unlink()  # gone too, but not from the folder being built: kept (another drive may be away)
    again = build_index(tmp_path / "collection", tmp_path / "index")
    assert (again["removed"], again["panels"], again["total_panels"]) == (1, 0, 5)
    store = open_index(tmp_path / "index")
    files = {row[0] for row in store.db.execute("SELECT path FROM files")}
    assert str(paths[2]) not in files and str(other[0]) in files
    assert store.index.ntotal == store.db.execute("SELECT SUM(n_vectors) FROM panels").fetchone()[0]
    assert all(row["path"] != str(paths[2]) for row, _ in retrieve(store, copy.image, top_k=5))


def test_a_folder_given_relative_is_indexed_once_by_absolute_path_and_found_from_anywhere(tmp_path, tiles, monkeypatch):
    paths = write_panels(tmp_path / "collection", tiles[:4])
    monkeypatch.chdir(tmp_path)
    first = build_index("collection", tmp_path / "index")
    again = build_index(tmp_path / "collection", tmp_path / "index")  # the same folder, typed otherwise
    assert (first["panels"], again["panels"], again["total_panels"]) == (4, 0, 4)
    monkeypatch.chdir(tmp_path / "collection")  # a search run from another folder reads the panel again
    copy = planted_copy(read_image(paths[1]), np.random.default_rng(3), "hflip", min_area=0.4)
    assert retrieve(open_index(tmp_path / "index"), copy.image, top_k=3)[0][0]["path"] == str(paths[1])


def test_a_linked_panel_keeps_the_name_the_user_gave(tmp_path, tiles):
    paths = write_panels(tmp_path / "collection", tiles[:3])
    (tmp_path / "collection" / "review0" / "link.png").symlink_to(paths[1])
    build_index(tmp_path / "collection", tmp_path / "index")
    stored = {row[0] for row in open_index(tmp_path / "index").db.execute("SELECT path FROM panels")}
    assert str(tmp_path / "collection" / "review0" / "link.png") in stored and str(paths[1]) in stored


def test_a_killed_build_resumes_from_its_last_commit(tmp_path, tiles, monkeypatch):
    write_panels(tmp_path / "collection", tiles)
    original = LocalSift.describe_located
    calls = []

    def dies_on_the_eleventh(self, image):
        calls.append(1)
        if len(calls) == 11:
            raise KeyboardInterrupt
        return original(self, image)

    monkeypatch.setattr(LocalSift, "describe_located", dies_on_the_eleventh)
    with pytest.raises(KeyboardInterrupt):
        build_index(tmp_path / "collection", tmp_path / "index", commit_every=4)
    store = open_index(tmp_path / "index")
    assert store.n_panels == 8  # two commits of four survived
    store.close()
    resumed = build_index(tmp_path / "collection", tmp_path / "index", commit_every=4)
    assert (resumed["skipped"], resumed["panels"], resumed["total_panels"]) == (8, 8, 16)
    store = open_index(tmp_path / "index")
    counted = store.db.execute("SELECT SUM(n_vectors), COUNT(DISTINCT path) FROM panels").fetchone()
    assert store.index.ntotal == counted[0] and counted[1] == 16
    assert len(list((tmp_path / "index").glob("vectors-*.faiss"))) == 1


@pytest.mark.parametrize("batch", [100, 1_000_000])
def test_panels_vectors_reach_faiss_in_batches_and_every_committed_one_is_there(tmp_path, tiles, monkeypatch, batch):
    import collection.store

    monkeypatch.setattr(collection.store, "ADD_BATCH", batch)
    adds = []
    original = collection.store.PanelStore.add_vectors
    counted = lambda self, vectors, ids, *rest: adds.append(len(vectors)) or original(self, vectors, ids, *rest)  # noqa: E731
    monkeypatch.setattr(collection.store.PanelStore, "add_vectors", counted)
    write_panels(tmp_path / "collection", tiles)
    build_index(tmp_path / "collection", tmp_path / "index", commit_every=8)
    store = open_index(tmp_path / "index")
    stored = store.db.execute("SELECT SUM(n_vectors) FROM panels").fetchone()[0]
    assert store.index.ntotal == stored == sum(adds)
    assert len(adds) <= stored // batch + 2 < len(tiles)  # per full batch or commit (two), not per panel
    found = retrieve(store, read_image(tmp_path / "collection" / "review1" / "panel15.png"), top_k=1)
    assert found[0][0]["path"].endswith("panel15.png")  # the last panel, added by the final commit


def test_a_second_build_cannot_take_the_lock(tmp_path, tiles):
    write_panels(tmp_path / "collection", tiles[:2])
    build_index(tmp_path / "collection", tmp_path / "index")
    holder = open_store(tmp_path / "index", "local_sift").lock()
    with pytest.raises(IndexBusy, match="being written by pid"):
        build_index(tmp_path / "collection", tmp_path / "index")
    holder.close()
    assert build_index(tmp_path / "collection", tmp_path / "index")["skipped"] == 2


def test_an_index_of_another_version_or_descriptor_is_refused(tmp_path, tiles):
    write_panels(tmp_path / "collection", tiles[:2])
    build_index(tmp_path / "collection", tmp_path / "index", descriptor="phash")
    with pytest.raises(IndexRefused, match="holds phash-v1 descriptors, not local_sift"):
        open_index(tmp_path / "index", "local_sift")
    with pytest.raises(IndexRefused, match="holds phash-v1 descriptors"):
        build_index(tmp_path / "collection", tmp_path / "index", descriptor="local_sift")
    meta = tmp_path / "index" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "format_version": 99}))
    with pytest.raises(IndexRefused, match="index format 99"):
        open_index(tmp_path / "index")


def test_a_corrupt_file_is_an_error_row_and_the_rest_is_indexed(tmp_path, tiles):
    write_panels(tmp_path / "collection", tiles[:3])
    (tmp_path / "collection" / "review0" / "broken.png").write_bytes(b"not an image")
    result = build_index(tmp_path / "collection", tmp_path / "index")
    assert (result["panels"], result["errors"]) == (3, 1)
    store = open_index(tmp_path / "index")
    status, error = store.db.execute("SELECT status, error FROM files WHERE path LIKE '%broken.png'").fetchone()
    assert status == "error" and "corrupt" in error


def test_exclude_same_review_drops_the_query_s_own_review(tmp_path, tiles):
    paths = write_panels(tmp_path / "collection", tiles[:6], reviews=2)  # panel00 in review0
    write_image(tmp_path / "collection" / "review1" / "reused.png", read_image(paths[0]))
    build_index(tmp_path / "collection", tmp_path / "index")
    store = open_index(tmp_path / "index")
    query = read_image(paths[0])
    same_path = retrieve(store, query, 3, source_id="review0", path=str(paths[0]), exclude_same="path")
    assert str(paths[0]) not in [r["path"] for r, _ in same_path]
    assert same_path[0][0]["path"].endswith("reused.png")
    other_review = retrieve(store, query, 3, source_id="review1", path="", exclude_same="review")
    assert {r["source_id"] for r, _ in other_review} == {"review0"}
    assert other_review[0][0]["path"] == str(paths[0])


def test_a_folder_indexed_again_from_a_manifest_takes_the_manifest_s_review_ids(tmp_path, tiles):
    import sqlite3

    paths = write_panels(tmp_path / "collection", tiles[:4], reviews=2)
    build_index(tmp_path / "collection", tmp_path / "index")
    manifest = tmp_path / "papers.csv"
    manifest.write_text("path,review\n" + "".join(f"{p},paper{i // 2}\n" for i, p in enumerate(paths)))
    again = build_index(manifest, tmp_path / "index")
    assert again["skipped"] == 4  # nothing described twice
    with sqlite3.connect(tmp_path / "index" / "panels.sqlite") as db:
        sources = dict(db.execute("SELECT path, source_id FROM panels").fetchall())
    assert sources == {str(p): f"paper{i // 2}" for i, p in enumerate(paths)}  # were review0 / review1


def test_shards_merge_into_one_index_with_faiss_merge_from(tmp_path, tiles):
    paths = write_panels(tmp_path / "collection", tiles[:6])
    for shard in ("0/2", "1/2"):
        assert build_index(tmp_path / "collection", tmp_path / "index", shard=shard)["panels"] == 3
    merged = merge_parts(tmp_path / "index")
    assert (merged["parts"], merged["total_panels"]) == (2, 6)
    assert not (tmp_path / "index" / "parts").exists()
    store = open_index(tmp_path / "index")
    assert sorted(r["path"] for r in store.panels(range(6)).values()) == sorted(map(str, paths))
    for path in paths:
        assert retrieve(store, read_image(path), 1, exclude_same="none")[0][0]["path"] == str(path)


def test_shards_run_again_over_an_unchanged_archive_add_no_panel_twice_and_a_changed_file_replaces_its_own(
    tmp_path, tiles
):
    paths = write_panels(tmp_path / "collection", tiles[:6])
    for _ in range(2):  # a retried job array: the second round finds everything indexed
        for shard in ("0/2", "1/2"):
            build_index(tmp_path / "collection", tmp_path / "index", shard=shard)
        merge_parts(tmp_path / "index")
    write_image(paths[0], tiles[7])  # one file changed
    for shard in ("0/2", "1/2"):
        build_index(tmp_path / "collection", tmp_path / "index", shard=shard)
    assert merge_parts(tmp_path / "index")["total_panels"] == 6
    store = open_index(tmp_path / "index")
    assert store.index.ntotal == sum(n for (n,) in store.db.execute("SELECT n_vectors FROM panels"))  # none stale
    assert sorted(r["path"] for r in store.panels(range(store.next_id)).values()) == sorted(map(str, paths))
    assert retrieve(store, tiles[7], 1, exclude_same="none")[0][0]["path"] == str(paths[0])


def test_parts_that_are_not_one_whole_splitting_are_refused(tmp_path, tiles):
    write_panels(tmp_path / "collection", tiles[:4])
    build_index(tmp_path / "collection", tmp_path / "index", shard="0/2")
    build_index(tmp_path / "collection", tmp_path / "index", shard="1/3")
    with pytest.raises(ValueError, match=r"\(0-of-2, 1-of-3\) are not one whole splitting"):
        merge_parts(tmp_path / "index")


def test_a_merge_with_another_descriptor_than_the_parts_is_refused_and_leaves_the_index_mergeable(tmp_path, tiles):
    write_panels(tmp_path / "collection", tiles[:4])
    for shard in ("0/2", "1/2"):
        build_index(tmp_path / "collection", tmp_path / "index", descriptor="phash", shard=shard)
    with pytest.raises(IndexRefused, match="use it with descriptor=phash"):
        merge_parts(tmp_path / "index")  # local_sift, the default
    assert not (tmp_path / "index" / "meta.json").exists()
    assert merge_parts(tmp_path / "index", descriptor="phash")["total_panels"] == 4
    with pytest.raises(ValueError, match="no index parts"):
        merge_parts(tmp_path / "empty")
    assert not (tmp_path / "empty").exists()


def test_a_wrong_index_type_worker_count_or_commit_interval_is_refused_before_anything_is_made(tmp_path, tiles):
    write_panels(tmp_path / "collection", tiles[:2])
    with pytest.raises(ValueError, match="index_type must be one of auto, flat, ivf, ivf_pq, got 'bogus'"):
        build_index(tmp_path / "collection", tmp_path / "index", index_type="bogus")
    with pytest.raises(ValueError, match="workers must be 1 or more, got 0"):
        build_index(tmp_path / "collection", tmp_path / "index", workers=0)
    with pytest.raises(ValueError, match="commit_every must be 1 or more, got 0"):
        build_index(tmp_path / "collection", tmp_path / "index", commit_every=0)
    assert not (tmp_path / "index").exists()
    (tmp_path / "index").write_text("a file")
    with pytest.raises(ValueError, match="is a file: an index is a folder"):
        build_index(tmp_path / "collection", tmp_path / "index")


def test_white_gutters_cut_a_figure_into_its_panels():
    figure = np.full((300, 420, 3), 255, np.uint8)
    boxes = [(10, 10, 200, 140), (220, 10, 410, 140), (10, 160, 410, 290)]
    rng = np.random.default_rng(0)
    for x0, y0, x1, y1 in boxes:
        figure[y0:y1, x0:x1] = rng.integers(0, 200, (y1 - y0, x1 - x0, 3))
    assert split_figure(figure) == boxes
    assert split_figure(figure[10:140, 10:200]) == [(0, 0, 190, 130)]


@pytest.fixture(scope="module")
def faint_right_half() -> np.ndarray:
    """The bundled astronaut photograph at 256 px with its right half at 30 % of its contrast."""
    photo = cv2.resize(data.astronaut(), (256, 256), interpolation=cv2.INTER_AREA).astype(np.float32)
    right = photo[:, 128:]
    photo[:, 128:] = right.mean() + (right - right.mean()) * 0.3
    return np.clip(photo, 0, 255).astype(np.uint8)


def test_stored_keypoints_cover_the_faint_half_of_a_panel_too(faint_right_half):
    points, vectors, (_, width) = LocalSift().located(faint_right_half, 64, spread=True)
    strongest, _, _ = LocalSift().located(faint_right_half, 64)
    assert len(points) == len(vectors) == 64
    assert np.mean(points[:, 0] >= width / 2) >= 0.25
    assert np.mean(strongest[:, 0] >= width / 2) < 0.05  # what the strongest alone would store


def test_a_crop_of_the_faint_half_of_a_panel_finds_it(tmp_path, tiles, faint_right_half):
    paths = write_panels(tmp_path / "collection", [faint_right_half] + tiles)
    build_index(tmp_path / "collection", tmp_path / "index")
    store = open_index(tmp_path / "index")
    crop = faint_right_half[30:226, 140:]  # 116 x 196 px of the faint half: a third of the panel
    assert [row["path"] for row, _ in retrieve(store, crop, 3)][:1] == [str(paths[0])]
    store.close()


def test_an_index_built_unsplit_refuses_a_build_that_splits_figures_into_panels(tmp_path, tiles):
    write_panels(tmp_path / "collection", tiles[:2])
    build_index(tmp_path / "collection", tmp_path / "index")
    with pytest.raises(ValueError, match="was built with split_panels=false: give the same"):
        build_index(tmp_path / "collection", tmp_path / "index", split_panels=True)
    assert build_index(tmp_path / "collection", tmp_path / "index")["skipped"] == 2  # the same setting: incremental


def test_a_file_listed_twice_is_indexed_once_and_a_mistyped_search_option_is_refused(tmp_path, tiles):
    paths = write_panels(tmp_path / "collection", tiles[:2])
    manifest = tmp_path / "twice.csv"
    manifest.write_text("path,review\n" + "".join(f"{p},r\n" for p in [*paths, paths[0]]))
    assert build_index(manifest, tmp_path / "index")["panels"] == 2
    with pytest.raises(ValueError, match="index_nprobe must be a whole number of at least 1, got 'abc'"):
        open_index(tmp_path / "index", nprobe="abc")


def test_an_input_without_images_is_refused_not_made_into_an_empty_index(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no images found in .*empty: nothing to index"):
        build_index(tmp_path / "empty", tmp_path / "index")
    assert not (tmp_path / "index").exists()


def test_a_merged_index_records_split_panels_and_a_checkpoint_is_refused_for_a_descriptor_without_weights(
    tmp_path, tiles
):
    from collection.descriptors import make_descriptor

    write_panels(tmp_path / "collection", tiles[:4])
    for shard in ("0/2", "1/2"):
        build_index(tmp_path / "collection", tmp_path / "index", shard=shard)
    merge_parts(tmp_path / "index")
    with pytest.raises(ValueError, match="was built with split_panels=false: give the same"):
        build_index(tmp_path / "collection", tmp_path / "index", split_panels=True)
    with pytest.raises(ValueError, match="descriptor_checkpoint is the weights of the pairnet descriptor"):
        make_descriptor("local_sift", checkpoint="weights.ckpt")


def test_a_shard_run_again_over_an_unchanged_archive_describes_nothing(tmp_path, tiles):
    write_panels(tmp_path / "collection", tiles[:4])
    for shard in ("0/2", "1/2"):
        build_index(tmp_path / "collection", tmp_path / "index", shard=shard)
    merge_parts(tmp_path / "index")
    again = [build_index(tmp_path / "collection", tmp_path / "index", shard=s)["panels"] for s in ("0/2", "1/2")]
    assert again == [0, 0]
