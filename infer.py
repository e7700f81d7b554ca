"""Score images with a trained detector: `python infer.py model=M.ckpt|M.onnx input=DIR|FILE|MANIFEST output=F.csv`."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from datamodules.records import LayoutError, records_from_input
from detectors.runtime import ModelLoadError, load_runtime
from detectors.scoring import COLUMNS, ResultWriter, labelled_metrics, read_results, score_records
from evaluation import write_metrics_json

log = logging.getLogger("infer")


class InferenceFailed(Exception):
    """Nothing could be scored, or the model / input is unusable: exit non-zero with this message."""


def infer(cfg: DictConfig) -> dict[str, Any]:
    output = Path(cfg.output)
    try:
        runtime = load_runtime(cfg.model, cfg.device)
        records = records_from_input(cfg.input)
    except (ModelLoadError, LayoutError, ValueError) as error:
        raise InferenceFailed(str(error)) from None
    if not records:
        raise InferenceFailed(f"no images found in {cfg.input}")
    masks_dir = None
    columns = list(COLUMNS)
    if cfg.save_masks:
        if not runtime.is_localizer:
            log.warning("save_masks=true, but %s gives no masks (not a localizer)", runtime.name)
        else:
            masks_dir = Path(cfg.masks_dir) if cfg.masks_dir else output.with_name(f"{output.stem}_masks")
            columns.append("mask")
    threshold = runtime.threshold if cfg.threshold is None else float(cfg.threshold)
    log.info("%s (%s, threshold %.4f): %d inputs -> %s", runtime.name, Path(cfg.model).suffix, threshold,
             len(records), output)
    try:
        with ResultWriter(output, columns, resume=cfg.resume) as writer:
            counts = score_records(runtime, records, writer, batch_size=cfg.batch_size,
                                   num_workers=cfg.num_workers, threshold=threshold, masks_dir=masks_dir,
                                   progress=cfg.progress)
    except KeyboardInterrupt:
        raise InferenceFailed(f"interrupted; the rows in {output} are complete: rerun with resume=true") from None
    log.info("scored %(ok)d, unreadable %(error)d, already done %(skipped)d", counts)
    results = read_results(output)
    if not any(row["status"] == "ok" for row in results):
        raise InferenceFailed(f"nothing could be scored: all {len(records)} inputs failed (see {output})")
    metrics = labelled_metrics(records, results, threshold)
    if metrics is not None:
        write_metrics_json(output.with_suffix(".metrics.json"), metrics)
        log.info("auroc %.4f, tpr %.4f, tnr %.4f -> %s", metrics["auroc"], metrics["tpr"], metrics["tnr"],
                 output.with_suffix(".metrics.json"))
    return {"counts": counts, "metrics": metrics}


@hydra.main(version_base="1.3", config_path="configs", config_name="infer")
def main(cfg: DictConfig) -> None:
    try:
        infer(cfg)
    except InferenceFailed as error:
        log.error("%s", error)
        sys.exit(1)


if __name__ == "__main__":
    main()
