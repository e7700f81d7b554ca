"""Score images with a trained detector: `python infer.py model=M.ckpt|M.onnx input=DIR|FILE|MANIFEST output=F.csv`."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig

from datamodules.layouts import records_from_input
from datamodules.records import LayoutError, Record
from evaluation.pixel import PIXEL_PROTOCOL
from inference.masks import pixel_report, records_with_masks
from evaluation.calibration import below_target_sentence
from inference.parts import Shard, merge_parts
from inference.recalibration import CategoryThreshold
from inference.runs import launch, score_to_output
from inference.runtime import ModelLoadError, load_runtime
from inference.scoring import join_truth, score_perturbed_fn
from inference.tiling import TiledLocalizer, TiledRuntime
from inference.writer import COLUMNS, read_results

log = logging.getLogger("infer")


class InferenceFailed(Exception):
    """Nothing could be scored, or the model / input is unusable: exit non-zero with this message."""


def infer(cfg: DictConfig) -> dict[str, Any]:
    """Score (one process, `devices=N` processes or one `shard=i/n`), merge, and report."""
    output = Path(cfg.output)
    try:
        shard = Shard.parse(cfg.shard)
        processes = launch(cfg.devices, cfg.num_nodes, cfg.strategy, cfg.device)
        runtime = load_runtime(cfg.model, processes.device, tta=bool(cfg.get("tta", False)))
        if cfg.tiles and runtime.is_localizer:
            runtime = TiledLocalizer(runtime, tile_size=cfg.tile_size, overlap=cfg.tile_overlap,
                                     batch_size=cfg.batch_size)
        elif cfg.tiles:
            runtime = TiledRuntime(runtime, reduce=cfg.tile_reduce, batch_size=cfg.batch_size)
        records = records_from_input(cfg.input, cfg.get("layout", "auto"))
    except (ModelLoadError, LayoutError, ValueError) as error:
        raise InferenceFailed(str(error)) from None
    if not records:
        raise InferenceFailed(f"no images found in {cfg.input}")
    masks_dir, overlays_dir = map_folders(cfg, runtime, records)
    columns = list(COLUMNS) + (["mask"] if masks_dir is not None else [])
    if cfg.get("save_confidence", False):
        if getattr(runtime, "confidence_maps", None) is None or not runtime.is_localizer:
            log.warning("save_confidence requested, but %s gives no whole-image confidence map", runtime.name)
        else:
            runtime.confidence_maps = True  # written to <masks_dir>/confidence/, named like the masks
            columns.append("confidence")
    threshold = runtime.threshold if cfg.threshold is None else float(cfg.threshold)
    # a model calibrated per category decides each input with its category's threshold
    per_category = CategoryThreshold.for_records(runtime, records) if cfg.threshold is None else None
    log.info("%s (%s, threshold %.4f): %d inputs -> %s", runtime.name, Path(cfg.model).suffix, threshold,
             len(records), output)
    if cfg.merge:
        merged = merge_parts(output, records, columns)
        if merged["missing"]:
            log.warning("%d inputs have no row in %s yet: run their shards (resume=true), then merge again",
                        merged["missing"], output)
        counts = {"ok": 0, "error": 0, "skipped": merged["rows"]}
    else:
        try:
            counts = score_to_output(runtime, records, output, columns, processes, shard, resume=cfg.resume,
                                     batch_size=cfg.batch_size, num_workers=cfg.num_workers, threshold=per_category or threshold,
                                     masks_dir=masks_dir, overlays_dir=overlays_dir,
                                     progress=cfg.progress and processes.is_main)
        except KeyboardInterrupt:
            raise InferenceFailed("interrupted; the rows written are complete: rerun with resume=true") from None
        log.info("scored %(ok)d, unreadable %(error)d, already done %(skipped)d", counts)
        if not processes.is_main or shard.count > 1:
            return {"counts": counts, "metrics": None}  # rank 0 reports; shards report after the merge
    results = read_results(output)
    if not any(row["status"] == "ok" for row in results):
        raise InferenceFailed(f"nothing could be scored: all {len(records)} inputs failed (see {output})")
    return {"counts": counts, **report(cfg, runtime, records, results, threshold, masks_dir)}


def map_folders(cfg: DictConfig, runtime: Any, records: list[Record]) -> tuple[Path | None, Path | None]:
    """Where a localizer's maps (and overlays) go: asked for, or needed for pixel metrics."""
    wants_maps = cfg.save_masks or cfg.overlays or cfg.get("save_confidence", False) or records_with_masks(records)
    if wants_maps and not runtime.is_localizer:
        if cfg.save_masks or cfg.overlays:
            log.warning("save_masks/overlays requested, but %s gives no masks (not a localizer)", runtime.name)
        return None, None
    if not wants_maps:
        return None, None
    if not cfg.save_masks:
        log.info("the input has true masks: saving the predicted maps too, for pixel metrics")
    output = Path(cfg.output)
    masks_dir = Path(cfg.masks_dir) if cfg.masks_dir else output.with_name(f"{output.stem}_masks")
    return masks_dir, (masks_dir / "overlays" if cfg.overlays else None)


def report(cfg: DictConfig, runtime: Any, records: list[Record], results: list[dict[str, Any]], threshold: float,
           masks_dir: Path | None) -> dict[str, Any]:
    """Review verdicts (`group_by`), then metrics and a report when the input carries labels."""
    output = Path(cfg.output)
    reviews = None
    if cfg.group_by:
        from inference.reviews import score_reviews

        reviews = score_reviews(output, records, results, cfg.group_by, cfg.review_aggregation, threshold,
                                cfg.input, title=f"{runtime.name} on {cfg.input}")
        log.info("%d reviews (%s of images grouped by %s) -> %s", reviews["reviews"], cfg.review_aggregation,
                 cfg.group_by, reviews["path"])
    rows = join_truth(records, results)
    if not rows:
        if cfg.robustness:
            log.warning("robustness=true needs labelled input (a manifest with labels or a 0_real/1_fake tree)")
        return {"metrics": None, "reviews": reviews}
    robustness = sweep(runtime, rows, cfg) if cfg.robustness else None
    from evaluation import report_records, write_metrics_json  # reports load plotting libraries: only now

    report_dir = output.with_name(f"{output.stem}_report")
    pixel, sheet = (pixel_report(records, results) if masks_dir is not None else None) or (None, None)
    by_category = (
        (getattr(runtime, "category_thresholds", None) or None) if cfg.threshold is None else None
    )
    target_fpr = getattr(runtime, "target_fpr", None) or 0.01  # exports without it: the toolkit's default
    written = report_records(report_dir, rows, threshold=threshold, calibrated_threshold=runtime.threshold,
                             category_thresholds=by_category, target_tnr=1.0 - target_fpr,
                             robustness=robustness, title=f"{runtime.name} on {cfg.input}", pixel=pixel,
                             contact_sheet=sheet)
    metrics_path = output.with_suffix(".metrics.json")
    metrics = written.metrics
    if pixel:
        metrics["pixel_protocol"] = PIXEL_PROTOCOL
        with open(written.files["report"], "a", encoding="utf-8") as handle:
            handle.write(f"\nPixel metrics: {PIXEL_PROTOCOL}; computed from the saved 8-bit maps. "
                         "Contact sheet: the worst and best images by pixel F1.\n")
    write_metrics_json(metrics_path, metrics)
    log.info("auroc %s, tpr %s, tnr %s -> %s (report: %s)", metrics["auroc"], metrics["tpr"], metrics["tnr"],
             metrics_path, written.files["report"])
    below = below_target_sentence(
        metrics.get("genuine_tnr_below_target") or {}, metrics.get("target_tnr", 0.0)
    )
    if below:
        log.warning("%s", below)
    return {"metrics": metrics, "reviews": reviews}


def sweep(runtime: Any, rows: list[dict[str, Any]], cfg: DictConfig) -> dict[str, Any]:
    """Metric-vs-strength curves under JPEG, blur and rescaling on (a seeded sample of) the input;
    a localizer on input with true masks gets pixel curves too (maps compared at the original size)."""
    from evaluation import robustness_curves
    from evaluation.robustness import DEFAULT_LEVELS

    rng = np.random.default_rng(cfg.seed)
    chosen = [rows[i] for i in sorted(rng.permutation(len(rows))[: cfg.robustness_max_images])]
    records = [Record(path=row["path"], label=int(row["label"]), mask=row.get("mask") or None) for row in chosen]
    names = list(cfg.get("robustness_perturbations") or DEFAULT_LEVELS)
    unknown = sorted(set(names) - set(DEFAULT_LEVELS))
    if unknown:
        raise InferenceFailed(f"unknown robustness_perturbations {unknown}; known: {sorted(DEFAULT_LEVELS)}")
    log.info("robustness sweep (%s) on %d images", ", ".join(names), len(chosen))
    if runtime.is_localizer and records_with_masks(records):
        from inference.perturbed_maps import score_perturbed_maps_fn

        score = score_perturbed_maps_fn(runtime, records, cfg.batch_size, cfg.num_workers)
    else:
        score = score_perturbed_fn(runtime, records, cfg.batch_size, cfg.num_workers)
    return robustness_curves(score, np.asarray([row["label"] for row in chosen]),
                             levels={name: DEFAULT_LEVELS[name] for name in names},
                             threshold=float(cfg.threshold if cfg.threshold is not None else runtime.threshold))


@hydra.main(version_base="1.3", config_path="configs", config_name="infer")
def main(cfg: DictConfig) -> None:
    try:
        infer(cfg)
    except InferenceFailed as error:
        log.error("%s", error)
        sys.exit(1)


if __name__ == "__main__":
    main()
