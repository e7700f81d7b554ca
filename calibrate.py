"""Re-set a detector's threshold on your own genuine images:
`python calibrate.py model=M.ckpt|M.onnx input=GENUINE_DIR|MANIFEST target_fpr=0.01 output=M_calibrated.onnx`
(`by=category`: one threshold per manifest category as well; `tiles=true`: on scores made as
`infer.py tiles=true` makes them)."""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from datamodules.records import LayoutError
from inference.cli import expected_failures, run
from inference.job_folders import place_in_job_folder
from inference.recalibration import CalibrationRefused, calibrate_model
from inference.runtime import ModelLoadError
from inference.tiling import tile_settings

log = logging.getLogger("calibrate")


@hydra.main(version_base="1.3", config_path="configs", config_name="calibrate")
@expected_failures(CalibrationRefused, ModelLoadError, LayoutError, ValueError)
def main(cfg: DictConfig) -> None:
    place_in_job_folder(cfg, ("output",))  # a multirun's jobs each write their own model
    record = calibrate_model(
        cfg.model,
        cfg.input,
        cfg.output,
        target_fpr=cfg.target_fpr,
        confidence=cfg.confidence,
        device=cfg.device,
        batch_size=cfg.batch_size,
        num_workers=cfg.num_workers,
        progress=cfg.progress,
        by=cfg.get("by"),
        rule=cfg.get("rule", "quantile"),
        tiles=tile_settings(cfg),
    )
    low, high = record["tnr_interval"]
    log.info(
        "threshold %.6g (was %.6g) on %d genuine images: TNR %.4f [%.4f, %.4f]%s -> %s",
        record["threshold"],
        record["previous_threshold"],
        record["n_genuine"],
        record["tnr"],
        low,
        high,
        f", TPR {record['tpr']:.4f}" if "tpr" in record else "",
        cfg.output,
    )
    for name, own in (record.get("by_category") or {}).items():
        low, high = own["tnr_interval"]
        log.info(
            "  %s: threshold %.6g on %d genuine images: TNR %.4f [%.4f, %.4f]%s",
            name,
            own["threshold"],
            own["n_genuine"],
            own["tnr"],
            low,
            high,
            f", TPR {own['tpr']:.4f}" if "tpr" in own else "",
        )


if __name__ == "__main__":
    run(main, config_name="calibrate")
