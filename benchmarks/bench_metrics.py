"""Benchmark evaluation metrics against scikit-learn on the same data (a script, not a test).

    python -m benchmarks.bench_metrics [--n-scores 10000000] [--n-masks 1000] [--size 512]

Reports wall time of ``image_metrics`` on N scores and of ``pixel_metrics`` (streamed) on M masks,
each next to scikit-learn computing the same numbers, the speed ratio, and the largest absolute
difference between the two results (so a fast but wrong implementation cannot look good).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from sklearn import metrics as skm

from evaluation import PixelMetricAccumulator, image_metrics

LEVELS = (0.001, 0.01, 0.05, 0.1)


def sklearn_image_metrics(y: np.ndarray, s: np.ndarray, threshold: float = 0.5) -> dict:
    fpr, tpr, _ = skm.roc_curve(y, s)
    pred = s >= threshold
    out = {
        "auroc": skm.roc_auc_score(y, s),
        "pauroc@0.1": skm.roc_auc_score(y, s, max_fpr=0.1),
        "ap": skm.average_precision_score(y, s),
        "balanced_accuracy": skm.balanced_accuracy_score(y, pred),
        "f1": skm.f1_score(y, pred),
    }
    for k in LEVELS:
        out[f"tpr@fpr={k:g}"] = float(tpr[fpr <= k].max())
    return out


def bench_image(n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.3
    s = rng.normal(0.0, 1.0, n) + 1.2 * y
    t0 = time.perf_counter()
    ours = image_metrics(y, s, threshold=0.5)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = sklearn_image_metrics(y, s, threshold=0.5)
    t_ref = time.perf_counter() - t0
    diff = max(abs(ours[k] - ref[k]) for k in ref)
    return {"n": n, "ours_s": t_ours, "sklearn_s": t_ref, "speedup": t_ref / t_ours, "max_abs_diff": diff}


def make_pair(i: int, size: int, seed: int) -> tuple[np.ndarray | None, np.ndarray]:
    """One synthetic (mask, probability map); every fifth image is genuine (no mask)."""
    rng = np.random.default_rng((seed, i))
    probs = rng.random((size, size), dtype=np.float32) * 0.6
    if i % 5 == 0:
        return None, probs
    yy, xx = np.ogrid[:size, :size]
    cy, cx = rng.integers(size // 4, 3 * size // 4, 2)
    ry, rx = rng.integers(size // 16, size // 4, 2)
    mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
    probs += 0.4 * mask.astype(np.float32)
    return mask, probs


def bench_pixel(n: int, size: int, seed: int = 0, batch: int = 50) -> dict:
    acc = PixelMetricAccumulator(threshold=0.5)
    t_ours = t_ref = 0.0
    ref_partial = []
    for start in range(0, n, batch):
        pairs = [make_pair(i, size, seed) for i in range(start, min(n, start + batch))]
        t0 = time.perf_counter()
        acc.update([m for m, _ in pairs], [p for _, p in pairs])
        t_ours += time.perf_counter() - t0
        t0 = time.perf_counter()
        ref_partial.append(_sklearn_partial(pairs))
        t_ref += time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = acc.compute()
    t_ours += time.perf_counter() - t0
    ref = _combine(ref_partial)
    diff = max(abs(ours[k] - ref[k]) for k in ref)
    return {
        "n": n,
        "size": size,
        "ours_s": t_ours,
        "sklearn_s": t_ref,
        "speedup": t_ref / t_ours,
        "max_abs_diff": float(diff),
    }


def _sklearn_partial(pairs, threshold: float = 0.5) -> dict:
    """Per-batch scikit-learn results kept as sums so batches combine exactly."""
    out = {"f1": [], "iou": [], "auc": [], "best": [], "fpr_g": [], "tp": 0, "fp": 0, "fn": 0}
    for mask, probs in pairs:
        s = probs.ravel()
        pred = s >= threshold
        if mask is None:
            out["fpr_g"].append(pred.mean())
            continue
        y = mask.ravel()
        out["f1"].append(skm.f1_score(y, pred))
        out["iou"].append(skm.jaccard_score(y, pred))
        out["auc"].append(skm.roc_auc_score(y, s))
        p, r, _ = skm.precision_recall_curve(y, s)
        out["best"].append(np.max(np.where(p + r > 0, 2 * p * r / np.maximum(p + r, 1e-12), 0)))
        (_, fp_i), (fn_i, tp_i) = skm.confusion_matrix(y, pred, labels=[False, True])
        out["tp"] += tp_i
        out["fp"] += fp_i
        out["fn"] += fn_i
    return out


def _combine(parts: list[dict]) -> dict:
    cat = lambda k: np.concatenate([np.asarray(p[k], dtype=float) for p in parts])  # noqa: E731
    tp, fp, fn = (sum(p[k] for p in parts) for k in ("tp", "fp", "fn"))
    return {
        "pixel_f1": cat("f1").mean(),
        "pixel_iou": cat("iou").mean(),
        "pixel_auroc": cat("auc").mean(),
        "pixel_f1_best": cat("best").mean(),
        "pixel_f1_pooled": 2 * tp / (2 * tp + fp + fn),
        "pixel_iou_pooled": tp / (tp + fp + fn),
        "pixel_fpr_genuine": cat("fpr_g").mean(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-scores", type=int, default=10_000_000)
    parser.add_argument("--n-masks", type=int, default=1000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = {"image_metrics": bench_image(args.n_scores)}
    print(
        f"image_metrics  {args.n_scores:>11,d} scores : ours {results['image_metrics']['ours_s']:7.2f} s"
        f" | sklearn {results['image_metrics']['sklearn_s']:7.2f} s"
        f" | speed-up x{results['image_metrics']['speedup']:.1f}"
        f" | max |diff| {results['image_metrics']['max_abs_diff']:.1e}",
        flush=True,
    )
    results["pixel_metrics"] = bench_pixel(args.n_masks, args.size)
    r = results["pixel_metrics"]
    print(
        f"pixel_metrics  {args.n_masks:>5d} x {args.size}x{args.size} : ours {r['ours_s']:7.2f} s"
        f" | sklearn {r['sklearn_s']:7.2f} s | speed-up x{r['speedup']:.1f}"
        f" | max |diff| {r['max_abs_diff']:.1e}",
        flush=True,
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
