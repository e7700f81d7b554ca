"""Collection search measured on planted copies among distractors (docs/collection_index.md):

  OMP_NUM_THREADS=2 PYTHONPATH=. python benchmarks/collection_index.py --distractors 10000 --workers 2 --json out.json

1. A collection on disk: source panels (256 px grid crops of one photo per scene, and textures)
   among distractors (128 px grid crops of the other photos, generated textures, figure panels;
   128-192 px), in folders of 1000 (one source id each).
2. Queries: `--copies-per-source` planted copies of every source (direct reuse, rotate180, hflip,
   vflip, scaling in turn; half cropped to 30-100 % of the panel; 0-2 parameter changes; JPEG 75)
   and as many negatives (fresh textures and figure panels, other tiles of the sources' photos:
   no content in the index).
3. The pair detector's score models are fitted on generated pairs (`pair_splits`, small) cut from
   the photographs no source comes from (the sources' photographs stay unseen by it), and its
   threshold is raised to the highest score of calibration negatives (a separate set of queries
   without a copy in the index, never measured), so that ten candidates per query keep precision.
4. Reported: recall@K after verification (the source among the verified rows of its copy),
   precision of all verified rows, retrieval recall@K (before verification), recall@K after the
   geometric check (the source among the candidates given to the pair detector) and the pair
   detector's calls per query, recall by the pair detector's score alone beside the rows only
   retrieval's map confirmed (`confirmed_by_retrieval`; calibration queries confirmed are rows
   no threshold removes), latency per query
   panel with the index in memory (retrieval, verification, total), build rate (panels/s),
   bytes per panel (FAISS file, SQLite table), and, with `--compare N`, the descriptors on
   the first N distractors (`pairnet`, the learned one, with `--descriptor-checkpoint PATH`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import collection.verification
from collection.build import build_index
from collection.query import open_index, retrieve
from collection.verification import confirmed_by_retrieval, verify_candidates
from datamodules.io import read_image, write_image
from synthesis.collection import COPY_OPERATIONS, distractor, photo_tiles, planted_copy, texture_panel
from synthesis.pair_set import load_photos, scene_of, split_sources

COLLECTION_SETTINGS = ("distractors", "sources", "copies_per_source", "calibration_queries", "seed")


def replace_other_collection(root: Path, made_with: dict) -> None:
    """A --workdir holding the collection and indexes of other settings is emptied of them first: the
    files the new draw does not overwrite (more distractors before) were indexed and searched as
    its own, under the new stamp. One without a stamp is refused, being no run's of this script."""
    stamp = root / "collection_settings.json"
    made = [root / "collection", root / "fitting", root / "compare.csv", *root.glob("index_*")]
    if not any(path.exists() for path in made):
        return
    if not stamp.is_file():
        raise SystemExit(f"--workdir {root} holds a collection of unrecorded settings: give an empty or new folder")
    kept = json.loads(stamp.read_text())
    if kept == made_with:
        return
    print(f"{root}: replacing the collection made with {kept} by one made with {made_with}", flush=True)
    for path in made:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    stamp.unlink()


def write_collection(root: Path, args: argparse.Namespace) -> tuple[dict, list, list, list]:
    """Writes sources and distractors under root/collection (with --reuse: draws them only, the
    files are there from a kept run); returns (sources, queries, calibration, the names of the
    photographs no source comes from)."""
    made_with = {key: getattr(args, key) for key in COLLECTION_SETTINGS}
    stamp = root / "collection_settings.json"
    if args.reuse:  # the kept files must be the collection these settings draw, or the figures are another's
        kept = json.loads(stamp.read_text()) if stamp.is_file() else None
        if kept != made_with:
            raise SystemExit(
                f"--reuse: {root} holds a collection made with {kept or 'unrecorded settings'}, not {made_with}"
            )
    else:
        replace_other_collection(root, made_with)
    write = (lambda path, image: None) if args.reuse else write_image
    rng = np.random.default_rng(args.seed)
    photos = load_photos(max_side=1024)
    source_photos, distractor_photos = split_sources(sorted(photos), 0.4, args.seed)
    one_per_scene = {scene_of(n): n for n in source_photos}.values()
    tiles = photo_tiles({n: photos[n] for n in one_per_scene}, 256)
    rng.shuffle(tiles)
    sources = dict(tiles[: args.sources // 2])
    spare_tiles = tiles[args.sources // 2 :]  # other content of the same photos: hard negatives
    while len(sources) < args.sources:
        sources[f"texture{len(sources)}"] = texture_panel(rng, 256)
    files = {}
    for number, (name, panel) in enumerate(sources.items()):
        files[name] = root / "collection" / f"src{number // 50:02d}" / f"source{number:05d}.jpg"
        write(files[name], panel)
    distractors = photo_tiles({n: photos[n] for n in distractor_photos}, 128)[: args.distractors // 10]
    for number in range(args.distractors):
        panel = distractors[number][1] if number < len(distractors) else distractor(rng, int(rng.integers(128, 193)))
        write(root / "collection" / f"d{number // 1000:04d}" / f"panel{number:06d}.jpg", panel)
    queries = []
    for number, (name, panel) in enumerate(sources.items()):
        for copy_number in range(args.copies_per_source):
            geometric = COPY_OPERATIONS[(number + copy_number) % len(COPY_OPERATIONS)]
            copy = planted_copy(panel, rng, geometric, min_area=0.3)
            kind = "texture" if name.startswith("texture") else "photo"
            queries.append(
                {"image": copy.image, "source": str(files[name]), "operations": copy.operations, "kind": kind}
            )
    planted = len(queries)
    negatives = [t for _, t in spare_tiles[: planted // 2]]
    calibrating = args.calibration_queries
    negatives += [distractor(rng, 224, figure_share=0.3) for _ in range(planted + calibrating - len(negatives))]
    queries += [{"image": image, "source": None} for image in negatives[:planted]]
    calibration = [{"image": image, "source": None} for image in negatives[planted:]]
    for name in distractor_photos:  # lossless copies for fitting the pair detector
        write_image(root / "fitting" / f"{Path(name).stem}.png", photos[name])
    if not args.reuse:
        stamp.write_text(json.dumps(made_with))
    return files, queries, calibration, distractor_photos


def fitted_detector(args: argparse.Namespace, photos_folder: Path):
    """The pair detector as `train.py detector=dup_sift data.photos=FOLDER` fits it (at the
    benchmark's working size): score models on pairs cut from the photographs of `photos_folder`
    (none of them a source's), threshold at 1 % false positives there."""
    from omegaconf import OmegaConf

    from detectors.duplication import PairDuplicationDetector
    from detectors.training_free import fit_pair_detector
    from synthesis.pair_set import pair_splits

    recipe = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "configs/data/duplication_pairs.yaml"))
    for key in ("_target_", "photos", "held_out", "seed"):
        recipe.pop(key)
    # train.py detector=dup_sift's pairs, from these photographs: one scene is left out (unused),
    # every other one fits the score models or calibrates the threshold
    splits = pair_splits(str(photos_folder), held_out=0.01, seed=0, splits=("train", "val"), **recipe)
    detector = PairDuplicationDetector(max_side=args.max_side)
    fitted = fit_pair_detector(detector, splits, target_fpr=0.01)
    return detector, float(fitted["threshold"])


def ask(store, detector, query: dict, top_k: int) -> dict:
    started = time.perf_counter()
    candidates = retrieve(store, query["image"], top_k, exclude_same="none")
    retrieved = time.perf_counter()
    answers = verify_candidates(detector, query["image"], candidates, -np.inf) if detector is not None else []
    confirmed = confirmed_first(query["image"], candidates, answers)
    return {
        "candidates": [c["path"] for c, _ in candidates],
        "checked": [c["path"] for c, _, _ in answers],  # passed the geometric check: asked to the pair detector
        # (path, the pair detector's score, confirmed by retrieval's map): a row where the score reaches
        # the threshold, unless the map does not reproduce the content (`content_mismatch`), or confirmed
        "verified": [(c["path"], found.score, c["path"] == confirmed) for c, _, found in answers if found.duplicated],
        "retrieval_s": retrieved - started,
        "total_s": time.perf_counter() - started,
    }


def confirmed_first(image: np.ndarray, candidates: list, answers: list) -> str | None:
    """The first candidate's path where retrieval's own map confirms it (`confirmed_by_retrieval`).
    `infer.py` tries it when the pair detector refuses that candidate; measured here for every query,
    as the threshold is only set after the calibration queries, it counts as a row whatever the score."""
    if not answers or answers[0][0] is not candidates[0][0] or "retrieval_map" not in candidates[0][0]:
        return None
    first = candidates[0][0]
    x0, y0, x1, y1 = first["box"]
    crop = read_image(first["path"])[y0:y1, x0:x1]
    return first["path"] if confirmed_by_retrieval(image, crop, first["retrieval_map"]) is not None else None


def measure(index_dir: Path, detector, queries: list, calibration: list, model_threshold: float, top_k: int) -> dict:
    store = open_index(index_dir)
    calibrated = [ask(store, detector, q, top_k)["verified"] for q in calibration]
    negatives = [score for verified in calibrated for _, score, confirmed in verified if not confirmed]
    calibration = calibration if detector is not None else []
    threshold = max(model_threshold, max(negatives, default=0.0) + 1e-6)
    answers = [ask(store, detector, q, top_k) for q in queries]
    store.close()
    planted = [(q, a) for q, a in zip(queries, answers) if q["source"]]

    def rows_of(answer: dict, confirming: bool = True) -> list[str]:
        return [p for p, score, confirmed in answer["verified"] if score >= threshold or (confirming and confirmed)]

    rows = [(q, path) for q, a in zip(queries, answers) for path in rows_of(a)]
    correct = sum(path == q["source"] for q, path in rows)
    wrong = [{"query_source": q["source"], "match": path} for q, path in rows if path != q["source"]]
    found = [q["source"] in rows_of(a) if detector is not None else q["source"] in a["candidates"] for q, a in planted]
    missed_operations: dict[str, int] = {}
    for (q, _), hit in zip(planted, found):
        if not hit:
            for op in q["operations"]:
                missed_operations[op] = missed_operations.get(op, 0) + 1
    latency = np.asarray([a["total_s"] for a in answers])
    by_score_alone = [q["source"] in rows_of(a, confirming=False) for q, a in planted]
    return {
        "threshold": {"model": model_threshold, "used": threshold, "calibration_queries": len(calibration)},
        "recall_at_k_verified": float(np.mean(found)) if detector is not None else None,
        "recall_at_k_retrieved": float(np.mean([q["source"] in a["candidates"] for q, a in planted])),
        # photo tiles and generated textures among the sources
        "recall_at_k_retrieved_by_source_kind": by_kind(planted, [q["source"] in a["candidates"] for q, a in planted]),
        "recall_at_k_verified_by_source_kind": by_kind(planted, found) if detector is not None else None,
        "recall_at_k_checked": (
            float(np.mean([q["source"] in a["checked"] for q, a in planted])) if detector is not None else None
        ),
        # without the confirmation by retrieval's map (the pair detector's score alone), and what it adds
        "recall_at_k_by_score_alone": float(np.mean(by_score_alone)) if detector is not None else None,
        "recall_at_k_by_score_alone_by_source_kind": by_kind(planted, by_score_alone) if detector is not None else None,
        "rows_confirmed_by_retrieval_map": sum(
            1 for a in answers for p, score, confirmed in a["verified"] if confirmed and score < threshold
        ),
        # calibration queries (no copy in the index) whose first candidate was confirmed: rows no threshold removes
        "calibration_queries_confirmed": sum(any(confirmed for *_, confirmed in v) for v in calibrated),
        "pair_detector_calls_per_query": (
            float(np.mean([len(a["checked"]) for a in answers])) if detector is not None else None
        ),
        "precision_verified": correct / max(1, len(rows)) if detector is not None else None,
        "verified_rows": len(rows),
        "wrong_rows": wrong,
        "planted": len(planted),
        "negative_queries": len(queries) - len(planted),
        "missed_by_operation": missed_operations,  # after verification (retrieval with --retrieval-only)
        "latency_s_per_panel": {
            "retrieval_mean": float(np.mean([a["retrieval_s"] for a in answers])),
            "total_mean": float(latency.mean()),
            "total_p95": float(np.quantile(latency, 0.95)),
        },
    }


def by_kind(planted: list, hits: list) -> dict[str, float]:
    """The share of hits among the planted queries of each kind of source."""
    kinds = [q["kind"] for q, _ in planted]
    return {kind: float(np.mean([hit for k, hit in zip(kinds, hits) if k == kind])) for kind in sorted(set(kinds))}


def reference_seconds(repeats: int = 5) -> float:
    """One SIFT extraction of a 256 px panel on this machine now: the unit latencies are also given in."""
    import cv2

    from synthesis.collection import texture_panel

    gray = cv2.cvtColor(texture_panel(np.random.default_rng(0), 256), cv2.COLOR_RGB2GRAY)
    sift = cv2.SIFT_create(nfeatures=1000)
    started = time.perf_counter()
    for _ in range(repeats):
        sift.detectAndCompute(gray, None)
    return (time.perf_counter() - started) / repeats


def bytes_per_panel(index_dir: Path, panels: int) -> dict:
    faiss_bytes = sum(p.stat().st_size for p in index_dir.glob("vectors-*.faiss"))
    table = (index_dir / "panels.sqlite").stat().st_size
    return {"faiss": faiss_bytes / panels, "sqlite": table / panels, "total": (faiss_bytes + table) / panels}


def run(args: argparse.Namespace) -> dict:
    root = Path(args.workdir or tempfile.mkdtemp(prefix="collection_bench_"))
    try:
        started = time.perf_counter()
        files, queries, calibration, fitting_photos = write_collection(root, args)
        result: dict = {"setup_s": round(time.perf_counter() - started, 1), "args": vars(args)}
        result["pair_detector_photos"] = fitting_photos
        detector, model_threshold = (None, 0.5) if args.retrieval_only else fitted_detector(args, root / "fitting")
        names = tuple(args.descriptors.split(",")) if args.compare else (args.descriptor,)
        source: Path = root / "collection"
        if args.compare:  # the sources and the first N distractors, as a manifest
            paths = sorted(source.rglob("*.jpg"))
            keep = [p for p in paths if p.parent.name.startswith("src")]
            keep += [p for p in paths if not p.parent.name.startswith("src")][: args.compare]
            source = root / "compare.csv"
            source.write_text("path,review\n" + "".join(f"{p},{p.parent.name}\n" for p in keep))
        for name in names:
            index_dir = root / f"index_{name}"
            built = build_index(
                source,
                index_dir,
                name,
                index_type=args.index_type,
                commit_every=1000,
                workers=args.workers,
                checkpoint=args.descriptor_checkpoint,
            )
            panels = built["total_panels"]
            entry = {
                "descriptor": json.loads((index_dir / "meta.json").read_text())["descriptor"],
                "panels": panels,
                "index_type": built["index_type"],
                "build_panels_per_s": panels / built["seconds"] if built["panels"] == panels else None,
                "bytes_per_panel": bytes_per_panel(index_dir, panels),
                **measure(index_dir, detector, queries, calibration, model_threshold, args.top_k),
            }
            reference = reference_seconds()
            entry["machine"] = {
                "load_average_1min": os.getloadavg()[0],
                "cpus": os.cpu_count(),
                "sift_256px_s": reference,
            }
            entry["latency_in_sift_extractions"] = entry["latency_s_per_panel"]["total_mean"] / reference
            result[name if args.compare else f"{name}@{panels}"] = entry
            print(json.dumps({name: entry}, indent=1), flush=True)
        return result
    finally:
        if not args.keep and not args.workdir:  # only a folder this run made for itself: never the user's
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--distractors", type=int, default=10_000)
    parser.add_argument("--sources", type=int, default=100)
    parser.add_argument("--copies-per-source", type=int, default=3, help="planted copies of each source")
    parser.add_argument(
        "--calibration-queries", type=int, default=300, help="queries without a copy that set the threshold"
    )
    parser.add_argument("--descriptor", default="local_sift")
    parser.add_argument("--compare", type=int, default=0, help="compare the descriptors on N distractors")
    parser.add_argument("--descriptors", default="local_sift,pooled_sift,phash,cnn", help="with --compare")
    parser.add_argument(
        "--descriptor-checkpoint", default=None, help="pairnet: a trained pairnet checkpoint (its encoder embeds)"
    )
    parser.add_argument("--retrieval-only", action="store_true", help="no verification: retrieval recall only")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--index-type", default="auto", help="auto | flat | ivf | ivf_pq")
    parser.add_argument("--max-side", type=int, default=256, help="the pair detector's working size")
    parser.add_argument("--workers", type=int, default=1, help="processes describing panels during the build")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workdir", default=None, help="where the collection and index go (kept); default: a temporary folder"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder too")
    parser.add_argument("--reuse", action="store_true", help="measure again on a --keep run's --workdir (no build)")
    parser.add_argument("--check-inliers", type=int, default=None, help="the geometric check's minimum (0: off)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.reuse and not args.workdir:
        parser.error("--reuse measures again on the --workdir of an earlier run: give it")
    if args.check_inliers is not None:
        collection.verification.MIN_GEOMETRIC_INLIERS = args.check_inliers
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
