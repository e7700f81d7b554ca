"""Export a trained detector to ONNX: `python export.py model=PATH.ckpt output=PATH.onnx`."""
from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from detectors.export import ExportError, export_onnx
from inference.runtime import ModelLoadError, load_checkpoint

log = logging.getLogger("export")


@hydra.main(version_base="1.3", config_path="configs", config_name="export")
def main(cfg: DictConfig) -> None:
    try:
        report = export_onnx(load_checkpoint(cfg.model), cfg.output, opset=cfg.opset, tolerance=cfg.tolerance)
    except (ModelLoadError, ExportError) as error:
        log.error("%s", error)
        sys.exit(1)
    log.info("wrote %s (outputs %s; max |score difference| vs PyTorch %.2e)", report.path,
             ", ".join(report.outputs), report.max_score_difference)
    if report.max_mask_difference is not None:
        log.info("max |mask difference| vs PyTorch %.2e on inputs %s", report.max_mask_difference,
                 report.checked_shapes)


if __name__ == "__main__":
    main()
