"""Score images with a trained detector: `python infer.py model=M.ckpt|M.onnx input=DIR|FILE|MANIFEST output=F.csv`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import hydra
from omegaconf import DictConfig

from collection.store import IndexBusy
from datamodules.io import file_in_the_way
from datamodules.layouts import records_from_input
from datamodules.records import LayoutError, Record
from evaluation.protocols.review import AGGREGATIONS
from inference.cli import check_switches, expected_failures, run
from inference.job_folders import place_in_job_folder
from inference.masks import PixelReduction
from inference.parts import Shard, once_each
from inference.recalibration import CategoryThreshold
from inference.report_pictures import check_page_folder
from inference.reviews import check_group_by
from inference.run_report import (
    InferenceFailed,
    ReportRequest,
    Robustness,
    check_report_libraries,
    map_folders,
    page_drawer,
    page_files,
    report_run,
    stamp,
    without_own_outputs,
)
from inference.runs import ScoredRun, launch, merged_rows, score_to_output
from inference.runtime import ModelLoadError, Runtime, load_runtime
from inference.tiling import scoring_tiles, settings_text, tile_settings, tiled
from inference.writer import COLUMNS, TRUTH_COLUMN, resumable_columns

log = logging.getLogger("infer")
__all__ = ["InferenceFailed", "infer", "main"]
SCORED = "scored %(ok)d, failed %(error)d (unreadable or refused: see the error column), already done %(skipped)d"


# infer.py's true/false options (configs/infer.yaml)
SWITCHES = (
    "resume",
    "merge",
    "save_masks",
    "save_confidence",
    "tiles",
    "overlays",
    "tta",
    "progress",
    "robustness",
    "blinded",
    "split_panels",
    "debug",
)


def check_options(cfg: DictConfig, output: Path) -> None:
    """What can be refused before the model is read, so that a typo costs no scoring run and no
    earlier results: the report kind and its folder, the output's name, batch size, threshold and
    review aggregation."""
    if cfg.get("report") not in (None, "none", "html"):
        raise ValueError(f"report must be none or html, got {cfg.get('report')!r}")
    if cfg.get("report") == "html":
        check_page_folder(page_files(output))
    if output.suffix.lower() not in (".csv", ".jsonl"):
        raise ValueError(f"output must end in .csv or .jsonl, got {output}")
    if blocking := file_in_the_way(output, itself=False):
        raise ValueError(f"output {output}: {blocking} is a file, not a folder")
    check_switches(cfg, SWITCHES)
    if output.resolve() == Path(cfg.input).resolve():
        raise ValueError(f"output {output} is the input: the scores would overwrite it")
    if not isinstance(cfg.batch_size, int) or cfg.batch_size < 1:
        raise ValueError(f"batch_size must be a whole number of at least 1, got {cfg.batch_size!r}")
    if cfg.threshold is not None and not (isinstance(cfg.threshold, (int, float)) and 0 <= cfg.threshold <= 1):
        raise ValueError(f"threshold must be a number from 0 to 1 (or null: the model's), got {cfg.threshold!r}")
    if cfg.get("review_aggregation", "max") not in AGGREGATIONS:
        raise ValueError(f"review_aggregation must be one of {', '.join(AGGREGATIONS)}, got {cfg.review_aggregation!r}")


def infer(cfg: DictConfig) -> dict[str, Any]:
    """Score (one process, `devices=N` processes or one `shard=i/n`), merge, and report."""
    output = Path(cfg.output)
    try:
        check_options(cfg, output)
        shard = Shard.parse(cfg.shard)
        processes = launch(cfg.devices, cfg.num_nodes, cfg.strategy, cfg.device)
        runtime = load_runtime(cfg.model, processes.device, bool(cfg.get("tta", False)), processes.device_chosen)
        if (answer := pair_run(cfg, runtime)) is not None:
            return answer
        runtime = scoring_as_asked(cfg, runtime)
        records = once_each(without_own_outputs(records_from_input(cfg.input, cfg.get("layout", "auto")), cfg, output))
        if cfg.group_by:
            check_group_by(records, cfg.group_by, cfg.input)
        check_report_libraries(records, shard)
    except (ModelLoadError, LayoutError, ValueError, IndexBusy) as error:
        raise InferenceFailed(str(error)) from None
    if not records:
        raise InferenceFailed(f"no images found in {cfg.input}")
    masks_dir, overlays_dir, columns = plan_outputs(cfg, output, runtime, records)
    threshold = runtime.threshold if cfg.threshold is None else float(cfg.threshold)
    per_category = CategoryThreshold.for_records(runtime, records) if cfg.threshold is None else None
    model = f"{runtime.name} ({Path(cfg.model).suffix}, threshold {threshold:.4f})"
    log.info("%s: %d input(s) -> %s", model, len(records), output)
    pixel = PixelReduction(records) if masks_dir is not None else None
    one_process = processes.world_size == 1 and shard.count == 1
    drawer = pictures_while_scoring(cfg, output, threshold, len(records), one_process, per_category)
    if cfg.merge:
        rows = merged_rows(output, records, columns, pixel)
        scored = ScoredRun({"ok": 0, "error": 0, "skipped": len(rows)}, rows)
    else:
        try:
            scored = score_to_output(
                runtime,
                records,
                output,
                columns,
                processes,
                shard,
                resume=cfg.resume,
                pixel=pixel,
                batch_size=cfg.batch_size,
                num_workers=cfg.num_workers,
                threshold=per_category or threshold,
                masks_dir=masks_dir,
                overlays_dir=overlays_dir,
                progress=cfg.progress and processes.is_main,
                evidence=drawer,
            )
        except KeyboardInterrupt:
            raise InferenceFailed("interrupted; the rows written are complete: rerun with resume=true") from None
        if processes.is_main:  # the counts are every process's together
            log.info(SCORED, scored.counts)
        if not processes.is_main or shard.count > 1:
            return {"counts": scored.counts, "metrics": None}  # rank 0 reports; shards report after the merge
    if not any(row["status"] == "ok" for row in scored.rows):
        raise InferenceFailed(f"nothing could be scored: all {len(records)} inputs failed (see {output})")
    request = report_request(cfg, output, threshold)
    evidence = drawer.finish() if drawer is not None else None
    return {"counts": scored.counts, **report_run(request, runtime, records, scored.rows, pixel, evidence)}


def pair_run(cfg: DictConfig, runtime: Runtime) -> dict[str, Any] | None:
    """The runs whose rows are pairs of panels: a collection-index search (each input against the
    index, verified by the pair detector) or a pair detector on pairs; None for per-image runs."""
    if cfg.get("index"):
        from collection.query import infer_index

        return infer_index(cfg, runtime)
    if getattr(getattr(runtime, "net", None), "is_pair_detector", False):
        from inference.pairs import infer_pairs

        return infer_pairs(cfg, runtime)
    return None


def pictures_while_scoring(
    cfg: DictConfig, output: Path, threshold: float, rows: int, one_process: bool, per_category: Any
) -> Any:
    """`report=html`: one process scoring everything draws the page's pictures as it goes (the map
    writer's thread), each mask at the threshold that decides its image (`per_category`, where the
    model has them); other runs (several processes, shards, a merge) draw them at the end."""
    if cfg.get("report") != "html" or cfg.merge or not one_process:
        return None
    return page_drawer(output, threshold, bool(cfg.get("blinded", False)), rows, per_category)


def scoring_as_asked(cfg: DictConfig, runtime: Runtime) -> Runtime:
    """`tiles=true`: a localizer's maps stitched from overlapping tiles, or a detector's scores reduced
    over tiles. The model's threshold was calibrated on scores made with or without tiles (train.py:
    without; calibrate.py: as it was told): scored otherwise, its false-positive rate does not carry."""
    asked = tile_settings(cfg)
    # only the settings that change this model's scores (a classifier's tiles are its input size)
    scored, calibrated = scoring_tiles(asked, runtime), scoring_tiles(runtime.calibrated_tiles, runtime)
    if cfg.threshold is None and scored != calibrated:
        log.warning(
            "the model's threshold was calibrated on scores made %s, this run scores %s, which are spread otherwise "
            "(a mean over tiles is narrower): its false-positive rate does not carry over; calibrate it as you score "
            "(python calibrate.py ... with the same tile settings), or give threshold=",
            settings_text(calibrated),
            settings_text(scored),
        )
    return tiled(runtime, asked, cfg.batch_size)


def plan_outputs(
    cfg: DictConfig, output: Path, runtime: Runtime, records: Sequence[Record]
) -> tuple[Path | None, Path | None, list[str]]:
    """Where maps and overlays go (`inference.run_report.map_folders`) and the columns of the rows: a
    `mask` path when maps are saved, a `confidence` path when asked for and the localizer gives one
    (switched on here), the input's `true_label` when it has labels. First the run is stamped
    (`stamp`): a resume with another model or threshold is refused before anything is written."""
    stamp(cfg, output, runtime)
    masks_dir, overlays_dir = map_folders(
        output, runtime, records, cfg.save_masks, cfg.overlays, cfg.get("save_confidence", False), cfg.masks_dir
    )
    columns = list(COLUMNS) + (["mask"] if masks_dir is not None else [])
    if any(r.label is not None for r in records):  # the truth beside the decision, for reading them together
        columns.append(TRUTH_COLUMN)
    if cfg.get("save_confidence", False):
        if getattr(runtime, "confidence_maps", None) is None or not runtime.is_localizer:
            log.warning("save_confidence requested, but %s gives no whole-image confidence map", runtime.name)
        else:
            runtime.confidence_maps = True  # written to <masks_dir>/confidence/, named like the masks
            columns.append("confidence")
    if cfg.resume and not cfg.merge and output.is_file():  # before any image is scored
        try:
            resumable_columns(output, columns)
        except (ValueError, OSError) as error:
            raise InferenceFailed(str(error)) from None
    return masks_dir, overlays_dir, columns


def report_request(cfg: DictConfig, output: Path, threshold: float) -> ReportRequest:
    """What the report needs to know of the run's options."""
    robustness = (
        Robustness(
            cfg.robustness_max_images, cfg.get("robustness_perturbations"), cfg.seed, cfg.batch_size, cfg.num_workers
        )
        if cfg.robustness
        else None
    )
    return ReportRequest(
        output,
        str(cfg.input),
        threshold,
        cfg.group_by,
        cfg.review_aggregation,
        robustness,
        per_category_thresholds=cfg.threshold is None,
        html=cfg.get("report") == "html",
        blinded=bool(cfg.get("blinded", False)),
        model=str(cfg.model),
    )


@hydra.main(version_base="1.3", config_path="configs", config_name="infer")
@expected_failures(InferenceFailed, ModelLoadError, LayoutError)
def main(cfg: DictConfig) -> None:
    place_in_job_folder(cfg, ("output", "masks_dir"))  # a multirun's jobs each write their own
    infer(cfg)


if __name__ == "__main__":
    run(main, config_name="infer")
