"""Verifying retrieved candidates: the cheap geometric check prunes, the pair detector decides,
retrieval's own map may confirm the first candidate; GPU choice."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from skimage import data

pytest.importorskip("faiss")

from collection.build import build_index  # noqa: E402
from collection.descriptors import LocalSift  # noqa: E402
from collection.query import open_index, retrieve  # noqa: E402
from collection.store import IndexRefused, on_search_device  # noqa: E402
from collection.verification import (  # noqa: E402
    CONFIRM_CORRELATION,
    MAX_MISMATCH_SHARE,
    MIN_BEST_INLIERS,
    MIN_GEOMETRIC_INLIERS,
    agrees_geometrically,
    confirmed_by_retrieval,
    content_mismatch,
    geometric_inliers,
    mapped_overlap,
    verify,
    verify_candidates,
)
from datamodules.io import read_image, write_image  # noqa: E402
from detectors.duplication import PairPrediction  # noqa: E402
from synthesis.collection import jpeg, planted_copy, texture_panel  # noqa: E402
from synthesis.figure_panels import chart_panel, micrograph_panel  # noqa: E402
from tests.duplication_helpers import hand_set_pair_module  # noqa: E402


class RecordingDetector:
    """Stands in for the pair detector: records what it is asked, says every pair is duplicated."""

    def __init__(self) -> None:
        self.described: list[tuple[int, ...]] = []
        self.asked: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def describe(self, image: np.ndarray) -> tuple[int, ...]:
        self.described.append(image.shape)
        return image.shape

    def predict_pair(self, panel_a, panel_b, threshold: float) -> SimpleNamespace:
        self.asked.append((panel_a, panel_b))
        return SimpleNamespace(score=1.0, duplicated=True, transform={})


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> dict:
    """Twelve generated textures (two reviews) indexed, and a mirrored 40 % crop of one of them."""
    root = tmp_path_factory.mktemp("verification")
    rng = np.random.default_rng(7)
    paths = []
    for number in range(12):
        paths.append(root / "collection" / f"review{number % 2}" / f"panel{number:02d}.png")
        write_image(paths[-1], texture_panel(rng, 192))
    build_index(root / "collection", root / "index")
    copy = planted_copy(read_image(paths[5]), np.random.default_rng(3), "vflip", min_area=0.4)
    return {"root": root, "source": str(paths[5]), "copy": copy.image}


def test_a_planted_copy_passes_the_geometric_check_and_reaches_the_pair_detector(collection):
    store = open_index(collection["root"] / "index")
    candidates = retrieve(store, collection["copy"], top_k=5, exclude_same="none")
    source = next(c for c, _ in candidates if c["path"] == collection["source"])
    assert len(source["correspondences"]["query"]) == len(source["correspondences"]["panel"]) >= 4
    assert agrees_geometrically(source)
    detector = RecordingDetector()
    verified = verify_candidates(detector, collection["copy"], candidates, threshold=0.5)
    assert collection["source"] in [c["path"] for c, _, _ in verified]
    assert len(detector.described) == len(verified) + 1  # the query once, then each checked candidate


def test_a_candidate_failing_the_geometric_check_never_reaches_the_pair_detector(collection):
    store = open_index(collection["root"] / "index")
    candidates = retrieve(store, collection["copy"], top_k=5, exclude_same="none")
    source, similarity = next((c, s) for c, s in candidates if c["path"] == collection["source"])
    # two pairs fit any map: no evidence, even for the first candidate
    too_few = {key: value[:2] for key, value in source["correspondences"].items()}
    unfitted = {key: value for key, value in source.items() if key not in ("geometric_inliers", "retrieval_map")}
    weak = {**unfitted, "correspondences": too_few}
    assert agrees_geometrically(source) and not agrees_geometrically(weak, best=True)
    detector = RecordingDetector()
    assert verify_candidates(detector, collection["copy"], [(weak, 9.0)], 0.5) == []
    assert detector.asked == [] and detector.described == []  # nothing passed: not even the query is described
    assert len(verify_candidates(detector, collection["copy"], [(source, similarity)], 0.5)) == 1


def test_retrievals_own_map_carries_a_flipped_crop_onto_its_source(collection):
    store = open_index(collection["root"] / "index")
    candidates = retrieve(store, collection["copy"], top_k=5, exclude_same="none")
    source = next(c for c, _ in candidates if c["path"] == collection["source"])
    source_image, other = read_image(collection["source"]), texture_panel(np.random.default_rng(11), 192)
    assert confirmed_by_retrieval(collection["copy"], source_image, source["retrieval_map"]) >= CONFIRM_CORRELATION
    assert confirmed_by_retrieval(collection["copy"], other, source["retrieval_map"]) is None


def test_the_first_candidate_the_pair_detector_refuses_is_confirmed_by_retrievals_map_alone(collection):
    """A crop can leave the pair detector too few keypoints of its own; retrieval's map, fitted on the
    indexed keypoints, still places it, and the pixels under that map say it is a copy. Only the
    first candidate is asked so: the others are where false matches would pile up."""
    store = open_index(collection["root"] / "index")
    candidates = retrieve(store, collection["copy"], top_k=5, exclude_same="none")
    source, similarity = next((c, s) for c, s in candidates if c["path"] == collection["source"])
    detector = hand_set_pair_module().net
    answers = verify_candidates(detector, collection["copy"], [(source, similarity), (dict(source), similarity)], 1.01)
    (_, _, first), (_, _, second) = answers
    assert first.duplicated and first.method == "retrieval_map" and first.score < 1.01
    assert "correlates" in first.reason and first.geometric == ["vflip"] and "flip" in first.operations
    assert first.mask_a.mean() > 0.5 and first.mask_b.any()
    assert not second.duplicated and second.method != "retrieval_map"


class RefusingDetector(RecordingDetector):
    """Stands in for a pair detector that cannot describe a pair under a given map (the learned one)."""

    def predict_pair(self, panel_a, panel_b, threshold: float) -> SimpleNamespace:
        return SimpleNamespace(score=0.1, duplicated=False, transform={})


def test_a_detector_that_cannot_describe_a_given_map_keeps_its_refusal(collection):
    store = open_index(collection["root"] / "index")
    candidates = retrieve(store, collection["copy"], top_k=5, exclude_same="none")
    first = verify_candidates(RefusingDetector(), collection["copy"], candidates, 0.5)[0][2]
    assert candidates[0][0]["path"] == collection["source"] and not first.duplicated


def test_retrievals_map_confirms_only_from_three_keypoints_in_place(tmp_path):
    """The first candidate reaches the pair detector from two inliers; a map carried by two is no
    evidence to confirm a copy by, however well the pixels under it correlate."""
    panel = texture_panel(np.random.default_rng(12), 160)
    write_image(tmp_path / "archived.png", panel)
    candidate = {"path": str(tmp_path / "archived.png"), "box": [0, 0, 160, 160], "retrieval_map": np.eye(2, 3)}
    detector = hand_set_pair_module().net
    described = detector.describe(panel)
    for inliers, confirmed in ((2, False), (3, True)):
        found = verify(detector, described, {**candidate, "geometric_inliers": inliers}, 1.01, panel, confirm=True)
        assert found.duplicated is confirmed


def test_a_query_without_a_copy_in_the_index_is_not_confirmed_by_its_first_candidates_map(collection):
    store = open_index(collection["root"] / "index")
    fresh = texture_panel(np.random.default_rng(99), 160)
    candidates = retrieve(store, fresh, top_k=5, exclude_same="none")
    answers = verify_candidates(hand_set_pair_module().net, fresh, candidates, 1.01)
    assert not any(found.duplicated for _, _, found in answers)


def test_micrographs_of_one_figure_style_aligned_on_their_lettering_are_not_confirmed():
    """Two different fluorescence panels with the panel letter and scale bar in the same places
    correlate over their dark backgrounds when aligned; without the furniture nothing is shared.
    A brightened JPEG copy of one of them still is confirmed."""

    def panel(seed: int) -> np.ndarray:
        return micrograph_panel(np.random.default_rng(seed), (224, 224))

    # pairs whose whole overlap, lettering included, correlates over 0.8 and passes the content check
    for seed in (28, 31, 34):
        assert confirmed_by_retrieval(panel(seed), panel(seed + 1000), np.eye(2, 3)) is None
    copy = jpeg(np.clip(panel(28).astype(np.float32) * 1.3 + 10, 0, 255).astype(np.uint8), 75)
    assert confirmed_by_retrieval(copy, panel(28), np.eye(2, 3)) >= CONFIRM_CORRELATION


def test_a_candidate_that_correlates_but_differs_in_a_patch_is_not_confirmed():
    """Correlation alone is no copy: a panel whose 36 px patch was brightened by 80 grey levels
    still correlates 0.9 with its original, but the content check under the map refuses it."""
    original = texture_panel(np.random.default_rng(3), 160)
    edited = original.astype(int)
    edited[60:96, 60:96] += 80
    edited = np.clip(edited, 0, 255).astype(np.uint8)
    target, mapped = mapped_overlap(original, edited, np.eye(2, 3), without_furniture=True)
    assert np.corrcoef(target, mapped)[0, 1] >= CONFIRM_CORRELATION
    assert confirmed_by_retrieval(original, edited, np.eye(2, 3)) is None
    assert confirmed_by_retrieval(original, original, np.eye(2, 3)) is not None


def test_an_index_without_keypoint_positions_is_refused_with_what_to_do(collection, tmp_path):
    old = tmp_path / "old_index"
    build_index(collection["root"] / "collection", old)
    meta = old / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "format_version": 1}))
    with pytest.raises(IndexRefused, match="built with index format 1, this toolkit reads format 2: rebuild it"):
        open_index(old)


def test_gpu_auto_searches_on_the_cpu_when_faiss_sees_no_gpu(collection, monkeypatch):
    import faiss

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 0)
    store = open_index(collection["root"] / "index", gpu="auto")
    assert store.on_gpu is False and type(store.index).__name__.startswith("Index")
    assert retrieve(store, collection["copy"], top_k=1, exclude_same="none")[0][0]["path"] == collection["source"]


def test_gpu_true_without_a_gpu_fails_with_what_to_do(collection, monkeypatch):
    import faiss

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 0)
    with pytest.raises(IndexRefused, match="index_gpu=true but FAISS sees no GPU: install faiss-gpu"):
        open_index(collection["root"] / "index", gpu=True)
    with pytest.raises(ValueError, match="index_gpu must be one of auto, true, false"):
        on_search_device(None, "cuda")


def test_two_describing_processes_build_the_same_index_as_one(collection, tmp_path):
    one = build_index(collection["root"] / "collection", tmp_path / "one", commit_every=5)
    two = build_index(collection["root"] / "collection", tmp_path / "two", commit_every=5, workers=2)
    assert (one["panels"], one["total_panels"]) == (two["panels"], two["total_panels"]) == (12, 12)
    rows = {}
    for name in ("one", "two"):
        store = open_index(tmp_path / name)
        rows[name] = store.db.execute("SELECT id, path, n_vectors, points FROM panels ORDER BY id").fetchall()
        vectors = store.index.index.reconstruct_n(0, store.index.ntotal)
        rows[name].append(np.round(vectors, 5).tobytes())
    assert rows["one"] == rows["two"]
    assert all(len(points) == 2 * n_vectors > 0 for _, _, n_vectors, points in rows["one"][:-1])
    assert Path(rows["two"][0][1]).is_file()


def test_a_mirrored_recoloured_jpeg_crop_reproduces_its_source_under_its_map():
    source = texture_panel(np.random.default_rng(4), 192)
    y, x, height, width = 30, 40, 120, 100
    crop = source[y : y + height, x : x + width, :].astype(np.int16)
    copy = jpeg(np.clip(crop[:, ::-1] * 0.4 + 5, 0, 255).astype(np.uint8), 75)  # mirrored, darker, less contrast
    query_to_source = np.array([[-1.0, 0.0, x + width - 1], [0.0, 1.0, y]])
    assert content_mismatch(copy, source, query_to_source) <= MAX_MISMATCH_SHARE / 4


def test_a_copy_contrasted_until_its_highlights_clip_still_reproduces_its_source():
    source = data.astronaut()[::2, ::2]
    copy = jpeg(np.clip(source.astype(np.float32) * 2.0 + 30, 0, 255).astype(np.uint8), 75)
    assert np.mean(copy.mean(2) >= 252) > 0.25  # a good part of it clipped white
    assert content_mismatch(copy, source, np.eye(2, 3)) <= MAX_MISMATCH_SHARE / 4


def test_an_inverted_panel_does_not_reproduce_its_source():
    """A least-squares gain could turn a panel's negative into a perfect fit; no edit inverts a copy."""
    source = data.astronaut()[::2, ::2]
    assert content_mismatch(255 - source, source, np.eye(2, 3)) > 2 * MAX_MISMATCH_SHARE


def test_two_charts_of_one_template_share_keypoints_but_not_content():
    one, other = (chart_panel(np.random.default_rng(seed)) for seed in (1, 2))
    assert content_mismatch(one, other, np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])) > 2 * MAX_MISMATCH_SHARE


def test_panels_that_hardly_overlap_under_the_map_count_as_all_different():
    panel = texture_panel(np.random.default_rng(5), 128)
    far_away = np.array([[1.0, 0.0, 5000.0], [0.0, 1.0, 0.0]])
    assert content_mismatch(panel, panel, far_away) == 1.0


class IdentityMatcher:
    """Stands in for the pair detector: every pair duplicated, under the identity map."""

    def describe(self, image: np.ndarray) -> np.ndarray:
        return image

    def predict_pair(self, panel_a: np.ndarray, panel_b: np.ndarray, threshold: float) -> PairPrediction:
        masks = np.ones(panel_a.shape[:2], bool), np.ones(panel_b.shape[:2], bool)
        identity = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
        return PairPrediction(0.9, True, ["direct"], [], {"matrix": identity}, *masks, "sift", "")


def test_a_match_on_a_shared_layout_alone_is_answered_not_duplicated_with_the_reason(tmp_path):
    one, other = (chart_panel(np.random.default_rng(seed)) for seed in (1, 2))
    write_image(tmp_path / "archived.png", other)
    candidate = {"path": str(tmp_path / "archived.png"), "box": [0, 0, other.shape[1], other.shape[0]]}
    found = verify(IdentityMatcher(), one, candidate, 0.5, query_image=one)
    assert not found.duplicated and "shared layout" in found.reason
    assert not found.mask_a.any() and not found.mask_b.any() and found.operations == []
    assert verify(IdentityMatcher(), other, candidate, 0.5, query_image=other).duplicated


def mapped_correspondences(inliers: int, outliers: int = 0, seed: int = 0) -> dict[str, np.ndarray]:
    """Retrieval pairs: `inliers` query keypoints carried onto the panel by one similarity map
    (turned 0.4 rad, scaled 1.3, shifted), `outliers` placed 40-80 px off that map."""
    rng = np.random.default_rng(seed)
    query = rng.uniform(20, 236, (inliers + outliers, 2))
    turn = 1.3 * np.array([[np.cos(0.4), -np.sin(0.4)], [np.sin(0.4), np.cos(0.4)]])
    panel = query @ turn.T + [15.0, -10.0]
    angles = rng.uniform(0, 2 * np.pi, outliers)
    panel[inliers:] += rng.uniform(40, 80, (outliers, 1)) * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    rows = np.arange(inliers + outliers)
    return {
        "query": query.astype(np.float32),
        "panel": panel.astype(np.float32),
        "mirrored": np.zeros(len(rows), bool),
        "query_row": rows,
        "panel_row": rows,
        "similarity": np.full(len(rows), 0.95),
    }


def test_the_check_counts_the_keypoints_one_map_carries_not_those_off_it():
    assert geometric_inliers(mapped_correspondences(10, outliers=5)) == 10


def test_a_query_keypoint_paired_twice_keeps_its_more_similar_pair():
    pairs = mapped_correspondences(10)
    decoy = {  # query keypoint 0 also near an unrelated panel keypoint, less similar
        "query": pairs["query"][:1],
        "panel": pairs["panel"][:1] + np.float32(60.0),
        "mirrored": np.zeros(1, bool),
        "query_row": np.array([0]),
        "panel_row": np.array([10]),
        "similarity": np.array([0.93]),
    }
    both = {key: np.concatenate([pairs[key], decoy[key]]) for key in pairs}
    assert geometric_inliers(both) == 10


def test_three_pairs_on_one_map_count_and_two_never_do():
    """Two pairs fit any similarity; a third can disagree with it, so three is the fewest that count."""
    assert geometric_inliers(mapped_correspondences(2)) == 0
    assert geometric_inliers(mapped_correspondences(3)) == 3
    assert geometric_inliers(mapped_correspondences(3, outliers=1)) == 3


def test_exactly_the_minimum_of_inliers_passes_the_check_and_one_fewer_does_not():
    passes = agrees_geometrically({"correspondences": mapped_correspondences(MIN_GEOMETRIC_INLIERS)})
    fails = agrees_geometrically({"correspondences": mapped_correspondences(MIN_GEOMETRIC_INLIERS - 1)})
    assert passes and not fails


def test_the_candidate_is_verified_on_its_own_box_of_its_file(tmp_path):
    panel = chart_panel(np.random.default_rng(3))
    height, width = panel.shape[:2]
    beside = texture_panel(np.random.default_rng(6), height)[:, :width]
    write_image(tmp_path / "figure.png", np.concatenate([beside, panel], axis=1))
    boxed = {"path": str(tmp_path / "figure.png"), "box": [beside.shape[1], 0, beside.shape[1] + width, height]}
    assert verify(IdentityMatcher(), panel, boxed, 0.5, query_image=panel).duplicated


class VotingStore:
    """Stands in for an index: each query keypoint's nearest neighbours are given, not searched."""

    def __init__(self, query_points: np.ndarray, neighbours: list[list[tuple[int, int]]], panel_points: dict) -> None:
        local = LocalSift()
        self.points = query_points.astype(np.float32)
        self.neighbours = neighbours  # per query keypoint: (panel id, keypoint row in that panel)
        self.rows = {
            pid: {"path": f"panel{pid}", "box": [0, 0, 256, 256], "source_id": "", "points": local.pack_points(p)}
            for pid, p in panel_points.items()
        }
        self.descriptor = SimpleNamespace(
            aggregate="votes",
            unpack_points=local.unpack_points,
            working_size=local.working_size,
            query_located=lambda image: (
                np.ones((len(self.points), 4), np.float32),
                self.points,
                np.zeros(len(self.points), bool),
            ),
        )

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = np.full((len(vectors), k), -1)
        slots = np.full((len(vectors), k), -1)
        for row, found in enumerate(self.neighbours):
            for column, (pid, slot) in enumerate(found[:k]):
                ids[row, column], slots[row, column] = pid, slot
        return np.where(ids >= 0, 0.99, 0.0).astype(np.float32), ids, slots

    def panels(self, ids) -> dict:
        return {pid: dict(self.rows[pid]) for pid in ids}


def test_retrieval_ranks_keypoints_in_place_above_more_keypoints_scattered():
    """A generated texture shares many generic keypoints with other textures; a copy fewer, on one map."""
    mapped = mapped_correspondences(5)
    rng = np.random.default_rng(1)
    query = np.concatenate([mapped["query"], rng.uniform(20, 236, (9, 2))])
    neighbours = [[(1, row)] for row in range(5)] + [[(2, row)] for row in range(9)]
    panel_points = {1: mapped["panel"], 2: rng.uniform(0, 255, (9, 2))}
    store = VotingStore(query, neighbours, panel_points)
    query_image = np.zeros((8, 8, 3), np.uint8)
    ranked = [(row["path"], votes) for row, votes in retrieve(store, query_image, top_k=2, exclude_same="none")]
    assert ranked == [("panel1", 5.0), ("panel2", 9.0)]  # the similarity reported stays the vote count
    # the panel with fewer votes is ranked again from beyond the top K
    assert [row["path"] for row, _ in retrieve(store, query_image, top_k=1, exclude_same="none")] == ["panel1"]


def test_only_the_best_candidate_reaches_the_pair_detector_with_fewer_than_the_minimum_inliers(tmp_path):
    write_image(tmp_path / "few.png", texture_panel(np.random.default_rng(0), 32))
    few = {
        "correspondences": mapped_correspondences(MIN_BEST_INLIERS + 1, outliers=1),
        "path": str(tmp_path / "few.png"),
        "box": [0, 0, 8, 8],
    }
    assert MIN_BEST_INLIERS + 1 < MIN_GEOMETRIC_INLIERS and not agrees_geometrically(few)
    assert agrees_geometrically(few, best=True)
    assert not agrees_geometrically({"correspondences": mapped_correspondences(2)}, best=True)  # fits any map
    detector = RecordingDetector()
    first = verify_candidates(detector, np.zeros((8, 8, 3), np.uint8), [(few, 3.0), ({**few}, 3.0)], 0.5)
    assert [c is few for c, _, _ in first] == [True] and len(detector.asked) == 1
