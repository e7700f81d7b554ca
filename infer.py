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
from inference.runtime import ModelLoadError, load_runtime
from inference.scoring import join_truth, score_perturbed_fn, score_records
from inference.tiling import TiledLocalizer, TiledRuntime
from inference.writer import COLUMNS, ResultWriter

log = logging.getLogger("infer")


class InferenceFailed(Exception):
    """Nothing could be scored, or the model / input is unusable: exit non-zero with this message."""


def infer(cfg: DictConfig) -> dict[str, Any]:
    output = Path(cfg.output)
    try:
        runtime = load_runtime(cfg.model, cfg.device, tta=bool(cfg.get("tta", False)))
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
    masks_dir = overlays_dir = None
    columns = list(COLUMNS)
    wants_maps = cfg.save_masks or cfg.overlays or records_with_masks(records)
    if wants_maps and not runtime.is_localizer:
        if cfg.save_masks or cfg.overlays:
            log.warning("save_masks/overlays requested, but %s gives no masks (not a localizer)", runtime.name)
    elif wants_maps:
        if not cfg.save_masks:
            log.info("the input has true masks: saving the predicted maps too, for pixel metrics")
        masks_dir = Path(cfg.masks_dir) if cfg.masks_dir else output.with_name(f"{output.stem}_masks")
        overlays_dir = masks_dir / "overlays" if cfg.overlays else None
        columns.append("mask")
    threshold = runtime.threshold if cfg.threshold is None else float(cfg.threshold)
    log.info("%s (%s, threshold %.4f): %d inputs -> %s", runtime.name, Path(cfg.model).suffix, threshold,
             len(records), output)
    try:
        with ResultWriter(output, columns, resume=cfg.resume) as writer:
            counts = score_records(runtime, records, writer, batch_size=cfg.batch_size,
                                   num_workers=cfg.num_workers, threshold=threshold, masks_dir=masks_dir,
                                   progress=cfg.progress, overlays_dir=overlays_dir)
            results = list(writer.done.values())  # rows resumed from the file and rows just scored
    except KeyboardInterrupt:
        raise InferenceFailed(f"interrupted; the rows in {output} are complete: rerun with resume=true") from None
    log.info("scored %(ok)d, unreadable %(error)d, already done %(skipped)d", counts)
    if not any(row["status"] == "ok" for row in results):
        raise InferenceFailed(f"nothing could be scored: all {len(records)} inputs failed (see {output})")
    rows = join_truth(records, results)
    if not rows:
        if cfg.robustness:
            log.warning("robustness=true needs labelled input (a manifest with labels or a 0_real/1_fake tree)")
        return {"counts": counts, "metrics": None}
    robustness = sweep(runtime, rows, cfg) if cfg.robustness else None
    from evaluation import report_records, write_metrics_json  # reports load plotting libraries: only now

    report_dir = output.with_name(f"{output.stem}_report")
    pixel, sheet = (pixel_report(records, results) if masks_dir is not None else None) or (None, None)
    report = report_records(report_dir, rows, threshold=threshold, calibrated_threshold=runtime.threshold,
                            robustness=robustness, title=f"{runtime.name} on {cfg.input}", pixel=pixel,
                            contact_sheet=sheet)
    metrics_path = output.with_suffix(".metrics.json")
    metrics = report.metrics
    if pixel:
        metrics["pixel_protocol"] = PIXEL_PROTOCOL
        with open(report.files["report"], "a", encoding="utf-8") as handle:
            handle.write(f"\nPixel metrics: {PIXEL_PROTOCOL}; computed from the saved 8-bit maps. "
                         "Contact sheet: the worst and best images by pixel F1.\n")
    write_metrics_json(metrics_path, metrics)
    log.info("auroc %s, tpr %s, tnr %s -> %s (report: %s)", metrics["auroc"], metrics["tpr"], metrics["tnr"],
             metrics_path, report.files["report"])
    return {"counts": counts, "metrics": metrics}


def sweep(runtime: Any, rows: list[dict[str, Any]], cfg: DictConfig) -> dict[str, Any]:
    """Metric-vs-strength curves under JPEG, blur and rescaling on (a seeded sample of) the input."""
    from evaluation import robustness_curves

    rng = np.random.default_rng(cfg.seed)
    chosen = [rows[i] for i in sorted(rng.permutation(len(rows))[: cfg.robustness_max_images])]
    log.info("robustness sweep on %d images", len(chosen))
    score = score_perturbed_fn(runtime, [Record(path=row["path"]) for row in chosen], cfg.batch_size,
                               cfg.num_workers)
    return robustness_curves(score, np.asarray([row["label"] for row in chosen]),
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
