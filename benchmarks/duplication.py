"""Duplication detectors measured on held-out generated data (docs/duplication.md):

  PYTHONPATH=. python benchmarks/duplication.py [--n-features 500] [--fallback-keypoints 100] [--json out.json]

1. Pair detector (`PairDuplicationDetector`): score models fitted on the `train` photos' pairs, the
   threshold calibrated to 1 % FPR on the `val` photos' negatives (with the hard negatives and
   figure groups: over 299), everything measured on pairs of the held-out `test` photos (never used
   to fit or calibrate): THEMIS set-F1 / EM / SPC, per-operation recall, pair TPR at 1 % FPR, mask
   pixel F1, the FPR at the calibrated threshold with its Clopper-Pearson interval on val and test,
   and flag rates per subset (ordinary, hard, group) and kind of pair. `--similar-per-photo 0
   --crops-per-photo 0 --furniture-pairs 0 --figure-groups 0` gives the ordinary pairs only.
2. Copy-move (`SelfMatchLocalizer`): forgeries with rotation and scaling made from the test photos
   (`synthesis.copy_move.copy_move(scale=..., rotation=...)`, as `forgery_options.copy_move.*`),
   pixel F1 at 0.5 per forged image, and the genuine panels' image false-positive rate.
3. Speed for 512 px panels on this machine (one thread: cv2.setNumThreads(1); run it with
   OMP_NUM_THREADS=1): a group of panels, each described once and every pair matched, with the
   reference settings and the faster ones in alternating rounds, reported as ratios to the
   reference and beside one SIFT extraction measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import cv2
import numpy as np

from benchmarks.duplication_tables import markdown
from detectors.copy_move import SelfMatchLocalizer
from detectors.duplication import PairDuplicationDetector
from detectors.training_free import evaluate_pair_set, fit_pair_detector, match_pair_set
from evaluation.calibration import clopper_pearson
from synthesis.copy_move import copy_move
from synthesis.pair_set import PairSet, load_photos, pair_splits, random_panel, split_sources


def pair_benchmark(args: argparse.Namespace) -> dict:
    splits = pair_splits(
        positives_per_photo=args.positives_per_photo,
        negatives_per_photo=args.negatives_per_photo,
        figure_pairs=args.figure_pairs,
        seed=args.seed,
        similar_per_photo=args.similar_per_photo,
        crops_per_photo=args.crops_per_photo,
        furniture_pairs=args.furniture_pairs,
        figure_groups=args.figure_groups,
    )
    detector = PairDuplicationDetector(
        max_side=args.max_side,
        n_features=args.n_features,
        detect_side=args.detect_side,
        fallback_keypoints=args.fallback_keypoints,
    )
    result = fit_pair_detector(detector, {k: splits[k] for k in ("train", "val")}, target_fpr=0.01)
    test = splits["test"]
    matches = match_pair_set(detector, test)
    result["test"], rows = evaluate_pair_set(detector, test, result["threshold"], matches)
    for subset in ("base", "group"):  # the hard subset has negatives only: its rates are in by_subset_kind
        keep = [i for i, p in enumerate(test.pairs) if p.subset == subset]
        if keep:
            part = PairSet(test.panels, [test.pairs[i] for i in keep])
            result[f"test_{subset}"] = evaluate_pair_set(
                detector, part, result["threshold"], [matches[i] for i in keep]
            )[0]
    flagged: dict[str, list[bool]] = {}
    for pair, row in zip(test.pairs, rows):
        flagged.setdefault(f"{pair.subset}/{pair.kind}/{pair.label}", []).append(row["score"] >= result["threshold"])
    negatives = [row["score"] >= result["threshold"] for row in rows if not row["label"]]
    result["test_fpr"] = {
        "false_positives": int(np.sum(negatives)),
        "negatives": len(negatives),
        "interval": clopper_pearson(int(np.sum(negatives)), len(negatives)),
    }
    result["by_subset_kind"] = {key: {"n": len(v), "flagged": float(np.mean(v))} for key, v in sorted(flagged.items())}
    result["sizes"] = {
        name: {
            "pairs": len(s.pairs),
            "positives": sum(p.label for p in s.pairs),
            "negatives": sum(1 - p.label for p in s.pairs),
            "base_pairs": sum(p.subset == "base" for p in s.pairs),
        }
        for name, s in splits.items()
    }
    return result


def copy_move_benchmark(args: argparse.Namespace) -> dict:
    photos = load_photos()
    _, held_out = split_sources(sorted(photos), 0.3, args.seed)
    rng = np.random.default_rng([args.seed, 7])
    localizer = SelfMatchLocalizer(max_side=args.max_side)
    f1_target, f1_both, flagged_genuine, genuine_pixels, tried = [], [], [], [], 0
    while len(f1_target) < args.copy_move and tried < 20 * args.copy_move:
        tried += 1
        name = held_out[int(rng.integers(len(held_out)))]
        panel = random_panel(photos[name], rng, max_side=512)
        try:
            forged = copy_move(panel, rng, scale=(0.8, 1.25), rotation=(-30.0, 30.0))
        except ValueError:  # no suitable object, or the moved object leaves the frame
            continue
        _, logits, _ = localizer.locate(forged.image)
        truth = forged.mask
        for predicted, scores in ((logits > 0, f1_target), (logits > -2, f1_both)):
            tp = int((predicted & truth).sum())
            scores.append(2 * tp / max(1, int(predicted.sum() + truth.sum())))
        image_logit, genuine_logits, _ = localizer.locate(panel)
        flagged_genuine.append(image_logit >= 0)
        genuine_pixels.append(float((genuine_logits > 0).mean()))
    return {
        "images": len(f1_target),
        "photos": held_out,
        "pixel_f1_target": float(np.mean(f1_target)),
        "pixel_f1_both_marked": float(np.mean(f1_both)),
        "genuine_flagged_at_logit_0": float(np.mean(flagged_genuine)),
        "genuine_pixel_fpr": float(np.mean(genuine_pixels)),
    }


def timed_group(detector: PairDuplicationDetector, panels: list[np.ndarray]) -> dict:
    """Seconds to describe each panel once and to match every pair of the group."""
    started = time.perf_counter()
    described = [detector.describe(p) for p in panels]
    describing = time.perf_counter() - started
    started = time.perf_counter()
    for i in range(len(described)):
        for j in range(i + 1, len(described)):
            detector.predict_pair(described[i], described[j], 0.5)
    return {"describe": describing, "match": time.perf_counter() - started}


def speed_benchmark(args: argparse.Namespace) -> dict:
    """All pairs of a group of 512 px panels with three settings, in alternating rounds so that all
    see the same load: `reference` (keypoints found at the working size, the low-texture search for
    every pair short of inliers, 1000 keypoints), `gated` (the search only below --fallback-keypoints
    keypoints), `gated_capped` (also at most --speed-n-features keypoints per panel: dup_sift's
    settings) and `gated_small` (gated, keypoints found at --speed-detect-side px)."""
    photos = load_photos()
    rng = np.random.default_rng([args.seed, 9])
    names = sorted(photos)
    panels = []
    while len(panels) < args.speed_panels:
        photo = photos[names[int(rng.integers(len(names)))]]
        if min(photo.shape[:2]) >= 256:
            panels.append(cv2.resize(random_panel(photo, rng), (512, 512), interpolation=cv2.INTER_AREA))
    gate = args.fallback_keypoints or 100
    settings = {
        "reference": {"max_side": 512, "n_features": 1000},
        "gated": {"max_side": 512, "n_features": 1000, "fallback_keypoints": gate},
        "gated_capped": {"max_side": 512, "n_features": args.speed_n_features, "fallback_keypoints": gate},
        "gated_small": {
            "max_side": 512,
            "n_features": 1000,
            "fallback_keypoints": gate,
            "detect_side": args.speed_detect_side,
        },
    }
    detectors = {name: PairDuplicationDetector(**kwargs) for name, kwargs in settings.items()}
    for detector in detectors.values():  # speed only: the coefficients do not change the work done
        detector.score_model.fitted.fill_(True)
        detector.parameter_model.fitted.fill_(True)
    sift = cv2.SIFT_create(nfeatures=1000)
    totals = {name: {"describe": 0.0, "match": 0.0} for name in [*settings, "sift"]}
    for _ in range(args.speed_rounds):
        started = time.perf_counter()
        for panel in panels:
            sift.detectAndCompute(cv2.cvtColor(panel, cv2.COLOR_RGB2GRAY), None)
        totals["sift"]["describe"] += time.perf_counter() - started
        for name, detector in detectors.items():
            for key, seconds in timed_group(detector, panels).items():
                totals[name][key] += seconds
    n, pairs = len(panels), len(panels) * (len(panels) - 1) // 2
    sift_seconds = totals["sift"]["describe"] / (n * args.speed_rounds)
    report: dict = {"panels": n, "pairs": pairs, "rounds": args.speed_rounds, "sift_seconds_per_panel": sift_seconds}
    for name in settings:
        describe = totals[name]["describe"] / (n * args.speed_rounds)
        match = totals[name]["match"] / (pairs * args.speed_rounds)
        report[name] = {
            "settings": settings[name],
            "describe_seconds_per_panel": describe,
            "match_seconds_per_pair": match,
            "matching_pairs_per_s": 1 / match,
            "group_pairs_per_s": pairs / (n * describe + pairs * match),
            "fresh_pairs_per_s": 1 / (2 * describe + match),
        }
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positives-per-photo", type=int, default=8)
    parser.add_argument("--negatives-per-photo", type=int, default=16)
    parser.add_argument("--figure-pairs", type=int, default=12)
    parser.add_argument("--max-side", type=int, default=512)
    parser.add_argument("--detect-side", type=int, default=0, help="side keypoints are found at (0: max side)")
    parser.add_argument(
        "--fallback-keypoints", type=int, default=100, help="low-texture search below this many keypoints (0: always)"
    )
    parser.add_argument("--similar-per-photo", type=int, default=6, help="hard negatives: most similar photo")
    parser.add_argument("--crops-per-photo", type=int, default=4, help="hard negatives: more disjoint crops")
    parser.add_argument("--furniture-pairs", type=int, default=16, help="hard negatives per figure kind")
    parser.add_argument("--figure-groups", type=int, default=14, help="figure-like groups of 5 panels per split")
    parser.add_argument("--copy-move", type=int, default=30, help="forged images (0: skip)")
    parser.add_argument("--speed-panels", type=int, default=12, help="512 px panels of the timed group (0: skip)")
    parser.add_argument("--speed-rounds", type=int, default=2, help="alternating rounds of the settings timed")
    parser.add_argument("--n-features", type=int, default=500, help="keypoints kept per panel")
    parser.add_argument("--speed-n-features", type=int, default=500, help="n_features of the gated_capped setting")
    parser.add_argument("--speed-detect-side", type=int, default=256, help="detect_side of the gated_small setting")
    parser.add_argument("--skip-pairs", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    counts = {name: getattr(args, name) for name in ("copy_move", "speed_panels", "figure_groups", "figure_pairs")}
    counts.update({name: getattr(args, name) for name in ("positives_per_photo", "negatives_per_photo")})
    if negative := [f"--{name.replace('_', '-')}" for name, value in counts.items() if value < 0]:
        parser.error(f"{', '.join(negative)}: must be 0 or more")
    if args.speed_panels == 1 or (args.speed_panels and args.speed_rounds < 1):
        parser.error("the timed group needs --speed-panels 2 or more (0: skip) and --speed-rounds 1 or more")
    if args.skip_pairs and not args.copy_move and not args.speed_panels:
        parser.error("nothing to measure: --skip-pairs with --copy-move 0 and --speed-panels 0")
    if args.json and (Path(args.json).is_dir() or not Path(args.json).absolute().parent.is_dir()):
        parser.error(f"--json {args.json}: needs a file in an existing folder")  # found now, not after the run
    cv2.setNumThreads(1)
    args.detect_side, args.fallback_keypoints = args.detect_side or None, args.fallback_keypoints or None
    report: dict = {"args": vars(args)}
    if not args.skip_pairs:
        report["pairs"] = pair_benchmark(args)
    if args.copy_move:
        report["copy_move"] = copy_move_benchmark(args)
    if args.speed_panels:
        report["speed"] = speed_benchmark(args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1, default=float)
    print(markdown(report))


if __name__ == "__main__":
    main()
