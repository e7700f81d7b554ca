"""What `infer.py` reports after scoring: review verdicts, metrics and a report for labelled input,
robustness curves, all from the rows and map reductions the run holds in memory."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from datamodules.io import file_sha256
from datamodules.records import Record, SettingError
from evaluation.calibration import below_target_in
from evaluation.pixel import PIXEL_PROTOCOL
from evaluation.summary import figure_text
from inference.masks import PixelReduction, records_with_masks
from inference.parts import Shard, part_files
from inference.recalibration import CategoryThreshold
from inference.runtime import Runtime
from inference.scoring import join_truth, score_perturbed_fn
from inference.tiling import scoring_tiles, tile_settings
from inference.writer import stamp_run

log = logging.getLogger("infer")


class InferenceFailed(Exception):
    """Nothing could be scored, or the model / input / options are unusable: the run stops with this message."""


@dataclass(frozen=True)
class Robustness:
    """`infer.py robustness=true`: which perturbations, on how many of the labelled images."""

    max_images: int = 500
    perturbations: Sequence[str] | None = None  # None: every one of `evaluation.robustness.DEFAULT_LEVELS`
    seed: int = 0
    batch_size: int = 32
    num_workers: int = 2


@dataclass(frozen=True)
class ReportRequest:
    """Where the run wrote and what it was asked for beyond the rows."""

    output: Path
    input: str
    threshold: float
    group_by: str | None = None
    review_aggregation: str = "max"
    robustness: Robustness | None = None
    per_category_thresholds: bool = True  # False when the user chose the threshold for this run
    html: bool = False  # also the page for reviewers (`inference.html_report`)
    blinded: bool = False
    model: str = ""


def image_run_options(cfg: Any, names: Sequence[str]) -> list[str]:
    """Which of these options of per-image runs the configuration sets: pair runs and index searches
    refuse those they do not take rather than ignore them."""
    given = {
        "resume": bool(cfg.get("resume")),
        "shard": bool(cfg.get("shard")),
        "merge": bool(cfg.get("merge")),
        "devices": cfg.get("devices", 1) != 1,
        "report=html": cfg.get("report") == "html",
        "tiles": bool(cfg.get("tiles")),
        "robustness": bool(cfg.get("robustness")),
        "overlays": bool(cfg.get("overlays")),
    }
    return [name for name in names if given[name]]


def stamp(cfg: Any, output: Path, runtime: Runtime) -> None:
    """`inference.writer.stamp_run` with this run's model, thresholds and scoring options: image
    and pair runs alike refuse to add rows to rows scored otherwise (an index search, which always
    writes anew, stamps its index and settings: `collection.search_stamp`). That is a resume (also of
    a several-process run killed before its merge, which left part files only), a shard (which
    leaves the other shards' rows and an earlier output in place) and a merge."""
    own = cfg.threshold is None  # the model's calibrated thresholds, else the one given
    decided_by = {
        "model": str(Path(cfg.model).resolve()),
        "model_sha256": file_sha256(cfg.model),
        "threshold": runtime.threshold if own else float(cfg.threshold),
        "category_thresholds": dict(getattr(runtime, "category_thresholds", None) or {}) if own else {},
        # the options that change this model's scores (`scoring_tiles`): rows scored otherwise must not
        # share a file ("scored_with": the stamps before it, which compared every tile option, are not compared)
        "scored_with": {**scoring_tiles(tile_settings(cfg), runtime), "tta": bool(cfg.get("tta"))},
    }
    adds_rows = bool(cfg.resume) or bool(cfg.get("merge", False)) or Shard.parse(cfg.get("shard")).count > 1
    earlier_rows = output.is_file() or bool(part_files(output))
    try:
        stamp_run(output, decided_by, compare=adds_rows and earlier_rows)
    except ValueError as error:
        raise InferenceFailed(str(error)) from None


def check_report_libraries(records: Sequence[Record], shard: Shard) -> None:
    """Labelled input gets metrics and a report with figures, drawn with matplotlib, which a
    torch-free install may lack: refused before scoring, not after every row is scored (a shard of
    several reports nothing: its merge does)."""
    if shard.count > 1 or not any(r.label is not None for r in records):
        return
    try:
        import matplotlib  # noqa: F401  (the figures import it when the report is written)
    except ImportError:
        raise SettingError(
            "the input is labelled: infer.py reports metrics and figures for labelled input, which need "
            "matplotlib (pip install matplotlib); nothing was scored"
        ) from None


def map_folders(
    output: Path,
    runtime: Runtime,
    records: Sequence[Record],
    save_masks: bool,
    overlays: bool,
    save_confidence: bool,
    masks_dir: str | None,
) -> tuple[Path | None, Path | None]:
    """Where a localizer's maps (and overlays) go: asked for, or needed for pixel metrics."""
    wants_maps = save_masks or overlays or save_confidence or records_with_masks(records)
    if wants_maps and not runtime.is_localizer:
        if save_masks or overlays:
            log.warning("save_masks/overlays requested, but %s gives no masks (not a localizer)", runtime.name)
        return None, None
    if not wants_maps:
        return None, None
    if not save_masks:
        log.info("the input has true masks: saving the predicted maps too, for pixel metrics")
    folder = Path(masks_dir) if masks_dir else output.with_name(f"{output.stem}_masks")
    return folder, (folder / "overlays" if overlays else None)


def page_path(output: Path) -> Path:
    """Where `report=html` writes the page: `<output stem>_report.html` beside the rows."""
    return output.with_name(f"{output.stem}_report.html")


def page_files(output: Path) -> Path:
    """The page's pictures and further pages: `<output stem>_report_files/` beside it."""
    page = page_path(output)
    return page.with_name(f"{page.stem}_files")


def warn_earlier_page(output: Path) -> None:
    """Said when a run without `report=html` leaves an earlier run's page beside the rows it wrote:
    a reviewer opening it would read other scores."""
    if page_path(output).is_file():
        log.warning(
            "%s is the page of an earlier run, not of these scores (report=html writes this run's)", page_path(output)
        )


def without_own_outputs(records: list[Record], cfg: Any, output: Path) -> list[Record]:
    """An output written inside the input folder must not become input: the maps, overlays and report
    pictures of this run's earlier tries (resume) are left out, and said."""
    masks = Path(cfg.masks_dir) if cfg.masks_dir else output.with_name(f"{output.stem}_masks")
    own = [folder.resolve() for folder in (masks, page_files(output)) if folder.is_dir()]
    if not own:  # nothing written yet: no path to resolve
        return records
    kept = [r for r in records if not any(folder in Path(r.path).resolve().parents for folder in own)]
    if len(kept) < len(records):
        log.info("left out %d image(s) in this run's own output folders", len(records) - len(kept))
    return kept


def page_drawer(
    output: Path, threshold: float, blinded: bool, rows: int, threshold_of: Callable[[str], float] | None = None
) -> Any:
    """The drawer of the page's pictures while the run scores (`inference.report_pictures.EvidenceDrawer`):
    a picture per file when the `rows` fit on one page, which may then embed them, else strips, and
    small scored files shown as they are; masks at each input's own threshold (`threshold_of`)."""
    from inference import html_report
    from inference.report_pictures import STRIP, EvidenceDrawer

    one_page = rows <= html_report.PAGE_SIZE
    return EvidenceDrawer(
        page_files(output),
        threshold,
        maps=not blinded,
        per_strip=1 if one_page else STRIP,
        link_sources=not one_page,
        threshold_of=threshold_of,
    )


def report_run(
    request: ReportRequest,
    runtime: Runtime,
    records: Sequence[Record],
    rows: list[dict[str, Any]],
    pixel: PixelReduction | None,
    evidence: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Review verdicts (`group_by`), then metrics and a report when the input carries labels.

    `rows` are the run's rows in input order (score and label parsed); `pixel` has reduced the
    run's maps; `evidence` holds the page's pictures drawn while scoring (`page_drawer`).
    Returns {"metrics": what `<output>.metrics.json` holds or None, "reviews": ...}.
    """
    reviews = review_verdicts(request, runtime, records, rows) if request.group_by else None
    truth = join_truth(records, rows)
    if not truth:
        if request.robustness:
            log.warning("robustness=true needs labelled input (a manifest with labels or a 0_real/1_fake tree)")
        html_page(request, runtime, records, rows, None, [], reviews, evidence)
        return {"metrics": None, "reviews": reviews}
    metrics, plots = labelled_report(request, runtime, truth, pixel)
    html_page(request, runtime, records, rows, metrics, plots, reviews, evidence)
    below = below_target_in(metrics)
    if below:
        log.warning("%s", below)
    return {"metrics": metrics, "reviews": reviews}


def review_verdicts(
    request: ReportRequest, runtime: Runtime, records: Sequence[Record], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """One verdict per review (the images grouped by `group_by`), written beside the rows."""
    from inference.reviews import score_reviews

    reviews = score_reviews(
        request.output,
        records,
        rows,
        request.group_by,
        request.review_aggregation,
        request.threshold,
        request.input,
        title=f"{runtime.name} on {request.input}",
        own_threshold=CategoryThreshold.for_records(runtime, records) if request.per_category_thresholds else None,
    )
    log.info(
        "%d reviews (%s of images grouped by %s) -> %s",
        reviews["reviews"],
        request.review_aggregation,
        request.group_by,
        reviews["path"],
    )
    return reviews


def labelled_report(
    request: ReportRequest, runtime: Runtime, truth: list[dict[str, Any]], pixel: PixelReduction | None
) -> tuple[dict[str, Any], list[Path]]:
    """Metrics (robustness curves and pixel metrics included when asked for and possible), the report
    folder and `<output>.metrics.json`; returns the metrics and the report's figures."""
    output = request.output
    robustness = sweep(runtime, truth, request.robustness, request.threshold) if request.robustness else None
    from evaluation import UndefinedMetricWarning, report_records, write_metrics_json  # plotting libraries: only now

    pixel_metrics = pixel.metrics() if pixel is not None else None
    sheet = pixel.contact_sheet() if pixel_metrics else None
    by_category = (getattr(runtime, "category_thresholds", None) or None) if request.per_category_thresholds else None
    calibrated = getattr(runtime, "calibration", None) is not None  # a threshold stored, never calibrated: no target
    target_fpr = getattr(runtime, "target_fpr", None) or 0.01  # exports without it: the toolkit's default
    with warnings.catch_warnings(record=True) as undefined:  # one class only: said once, plainly
        warnings.simplefilter("always", UndefinedMetricWarning)
        written = report_records(
            output.with_name(f"{output.stem}_report"),
            truth,
            threshold=request.threshold,
            calibrated_threshold=runtime.threshold if calibrated else None,
            category_thresholds=by_category,
            target_tnr=1.0 - target_fpr if calibrated else None,
            robustness=robustness,
            title=f"{runtime.name} on {request.input}",
            pixel=pixel_metrics,
            contact_sheet=sheet,
        )
    for message in dict.fromkeys(str(w.message) for w in undefined if w.category is UndefinedMetricWarning):
        log.info("%s", message)
    for other in (w for w in undefined if w.category is not UndefinedMetricWarning):
        warnings.showwarning(other.message, other.category, other.filename, other.lineno)
    metrics = written.metrics
    if not calibrated:
        with open(written.files["report"], "a", encoding="utf-8") as handle:
            handle.write(
                f"\nThe model's threshold {runtime.threshold:g} was never calibrated (no calibration record in the "
                "model file): calibrate it on genuine images of your own (python calibrate.py).\n"
            )
    if pixel_metrics:
        metrics["pixel_protocol"] = PIXEL_PROTOCOL
        with open(written.files["report"], "a", encoding="utf-8") as handle:
            handle.write(
                f"\nPixel metrics: {PIXEL_PROTOCOL}; computed from the saved 8-bit maps. "
                "Contact sheet: the worst and best images by pixel F1.\n"
            )
    metrics_path = output.with_suffix(".metrics.json")
    write_metrics_json(metrics_path, metrics)
    shown = [figure_text(metrics[key]) for key in ("auroc", "tpr", "tnr")]
    log.info("auroc %s, tpr %s, tnr %s -> %s (report: %s)", *shown, metrics_path, written.files["report"])
    return metrics, [p for p in written.files.values() if str(p).endswith(".png")]


def html_page(
    request: ReportRequest,
    runtime: Runtime,
    records: Sequence[Record],
    rows: list[dict[str, Any]],
    metrics: dict[str, Any] | None,
    plots: Sequence[Any],
    reviews: Mapping[str, Any] | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> Path | None:
    """`report=html`: `<output stem>_report.html` beside the rows, for the people who judge them,
    with the review verdicts (`group_by`) and the pictures drawn while scoring (`evidence`)."""
    if not request.html:
        warn_earlier_page(request.output)
        return None
    from inference.html_report import read_calibration, write_run_report
    from inference.reviews import page_groups

    group_of, group_column = page_groups(records, request.group_by, request.input)
    # where the model decides per category, each row is shown at the threshold that decided it
    per_input = CategoryThreshold.for_records(runtime, records) if request.per_category_thresholds else None
    own = (lambda path: {"threshold": per_input(path)}) if per_input else (lambda path: {})
    page_rows = [{**row, "group": group_of.get(row["path"]) or "", **own(row["path"])} for row in rows]
    if runtime.is_localizer and not request.blinded:
        page_rows = noted_without_map(page_rows, evidence or {})
    page = write_run_report(
        page_path(request.output),
        page_rows,
        model=request.model,
        detector=runtime.name,
        threshold=request.threshold,
        calibration=read_calibration(request.model) if request.model else None,
        threshold_from_user=not request.per_category_thresholds,
        category_thresholds=per_input.by_category if per_input else None,
        input=request.input,
        is_localizer=runtime.is_localizer,
        metrics=metrics,
        plots=[str(p) for p in plots],
        blinded=request.blinded,
        groups=[
            {"group": r["review"], "score": r["score"], "threshold": r["threshold"], "images": r["n_images"]}
            for r in (reviews or {}).get("rows", [])
        ],
        evidence=evidence,
        group_column=group_column,
    )
    log.info("report for people to read: %s", page)
    return page


NO_MAP = "no map: scored by another process or an earlier run, which keep maps for the page only with save_masks=true"


def noted_without_map(rows: list[dict[str, Any]], evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A localizer's rows whose map the page cannot draw (not drawn while scoring, not saved), noted
    as such, and said once: their map cells would otherwise be empty without a word."""
    lacking = {row["path"] for row in rows if row.get("status", "ok") == "ok" and not row.get("mask")} - set(evidence)
    if lacking:
        log.warning("the report shows no map for %d image(s): %s", len(lacking), NO_MAP)
    return [{**row, "note": NO_MAP} if row["path"] in lacking else row for row in rows]


def sweep(runtime: Runtime, rows: list[dict[str, Any]], options: Robustness, threshold: float) -> dict[str, Any]:
    """Metric-vs-strength curves under JPEG, blur and rescaling on (a seeded sample of) the labelled
    rows; a localizer on input with true masks gets pixel curves too (maps compared at the original size)."""
    from evaluation import robustness_curves
    from evaluation.robustness import DEFAULT_LEVELS

    names = list(options.perturbations or DEFAULT_LEVELS)
    unknown = sorted(set(names) - set(DEFAULT_LEVELS))
    if unknown:
        raise InferenceFailed(f"unknown robustness_perturbations {unknown}; known: {sorted(DEFAULT_LEVELS)}")
    rng = np.random.default_rng(options.seed)
    chosen = [rows[i] for i in sorted(rng.permutation(len(rows))[: options.max_images])]
    records = [Record(path=row["path"], label=int(row["label"]), mask=row.get("mask") or None) for row in chosen]
    log.info("robustness sweep (%s) on %d images", ", ".join(names), len(chosen))
    if runtime.is_localizer and records_with_masks(records):
        from inference.perturbed_maps import score_perturbed_maps_fn

        score = score_perturbed_maps_fn(runtime, records, options.batch_size, options.num_workers)
    else:
        score = score_perturbed_fn(runtime, records, options.batch_size, options.num_workers)
    return robustness_curves(
        score,
        np.asarray([row["label"] for row in chosen]),
        levels={name: DEFAULT_LEVELS[name] for name in names},
        threshold=threshold,
    )
