"""Export a trained detector to ONNX: `python export.py model=PATH.ckpt output=PATH.onnx
[graph_preprocess=true] [precision=fp32|fp16|int8 calibration_input=DIR eval_input=MANIFEST]`."""

from __future__ import annotations

import json
import logging
import math
import tempfile
from pathlib import Path

import hydra
from omegaconf import DictConfig

from inference.cli import check_switches, expected_failures, missing_dependency, run
from inference.job_folders import place_in_job_folder

try:  # the checkpoint runs beside the graph it is exported to: a torch-free install scores .onnx models only
    from datamodules.io import file_in_the_way
    from datamodules.layouts import records_from_input
    from datamodules.records import LayoutError
    from detectors.blocks.weights import MissingWeightsError
    from exporting.onnx_export import ExportError, check_exportable, export_onnx
    from exporting.variants import VariantRefused, build_variant, check_variant_options, sample_images
    from inference.runtime import ModelLoadError, calibrated_tiles, load_checkpoint
    from inference.tiling import settings_text
except ModuleNotFoundError as missing:
    missing_dependency(missing, "export.py runs the PyTorch checkpoint it exports", "torch lightning onnx onnxscript")

log = logging.getLogger("export")


def export(cfg: DictConfig) -> dict:
    """The fp32 export with its parity check, then the requested variant measured against it; the
    model and its sidecar are written together at the end, or not at all."""
    place_in_job_folder(cfg, ("output",))  # a multirun's jobs each write their own model
    output = Path(cfg.output)
    check_switches(cfg, ("graph_preprocess", "debug"))
    check_output(output, Path(cfg.model))
    check_variant_options(cfg.precision, cfg.int8_mode)  # before the fp32 export, which takes minutes for large models
    module = load_checkpoint(cfg.model)
    if not math.isfinite(float(module.threshold)):
        raise ExportError(
            f"{cfg.model} has no threshold ({float(module.threshold)}): calibrate it on genuine images first "
            "(python calibrate.py model=... input=...)"
        )
    warn_tiled_calibration(module.calibration, output, cfg.graph_preprocess)
    check_exportable(module)  # before the variant checks: a pair detector may not export at all
    if getattr(module.net, "is_pair_detector", False) and (cfg.precision != "fp32" or cfg.graph_preprocess):
        raise ExportError(
            "a pair detector exports as fp32 with two float image inputs only (no graph_preprocess, fp16 or int8)"
        )
    # the images are read before the export: a missing input is said before minutes of work
    images, labels, categories = (
        sample_images(records_from_input(cfg.eval_input), cfg.max_images) if cfg.eval_input else ([], None, None)
    )
    calibration = (
        sample_images(records_from_input(cfg.calibration_input), cfg.max_images)[0] if cfg.calibration_input else images
    )
    with tempfile.TemporaryDirectory() as folder:
        report = export_onnx(module, Path(folder) / "fp32.onnx", opset=cfg.opset, tolerance=cfg.tolerance)
        log.info(
            "fp32 export: outputs %s; max |score difference| vs PyTorch %.2e",
            ", ".join(report.outputs),
            report.max_score_difference,
        )
        if report.max_mask_difference is not None:
            log.info(
                "max |mask difference| vs PyTorch %.2e on inputs %s", report.max_mask_difference, report.checked_shapes
            )
        return build_variant(
            report.path,
            output,
            precision=cfg.precision,
            graph_preprocess=cfg.graph_preprocess,
            images=images,
            labels=labels,
            categories=categories,
            calibration=calibration,
            int8_mode=cfg.int8_mode,
            max_auroc_drop=cfg.max_auroc_drop,
            max_fpr_rise=cfg.max_fpr_rise,
            graph_tolerance=cfg.tolerance,
            graph_resize_tolerance=cfg.graph_resize_tolerance,
            pytorch_parity={
                "max_score_difference": report.max_score_difference,
                "max_mask_difference": report.max_mask_difference,
                "checked_shapes": report.checked_shapes,
            },
        )


def warn_tiled_calibration(calibration: dict | None, output: Path, graph_preprocess: bool) -> None:
    """A threshold calibrated on tiled scores (calibrate.py tiles=true) is exported as it is, but
    runtimes that score each image whole decide at it: its false-positive rate does not carry over."""
    scoring = calibrated_tiles(calibration)
    if not scoring.get("tiles"):
        return
    log.warning(
        "the model's threshold was calibrated on scores made %s (calibrate.py tiles=true): runtimes that score "
        "each image whole (the Node example examples/node/score.mjs, %s) decide at a threshold set for tiled "
        "scores, and its false-positive rate does not carry over to them; for them, recalibrate the export "
        "without tiles: python calibrate.py model=%s input=GENUINE_IMAGES output=%s (tiles left out)",
        settings_text(scoring),
        "this graph_preprocess=true model" if graph_preprocess else "a graph_preprocess=true export",
        output,
        output.with_name(f"{output.stem}_whole.onnx"),
    )


def check_output(output: Path, model: Path) -> None:
    """An output the export can write, and a checkpoint to export, said before any work."""
    if output.suffix.lower() != ".onnx":  # its sidecar is <stem>.json: m.txt would replace m.json
        raise ExportError(f"output must end in .onnx, got {output}")
    if output.is_dir():
        raise ExportError(f"output {output} is a folder; give a file name ending in .onnx")
    if (blocking := file_in_the_way(output.parent)) is not None:
        raise ExportError(f"output {output} cannot be written: {blocking} is a file, not a folder")
    if model.suffix.lower() == ".onnx":
        raise ExportError(
            f"{model} is already an ONNX model: export.py turns a .ckpt checkpoint into one "
            "(calibrate.py recalibrates an ONNX model, infer.py scores it)"
        )


@hydra.main(version_base="1.3", config_path="configs", config_name="export")
@expected_failures(ModelLoadError, ExportError, VariantRefused, LayoutError, MissingWeightsError)
def main(cfg: DictConfig) -> None:
    report = export(cfg)
    log.info("wrote %s and %s:\n%s", cfg.output, report["sidecar"], json.dumps(report, indent=2))


if __name__ == "__main__":
    run(main, config_name="export")
