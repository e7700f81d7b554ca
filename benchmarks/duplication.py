"""Duplication detectors measured on held-out generated data (docs/duplication.md):

  PYTHONPATH=. python benchmarks/duplication.py [--positives-per-photo 8] [--max-side 512] [--json out.json]

1. Pair detector (`PairDuplicationDetector`): score models fitted on the `train` photos' pairs, the
   threshold calibrated to 1 % FPR on the `val` photos' negatives, everything measured on pairs of
   the held-out `test` photos (never used to fit or calibrate): THEMIS set-F1 / EM / SPC, per-
   operation recall, pair TPR at 1 % FPR, pair pixel F1, and flag rates per kind of pair
   (furniture: two different charts / blots / micrographs of one kind).
2. Copy-move (`SelfMatchLocalizer`): forgeries with rotation and scaling made from the test photos
   (`synthesis.copy_move.copy_move(scale=..., rotation=...)`, as `forgery_options.copy_move.*`),
   pixel F1 at 0.5 per forged image, and the genuine panels' image false-positive rate.
3. Speed for 512 px panels on this machine: pairs/s for a fresh pair (both panels described) and
   for all pairs of a group (each panel described once), as ratios to one SIFT extraction of a
   512 px panel measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import time

import cv2
import numpy as np

from detectors.duplication import PairDuplicationDetector, SelfMatchLocalizer
from detectors.training_free import fit_pair_detector
from synthesis.copy_move import copy_move
from synthesis.pair_set import load_photos, pair_splits, random_panel, split_sources

THEMIS_TABLE_12 = {"best MLLM (THEMIS Table 12)": (0.4513, 0.1799, 0.1995)}


def pair_benchmark(args: argparse.Namespace) -> dict:
    splits = pair_splits(
        positives_per_photo=args.positives_per_photo,
        negatives_per_photo=args.negatives_per_photo,
        figure_pairs=args.figure_pairs,
        seed=args.seed,
    )
    detector = PairDuplicationDetector(max_side=args.max_side)
    result = fit_pair_detector(detector, splits, target_fpr=0.01)
    result["sizes"] = {
        name: {"pairs": len(s.pairs), "positives": sum(p.label for p in s.pairs)} for name, s in splits.items()
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


def speed_benchmark(args: argparse.Namespace) -> dict:
    photos = load_photos()
    rng = np.random.default_rng([args.seed, 9])
    names = sorted(photos)
    panels = []
    while len(panels) < args.speed_panels:
        photo = photos[names[int(rng.integers(len(names)))]]
        if min(photo.shape[:2]) >= 256:
            panels.append(cv2.resize(random_panel(photo, rng), (512, 512), interpolation=cv2.INTER_AREA))
    detector = PairDuplicationDetector(max_side=args.max_side)
    detector.score_model.fitted.fill_(True)  # speed only: the coefficients do not change the work done
    detector.parameter_model.fitted.fill_(True)
    sift = cv2.SIFT_create(nfeatures=1000)
    started = time.perf_counter()
    for panel in panels:
        sift.detectAndCompute(cv2.cvtColor(panel, cv2.COLOR_RGB2GRAY), None)
    reference = (time.perf_counter() - started) / len(panels)
    started = time.perf_counter()
    fresh = list(zip(panels[::2], panels[1::2]))
    for a, b in fresh:
        detector.predict_pair(detector.describe(a), detector.describe(b), 0.5)
    fresh_rate = len(fresh) / (time.perf_counter() - started)
    started = time.perf_counter()
    described = [detector.describe(p) for p in panels]
    count = 0
    for i in range(len(described)):
        for j in range(i + 1, len(described)):
            detector.predict_pair(described[i], described[j], 0.5)
            count += 1
    group_rate = count / (time.perf_counter() - started)
    return {
        "panels": len(panels),
        "max_side": args.max_side,
        "sift_seconds_per_panel": reference,
        "fresh_pairs_per_s": fresh_rate,
        "group_pairs_per_s": group_rate,
        "group_pairs": count,
        "fresh_pair_in_sift_extractions": 1 / (fresh_rate * reference),
        "group_pair_in_sift_extractions": 1 / (group_rate * reference),
    }


def markdown(report: dict) -> str:
    """The report's tables (docs/duplication.md). Kept in one piece: one table after another."""
    lines = []
    pairs = report.get("pairs")
    if pairs:
        test = pairs["test"]
        ops = test["operations"]
        lines += ["| method | set-F1 | EM | SPC |", "| --- | --- | --- | --- |"]
        lines += [f"| {name} | {f1:.4f} | {em:.4f} | {spc:.4f} |" for name, (f1, em, spc) in THEMIS_TABLE_12.items()]
        lines += [
            f"| dup_sift (max_side {report['args']['max_side']}), held-out generated pairs (n={ops['n']}) "
            f"| {ops['set_f1']:.4f} | {ops['exact_match']:.4f} | {ops['spc']:.4f} |",
            "",
        ]
        lines += ["| operation | n | recall | precision |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {op} | {v['n']} | {v['recall']:.3f} | {v['precision']:.3f} |" for op, v in test["by_operation"].items()
        ]
        lines += [
            "",
            "| pair figure | value |",
            "| --- | --- |",
            f"| TPR at 1 % FPR (threshold-free, test) | {test['pair_tpr@fpr=0.01']:.4f} |",
            f"| AUROC | {test['pair_auroc']:.4f} |",
            f"| TPR / TNR at the threshold calibrated on val (1 % FPR) | {test['pair_tpr']:.4f} / "
            f"{test['pair_tnr']:.4f} |",
            f"| pair F1 / MCC | {test['pair_f1']:.4f} / {test['pair_mcc']:.4f} |",
            f"| mask pixel F1 / MCC (duplicated pairs) | {test['pixel_f1']:.4f} / {test['pixel_mcc']:.4f} |",
            f"| mask pixel F1 / MCC pooled (all pairs) | {test['pixel_f1_pooled']:.4f} / "
            f"{test['pixel_mcc_pooled']:.4f} |",
            f"| val negatives calibrated on | {pairs['calibration']['n_genuine']} |",
            "",
        ]
        lines += ["| kind of pair | n | flagged |", "| --- | --- | --- |"]
        lines += [
            f"| {kind} ({'duplicated' if v['label'] else 'not duplicated'}) | {v['n']} | "
            f"{v.get('tpr', v.get('fpr')):.3f} |"
            for kind, v in test["by_kind"].items()
        ]
        lines.append("")
    move = report.get("copy_move")
    if move:
        lines += [
            "| copy-move (rotation +-30 deg, scale 0.8-1.25) | value |",
            "| --- | --- |",
            f"| forged images | {move['images']} |",
            f"| pixel F1, target marked | {move['pixel_f1_target']:.4f} |",
            f"| pixel F1, both copies marked | {move['pixel_f1_both_marked']:.4f} |",
            f"| genuine panels flagged (image logit >= 0) | {move['genuine_flagged_at_logit_0']:.3f} |",
            f"| genuine pixel FPR | {move['genuine_pixel_fpr']:.4f} |",
            "",
        ]
    speed = report.get("speed")
    if speed:
        lines += [
            "| speed, 512 px panels | pairs/s | cost in SIFT extractions of one panel |",
            "| --- | --- | --- |",
            f"| fresh pair (both described) | {speed['fresh_pairs_per_s']:.2f} | "
            f"{speed['fresh_pair_in_sift_extractions']:.2f} |",
            f"| all pairs of {speed['panels']} panels (each described once) | {speed['group_pairs_per_s']:.2f} | "
            f"{speed['group_pair_in_sift_extractions']:.2f} |",
            f"| reference: one SIFT extraction | {1 / speed['sift_seconds_per_panel']:.2f} panels/s | 1 |",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positives-per-photo", type=int, default=8)
    parser.add_argument("--negatives-per-photo", type=int, default=16)
    parser.add_argument("--figure-pairs", type=int, default=12)
    parser.add_argument("--max-side", type=int, default=512)
    parser.add_argument("--copy-move", type=int, default=30, help="forged images (0: skip)")
    parser.add_argument("--speed-panels", type=int, default=8, help="512 px panels timed (0: skip)")
    parser.add_argument("--skip-pairs", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cv2.setNumThreads(1)
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
