"""Asking an index about new panels: retrieve candidates, verify each with the pair detector.

`retrieve` ranks the indexed panels for one query panel: with `local_sift` each query keypoint
(and its mirror) votes for the panels holding one of its nearest neighbours at cosine similarity
>= `VOTE_SIMILARITY`, and the `RERANK` panels with most votes are ranked again by how many of
those keypoint pairs one similarity map carries (`geometric_inliers`): a generated texture shares
many generic keypoints with other textures, a copy fewer but in place. With the regional
descriptors a panel scores its best region similarity over the query's regions and variants.
`exclude_same`: `path` drops the query's own file, `review` every panel of the query's source id
(its review / paper, or folder), `none` nothing.

`infer_index` (`infer.py model=<dup_sift ckpt> input=... index=DIR top_k=K`) verifies the top K
with the pair detector (`match_pair`: SIFT, mirror, RANSAC, photometric fit) and writes one row per
verified match: `path` (query), `query_box`, `match`, `match_box`, `source_id`, `similarity`
(retrieval), `score`, `operations`, `geometric`, `transform`, `method` (`retrieval_map` where
retrieval's own map confirmed a first candidate the pair detector refused: `score` stays the
pair detector's), `status`, `error`, and
`mask_a` / `mask_b` with `save_masks=true`. A query with no verified match has one row with an
empty `match`; an unreadable query one error row.
"""

from __future__ import annotations

import json
import logging
import numbers
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from collection.build import file_panels, file_stamp, source_ids
from collection.descriptors import make_descriptor, query_vectors
from collection.search_stamp import search_stamp, stamp_search
from collection.store import PanelStore, faiss_module, on_search_device
from collection.verification import retrieval_fit, verify_candidates
from datamodules.io import ImageReadError, read_image
from detectors.pair_matching import to_original
from inference.masks import write_pair_masks
from inference.run_report import image_run_options, without_own_outputs
from inference.writer import ResultWriter

log = logging.getLogger(__name__)

VOTE_SIMILARITY = 0.92  # a keypoint and its copy (JPEG 75, colours changed) stay above; others rarely
MIN_VOTES = 2  # a single keypoint in common is chance
RERANK = 50  # candidates ranked again by their geometric inliers (about 0.1 ms each)
NEIGHBOURS = 10
EXCLUDE = ("none", "path", "review")
INDEX_COLUMNS = (
    "path",
    "query_box",
    "match",
    "match_box",
    "source_id",
    "similarity",
    "score",
    "operations",
    "geometric",
    "transform",
    "method",
    "status",
    "error",
)


def descriptor_of(index_dir: str | Path) -> str:
    """The short descriptor name an index was built with (its meta.json)."""
    meta = Path(index_dir) / "meta.json"
    if not meta.is_file():
        from collection.store import IndexRefused

        raise IndexRefused(f"{index_dir} holds no index (no meta.json): build it with index.py first")
    from collection.store import read_meta

    return read_meta(meta)["descriptor"].split("-")[0]


def open_index(
    index_dir: str | Path,
    descriptor: str | None = None,
    gpu: str | bool = "auto",
    checkpoint: str | None = None,
    nprobe: int | None = None,
) -> PanelStore:
    """The index for querying (on the GPU with `gpu`, see `on_search_device`); a `descriptor` other
    than the stored one is refused by the store. `checkpoint`: a learned descriptor's weights
    (`pairnet`), by default those recorded in the index (refused when that file has changed).
    `nprobe`: inverted lists scanned per query vector (IVF indexes; default `NPROBE`), more for
    recall, fewer for speed."""
    faiss_module()
    name = descriptor or descriptor_of(index_dir)
    store = PanelStore(index_dir, make_descriptor(name, index_dir, checkpoint))
    if nprobe is not None:
        if isinstance(nprobe, bool) or not isinstance(nprobe, numbers.Integral) or nprobe < 1:
            raise ValueError(f"index_nprobe must be a whole number of at least 1, got {nprobe!r}")
        if hasattr(store.index, "nprobe"):
            store.index.nprobe = int(nprobe)
    store.index, store.on_gpu = on_search_device(store.index, gpu)
    return store


def retrieve(
    store: PanelStore, image: np.ndarray, top_k: int, source_id: str = "", path: str = "", exclude_same: str = "path"
) -> list[tuple[dict[str, Any], float]]:
    """The `top_k` indexed panels most like `image` as (panel row, similarity), best first. With
    `local_sift` a row also holds its `correspondences` with the query, the `geometric_inliers` one
    map carries (for `agrees_geometrically`) and that map, `retrieval_map` (query -> panel pixels)."""
    if exclude_same not in EXCLUDE:
        raise ValueError(f"exclude_same must be one of {', '.join(EXCLUDE)}, got {exclude_same!r}")
    votes = store.descriptor.aggregate == "votes"
    if hasattr(store.descriptor, "query_located"):
        vectors, points, mirrored = store.descriptor.query_located(image)
    else:
        vectors, points, mirrored = query_vectors(store.descriptor, image), None, None
    if not len(vectors):
        return []
    if points is not None:
        query_factor, (_, query_width) = store.descriptor.working_size(image.shape)
    sims, ids, slots = store.search(vectors, NEIGHBOURS if votes else 4 * top_k + 40)
    scores, pairs = keypoint_votes(sims, ids, slots) if votes else (best_similarity(sims, ids), {})
    ranked = sorted(scores.items(), key=lambda item: -item[1])
    wanted = max(top_k, RERANK) if points is not None else top_k
    kept: list[tuple[dict[str, Any], float]] = []
    inliers: list[int] = []  # of each kept candidate, with positions
    for start in range(0, len(ranked), 4 * top_k):
        if len(kept) == wanted:
            break
        chunk = ranked[start : start + 4 * top_k]
        rows = store.panels(pid for pid, _ in chunk)
        for pid, score in chunk:
            row = rows.get(pid)
            if row is None or (exclude_same != "none" and row["path"] == path):
                continue
            if exclude_same == "review" and source_id and row["source_id"] == source_id:
                continue
            if points is not None and row.get("points"):
                query_rows, panel_rows, similarity = np.asarray(pairs[pid]).T
                query_rows, panel_rows = query_rows.astype(np.int64), panel_rows.astype(np.int64)
                row["correspondences"] = {
                    "query": points[query_rows],
                    "mirrored": mirrored[query_rows],
                    "panel": store.descriptor.unpack_points(row["points"])[panel_rows],
                    "query_row": query_rows,
                    "panel_row": panel_rows,
                    "similarity": similarity,
                }
            if "correspondences" in row:
                row["geometric_inliers"], working_map = retrieval_fit(row["correspondences"], query_width)
                if working_map is not None:
                    x0, y0, x1, y1 = row["box"]
                    panel_factor, _ = store.descriptor.working_size((y1 - y0, x1 - x0))
                    row["retrieval_map"] = to_original(working_map, query_factor, panel_factor)
            inliers.append(row.get("geometric_inliers", 0))
            kept.append((row, float(score)))
            if len(kept) == wanted:
                break
    if points is not None:  # the most consistent first; votes break ties (the sort is stable)
        kept = [kept[i] for i in sorted(range(len(kept)), key=lambda i: -inliers[i])]
    return kept[:top_k]


def keypoint_votes(
    sims: np.ndarray, ids: np.ndarray, slots: np.ndarray
) -> tuple[dict[int, float], dict[int, list[tuple[int, int, float]]]]:
    """(panel -> votes: the query keypoints with a neighbour in it at `VOTE_SIMILARITY`, at least
    `MIN_VOTES`; panel -> its keypoint pairs as (query row, panel row, similarity))."""
    pairs: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
    for row, (row_sims, row_ids, row_slots) in enumerate(zip(sims, ids, slots)):
        near = (row_sims >= VOTE_SIMILARITY) & (row_ids >= 0)
        for pid, slot, sim in zip(row_ids[near].tolist(), row_slots[near].tolist(), row_sims[near].tolist()):
            pairs[pid].append((row, slot, sim))
    votes_of = {pid: len({row for row, _, _ in found}) for pid, found in pairs.items()}
    return {pid: float(count) for pid, count in votes_of.items() if count >= MIN_VOTES}, pairs


def best_similarity(sims: np.ndarray, ids: np.ndarray) -> dict[int, float]:
    """Panel -> its best similarity over the query's vectors (the regional descriptors)."""
    scores: dict[int, float] = {}
    for pid, sim in zip(ids.ravel().tolist(), sims.ravel().tolist()):
        if pid >= 0 and sim > scores.get(pid, -2.0):
            scores[pid] = sim
    return scores


def query_panel_rows(
    store: PanelStore, detector: Any, panel: np.ndarray, query: dict[str, Any], cfg: Any, masks_dir: Path | None
) -> list[dict[str, Any]]:
    threshold = query["threshold"]
    base = {"path": query["path"], "query_box": json.dumps(query["box"]), "status": "ok", "error": ""}
    top_k = min(int(cfg.top_k), max(1, store.n_panels))  # more neighbours than panels find nothing more
    candidates = retrieve(store, panel, top_k, query["source_id"], query["path"], str(cfg.get("exclude_same", "path")))
    rows, unreadable = [], []

    def changed(path: str) -> bool:  # a file gone is said by its read error
        indexed, now = store.indexed_stamp(path), file_stamp(path)
        return indexed is not None and now[0] >= 0 and indexed != now

    for candidate, similarity, found in verify_candidates(detector, panel, candidates, threshold, unreadable, changed):
        if not found.duplicated:
            continue
        row = {
            **base,
            "match": candidate["path"],
            "match_box": json.dumps(candidate["box"]),
            "source_id": candidate["source_id"],
            "similarity": round(similarity, 4),
            "score": round(found.score, 4),
            "operations": ";".join(found.operations),
            "geometric": ";".join(found.geometric),
            "transform": json.dumps(found.transform) if found.transform else "",
            "method": found.method,
        }
        if masks_dir is not None:  # keyed by query panel and match: several panels of one file never share one
            key = f"{base['path']}|{base['query_box']}|{row['match']}|{row['match_box']}"
            row.update(write_pair_masks(masks_dir, key, (row["path"], row["match"]), (found.mask_a, found.mask_b)))
        rows.append(row)
    # a candidate found but not verifiable (its file moved or deleted since it was indexed) is said
    rows += [
        {
            **base,
            "match": c["path"],
            "match_box": json.dumps(c["box"]),
            "status": "error",
            "error": f"not verified: {w}",
        }
        for c, w in unreadable
    ]
    return rows or [{**base, "match": ""}]


def search_options(cfg: Any) -> dict[str, Any]:
    """`open_index`'s options from infer.py's configuration."""
    return {
        "descriptor": cfg.get("descriptor"),
        "gpu": cfg.get("index_gpu", "auto"),
        "checkpoint": cfg.get("descriptor_checkpoint"),
        "nprobe": cfg.get("index_nprobe"),
    }


def check_search_options(cfg: Any) -> None:
    """top_k and exclude_same, refused by name before the index or the output is opened; so are the
    options of image runs a search does not take (a resume would have replaced the earlier rows)."""
    searches_take_none = ("resume", "shard", "merge", "devices", "report=html", "tiles", "robustness", "overlays")
    if asked := image_run_options(cfg, searches_take_none):
        raise ValueError(
            f"an index search runs in one process and writes its output anew, without pages, tiles, "
            f"perturbations or overlays: leave out {', '.join(asked)} (a new search: a new output)"
        )
    top_k = cfg.top_k
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a whole number of at least 1, got {top_k!r}")
    if cfg.get("exclude_same", "path") not in EXCLUDE:
        raise ValueError(f"exclude_same must be one of {', '.join(EXCLUDE)}, got {cfg.get('exclude_same')!r}")


def warn_other_split(store: PanelStore, split_panels: bool) -> None:
    """A search whose queries are split into panels otherwise than the index was built is said."""
    built, asked = store.state("split_panels"), str(split_panels).lower()
    if built is not None and built != asked:
        log.warning(
            "the index was built with split_panels=%s and the queries are read with split_panels=%s: "
            "a panel of a figure is best found when both are split alike",
            built,
            asked,
        )


def infer_index(cfg: Any, runtime: Any) -> dict[str, Any]:
    """infer.py with `index=DIR`: each input panel searched in the index and its candidates verified;
    the output's run.json names the detector, the index and the search settings (`search_stamp`)."""
    detector = runtime.net
    if not getattr(detector, "is_pair_detector", False):
        raise ValueError(
            f"index= verifies candidates with a pair detector: give model= a dup_sift checkpoint, not {runtime.name}"
        )
    check_search_options(cfg)
    store = open_index(cfg.index, **search_options(cfg))
    threshold = runtime.threshold if cfg.threshold is None else float(cfg.threshold)
    output = Path(cfg.output)
    stamp_search(output, search_stamp(cfg, store, threshold))
    masks_dir = None
    if cfg.save_masks:
        masks_dir = Path(cfg.masks_dir) if cfg.masks_dir else output.with_name(f"{output.stem}_masks")
        masks_dir.mkdir(parents=True, exist_ok=True)
    columns = list(INDEX_COLUMNS) + (["mask_a", "mask_b"] if masks_dir is not None else [])
    log.info(
        "searching %s (%d panels, %s%s) for %s -> %s",
        cfg.index,
        store.n_panels,
        store.index_type,
        " on GPU" if store.on_gpu else "",
        cfg.input,
        output,
    )
    warn_other_split(store, bool(cfg.get("split_panels", False)))
    started = time.perf_counter()
    with ResultWriter(output, columns) as writer:
        counts = search_queries(cfg, store, detector, writer, threshold, masks_dir)
    counts["seconds_per_panel"] = (time.perf_counter() - started) / max(1, counts["panels"])
    store.close()
    log.info("panels searched %(panels)d, verified matches %(matches)d, unreadable %(errors)d", counts)
    return {"counts": counts, "metrics": None}


def search_queries(
    cfg: Any, store: PanelStore, detector: Any, writer: ResultWriter, threshold: float, masks_dir: Path | None
) -> dict[str, int]:
    """Every panel of every input file searched and verified into `writer`; the counts."""
    counts = {"queries": 0, "panels": 0, "matches": 0, "errors": 0}
    queries = source_ids(  # a search's own masks inside its input folder are no query
        cfg.input, cfg.get("layout", "auto"), keep=lambda found: without_own_outputs(found, cfg, writer.path)
    )
    for number, (path, source_id) in enumerate(queries):
        counts["queries"] += 1
        try:
            panels = file_panels(read_image(path), bool(cfg.get("split_panels", False)))
        except (ImageReadError, OSError, ValueError) as error:
            writer.write([{"path": path, "status": "error", "error": str(error)}])
            counts["errors"] += 1
            continue
        for box, panel in panels:
            query = {"path": path, "box": list(box), "source_id": source_id, "threshold": threshold}
            rows = query_panel_rows(store, detector, panel, {**query, "number": number}, cfg, masks_dir)
            writer.write(rows)
            counts["panels"] += 1
            for row in rows:
                if row["match"] and row["status"] == "ok":
                    counts["matches"] += 1
                    log.info(
                        "REUSE %s <- %s (%s) score %.3f %s",
                        path,
                        row["match"],
                        row["source_id"],
                        row["score"],
                        row["operations"],
                    )
    return counts
