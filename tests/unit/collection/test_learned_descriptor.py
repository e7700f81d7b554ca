"""The learned `pairnet` descriptor: a trained pairnet checkpoint's encoder, region-pooled; the index
is tied to that exact file (its SHA-256 in the descriptor's name, its path in meta.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")

from collection.build import build_index, merge_parts  # noqa: E402
from collection.descriptors import REGIONS, make_descriptor, query_vectors  # noqa: E402
from collection.learned_descriptor import file_sha256  # noqa: E402
from collection.query import open_index, retrieve  # noqa: E402
from collection.store import IndexRefused  # noqa: E402
from datamodules.io import write_image  # noqa: E402
from synthesis.collection import texture_panel  # noqa: E402
from tests.helpers import write_pairnet_checkpoint, write_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> tuple[Path, Path]:
    """Two pairnet_tiny checkpoints with different initial weights."""
    folder = tmp_path_factory.mktemp("pairnet")
    return write_pairnet_checkpoint(folder / "a.ckpt", 0), write_pairnet_checkpoint(folder / "b.ckpt", 1)


@pytest.fixture(scope="module")
def tiles() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [texture_panel(rng, 160) for _ in range(8)]


def write_collection(folder: Path, panels: list[np.ndarray]) -> list[Path]:
    paths = [folder / "review" / f"panel{number}.png" for number in range(len(panels))]
    for path, panel in zip(paths, panels):
        write_image(path, panel)
    return paths


def test_a_panel_is_one_unit_vector_per_region_named_after_its_checkpoint(checkpoints, tiles):
    descriptor = make_descriptor("pairnet", checkpoint=checkpoints[0])
    vectors = descriptor.describe(tiles[0])
    assert vectors.shape == (len(REGIONS), descriptor.dim) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(descriptor.describe(tiles[0].copy()), vectors)
    assert not np.allclose(descriptor.describe(tiles[1]), vectors)
    assert file_sha256(checkpoints[0])[:12] in descriptor.name
    assert descriptor.name != make_descriptor("pairnet", checkpoint=checkpoints[1]).name


def test_a_flipped_copy_is_retrieved_through_the_query_variants(tmp_path, checkpoints, tiles):
    paths = write_collection(tmp_path / "collection", tiles)
    build_index(tmp_path / "collection", tmp_path / "index", "pairnet", checkpoint=str(checkpoints[0]))
    store = open_index(tmp_path / "index")  # the checkpoint is found through the index's meta.json
    source = store.descriptor.describe(tiles[3])
    for flipped in (tiles[3][:, ::-1], tiles[3][::-1], tiles[3][::-1, ::-1]):
        flipped = np.ascontiguousarray(flipped)
        (best, similarity), *_ = retrieve(store, flipped, top_k=3, exclude_same="none")
        assert best["path"] == str(paths[3]) and similarity > 0.99
        # every region of the source, the corner windows too, is met by one of the query's variants
        assert (query_vectors(store.descriptor, flipped) @ source.T).max(axis=0).min() > 0.999
        assert (store.descriptor.describe(flipped) @ source.T).max(axis=0).min() < 0.999  # not flip-invariant
    store.close()


def test_an_index_is_refused_with_another_checkpoint_or_a_changed_file(tmp_path, checkpoints, tiles):
    first = shutil.copy(checkpoints[0], tmp_path / "first.ckpt")
    write_collection(tmp_path / "collection", tiles[:3])
    build_index(tmp_path / "collection", tmp_path / "index", "pairnet", checkpoint=str(first))
    meta = json.loads((tmp_path / "index" / "meta.json").read_text())
    assert meta["descriptor_checkpoint"] == str(Path(first).resolve())
    assert meta["descriptor_checkpoint_sha256"] == file_sha256(first)
    with pytest.raises(IndexRefused, match="another descriptor_checkpoint"):
        open_index(tmp_path / "index", "pairnet", checkpoint=str(checkpoints[1]))
    with pytest.raises(IndexRefused, match="another descriptor_checkpoint"):
        build_index(tmp_path / "collection", tmp_path / "index", "pairnet", checkpoint=str(checkpoints[1]))
    open_index(tmp_path / "index").close()
    shutil.copy(checkpoints[1], first)  # the same path, other weights
    with pytest.raises(IndexRefused, match="now has SHA-256"):
        open_index(tmp_path / "index")
    Path(first).unlink()
    with pytest.raises(IndexRefused, match="no longer exists"):
        open_index(tmp_path / "index")
    open_index(tmp_path / "index", checkpoint=str(checkpoints[0])).close()  # the original file, moved


def test_shard_parts_merge_and_search_with_the_checkpoint_they_recorded(tmp_path, checkpoints, tiles):
    paths = write_collection(tmp_path / "collection", tiles[:6])
    for part in range(2):
        build_index(
            tmp_path / "collection", tmp_path / "index", "pairnet", shard=f"{part}/2", checkpoint=str(checkpoints[0])
        )
    assert merge_parts(tmp_path / "index", "pairnet")["total_panels"] == 6
    store = open_index(tmp_path / "index")
    assert store.descriptor.sha256 == file_sha256(checkpoints[0])
    assert retrieve(store, tiles[4], top_k=1, exclude_same="none")[0][0]["path"] == str(paths[4])
    store.close()


def test_a_missing_or_foreign_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="needs descriptor_checkpoint"):
        make_descriptor("pairnet")
    with pytest.raises(ValueError, match="does not exist"):
        make_descriptor("pairnet", checkpoint=tmp_path / "absent.ckpt")
    (tmp_path / "noise.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="descriptor_checkpoint: .*noise.ckpt"):
        make_descriptor("pairnet", checkpoint=tmp_path / "noise.ckpt")
    other = write_tiny_model(tmp_path / "npr", onnx=False)["ckpt"]
    with pytest.raises(ValueError, match="not a pairnet"):
        make_descriptor("pairnet", checkpoint=other)
