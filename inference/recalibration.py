"""Re-setting a trained detector's decision threshold on the user's own genuine images.

A threshold calibrated on the training distribution's genuine images rarely keeps its false-alarm
rate on other cameras, compressions or editing pipelines. `recalibrate` picks the threshold that
flags at most `target_fpr` of the user's genuine images, reports the genuine TNR with its exact
(Clopper-Pearson) interval and the TPR when fakes are given, and refuses when the genuine images
are too few for the target to mean anything. `write_calibrated_model` stamps the threshold and its
provenance into a copy of the `.ckpt` or `.onnx`.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from evaluation.calibration import (
    calibrate_by_category,
    calibrate_threshold,
    category_names,
    check_rule,
    clopper_pearson,
    genuine_needed,
    too_few_sentence,
)
from inference.calibration_report import calibration_report
from inference.cli import SettingError

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # type hints only: scoring loads these when it runs
    from datamodules.records import Record
    from inference.runtime import Runtime


class CalibrationRefused(Exception):
    """Too few genuine images for the requested false-positive rate (the message says how many)."""


class CategoryThreshold:
    """Each input's threshold: its category's (calibration.by=category) when the model has one for
    it, else the model's global threshold. Called with an input's path, as scoring decides."""

    def __init__(self, default: float, by_category: dict[str, float], categories: dict[str, str | None]) -> None:
        self.default, self.by_category, self.categories = (float(default), dict(by_category), categories)

    def __call__(self, path: str) -> float:
        return self.by_category.get(self.categories.get(path) or "", self.default)

    @classmethod
    def for_records(cls, runtime: Any, records: Any) -> "CategoryThreshold | None":
        """The per-input thresholds of `runtime` for `records`, or None when the model has no
        per-category thresholds or no record carries a category they name."""
        by_category = getattr(runtime, "category_thresholds", None) or {}
        categories = {r.path: r.category for r in records}
        if not set(by_category) & set(categories.values()):
            return None
        return cls(runtime.threshold, by_category, categories)


def needed_rule(target_fpr: float, confidence: float) -> str:
    return (
        f"with n genuine images and none flagged, the true FPR is below {target_fpr:g} at {confidence:.0%} "
        f"confidence only when (1 - {target_fpr:g})^n <= {1 - confidence:.2g}, i.e. "
        f"n >= {genuine_needed(target_fpr, confidence)} (about 3 / target_fpr)"
    )


def recalibrate(
    genuine_scores: Any,
    target_fpr: float,
    fake_scores: Any = None,
    confidence: float = 0.95,
    rule: str = "quantile",
    ceiling: float = 1.0,
) -> dict[str, Any]:
    """The threshold for `target_fpr` on `genuine_scores` and what it achieves.

    Scores keep their dtype (float32 from the runtimes), so the threshold cannot tie with a
    genuine score once stored as float32. Raises `CalibrationRefused` below `genuine_needed`, and
    where the threshold would lie above `ceiling`, the highest score the detector gives (1, or
    less: splicebuster's maps are clipped), so that it flags no image at all.
    """
    genuine = np.asarray(genuine_scores)
    needed = genuine_needed(target_fpr, confidence)
    if genuine.size < needed:
        raise CalibrationRefused(
            f"{genuine.size} genuine images were scored; target_fpr={target_fpr:g} needs at least {needed}: "
            f"{needed_rule(target_fpr, confidence)}. Add genuine images or raise target_fpr."
        )
    threshold = calibrate_threshold(genuine, target_fpr, rule, confidence)
    if threshold > ceiling:  # above every score the detector gives: it would flag nothing at all
        top = genuine.max()
        raise CalibrationRefused(
            f"{int(np.sum(genuine == top))} of {genuine.size} genuine images score {float(top):.9g}, the highest "
            f"score the detector gives: a threshold flagging at most target_fpr={target_fpr:g} of them would flag "
            "no image at all. The detector does not rank these images; raise target_fpr, or use one that ranks "
            "images of this kind (a learned one trained on them)."
        )
    false_positives = int(np.sum(genuine >= threshold))
    fpr_low, fpr_high = clopper_pearson(false_positives, genuine.size, confidence)
    summary: dict[str, Any] = {
        "threshold": threshold,
        "target_fpr": float(target_fpr),
        "confidence": float(confidence),
        "rule": rule,
        "n_genuine": int(genuine.size),
        "genuine_needed": needed,
        "false_positives": false_positives,
        "tnr": 1.0 - false_positives / genuine.size,
        "tnr_interval": [1.0 - fpr_high, 1.0 - fpr_low],
    }
    fakes = np.asarray(fake_scores if fake_scores is not None else [])
    if fakes.size:
        detected = int(np.sum(fakes >= threshold))
        summary.update(
            {
                "n_fake": int(fakes.size),
                "tpr": detected / fakes.size,
                "tpr_interval": list(clopper_pearson(detected, fakes.size, confidence)),
            }
        )
    return summary


def recalibrate_by_category(
    genuine_scores: Any,
    genuine_categories: Any,
    target_fpr: float,
    fake_scores: Any = None,
    fake_categories: Any = None,
    confidence: float = 0.95,
    rule: str = "quantile",
    ceiling: float = 1.0,
) -> dict[str, Any]:
    """`recalibrate` on all genuine images (the threshold of inputs without a known category), then
    one threshold per category, each with its TNR interval and, when fakes are given, its TPR.

    Refuses (`CalibrationRefused`, naming each one) when any category has too few genuine images
    for `target_fpr`: a category left on the global threshold is the one a grainy kind of image
    would be flagged in, unseen.
    """
    genuine, names = np.asarray(genuine_scores), category_names(genuine_categories)
    fakes = np.asarray(fake_scores if fake_scores is not None else [])
    fake_names = category_names(fake_categories if fake_categories is not None else [""] * fakes.size)
    if not (set(names.tolist()) - {""}):
        raise CalibrationRefused(
            "by=category needs a category per genuine image (a manifest with a `category` column); none was given"
        )
    summary = recalibrate(genuine, target_fpr, fakes, confidence, rule, ceiling)
    split = calibrate_by_category(genuine, names, target_fpr, confidence, rule, other_categories=fake_names)
    if split["too_few"]:
        raise CalibrationRefused(
            f"by=category: {too_few_sentence(split['too_few'], target_fpr)}: "
            f"{needed_rule(target_fpr, confidence)}. Add genuine images of these "
            "categories, raise target_fpr, or calibrate without by=category."
        )
    summary["by_category"] = {}
    for name, threshold in split["thresholds"].items():
        try:
            own = recalibrate(genuine[names == name], target_fpr, fakes[fake_names == name], confidence, rule, ceiling)
        except CalibrationRefused as error:  # said of the category, not of the whole input
            raise CalibrationRefused(f"category {name!r}: {error}") from None
        summary["by_category"][name] = {k: v for k, v in own.items() if k not in ("target_fpr", "confidence", "rule")}
    summary["category_thresholds"] = dict(split["thresholds"])
    return summary


def provenance(summary: dict[str, Any], input: str, previous_threshold: float) -> dict[str, Any]:
    """What a calibrated model records about its threshold: how many images, which target, when."""
    keys = (
        "threshold",
        "target_fpr",
        "confidence",
        "rule",
        "n_genuine",
        "false_positives",
        "tnr",
        "tnr_interval",
        "n_fake",
        "tpr",
        "tpr_interval",
        "by_category",
        "category_thresholds",
    )
    return {
        **{k: summary[k] for k in keys if k in summary},
        "input": str(input),
        "previous_threshold": float(previous_threshold),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_calibrated_model(model: str | os.PathLike, output: str | os.PathLike, record: dict[str, Any]) -> Path:
    """A copy of `model` (.ckpt or .onnx) whose threshold is `record["threshold"]`, with `record`
    stored beside it: `calibration` in the checkpoint, `calibration` in the ONNX metadata and its JSON
    sidecar (written for an .onnx output whether or not the model had one: runtimes that cannot read
    ONNX metadata read the threshold there). Written to temporary files and renamed."""
    model, output = Path(model), Path(output)
    if model.suffix.lower() != output.suffix.lower():
        raise ValueError(f"output must have the model's suffix ({model.suffix}), got {output}")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.stem}.partial{output.suffix}")
    if model.suffix.lower() == ".onnx":
        write_calibrated_onnx(model, tmp, record)
        os.replace(tmp.with_suffix(".json"), output.with_suffix(".json"))
    else:
        import torch

        checkpoint = torch.load(model, map_location="cpu", weights_only=True)
        checkpoint["state_dict"]["threshold"] = torch.tensor(float(record["threshold"]), dtype=torch.float32)
        checkpoint["calibration"] = record
        checkpoint["category_thresholds"] = dict(record.get("category_thresholds") or {})
        checkpoint["hyper_parameters"]["target_fpr"] = float(record["target_fpr"])
        torch.save(checkpoint, tmp)
    os.replace(tmp, output)
    return output


def write_calibrated_onnx(model: Path, tmp: Path, record: dict[str, Any]) -> None:
    """`model` at `tmp` with the threshold, target and calibration record in its metadata (category
    thresholds replaced, or gone with a global calibration), and its sidecar at `tmp`'s `.json`,
    keeping what the model's own sidecar says beyond the metadata (the export report)."""
    import onnx

    from inference.model_metadata import SIDECAR_KEYS, write_sidecar

    graph = onnx.load(str(model))
    metadata = {p.key: p.value for p in graph.metadata_props}
    metadata.update(
        {
            "threshold": repr(float(record["threshold"])),
            "calibration": json.dumps(record),
            "target_fpr": repr(float(record["target_fpr"])),
        }
    )
    metadata.pop("category_thresholds", None)  # a global recalibration replaces per-category ones
    if record.get("category_thresholds"):
        metadata["category_thresholds"] = json.dumps(record["category_thresholds"])
    del graph.metadata_props[:]
    for key, value in metadata.items():
        graph.metadata_props.add(key=key, value=value)
    onnx.save(graph, str(tmp))
    before, kept = model.with_suffix(".json"), {}
    if before.is_file():
        try:
            kept = {k: v for k, v in json.loads(before.read_text()).items() if k not in SIDECAR_KEYS}
        except (ValueError, AttributeError) as error:  # not JSON, or not an object
            log.warning("%s is no sidecar (%s): the new one says only what the model's metadata says", before, error)
    write_sidecar(tmp.with_suffix(".json"), metadata, kept)


def open_fraction(name: str, value: Any) -> float:
    """`value` as a number strictly between 0 and 1, or a `SettingError` naming the setting."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not 0.0 < number < 1.0:
        raise SettingError(f"{name} must be a number between 0 and 1 (0.01 for 1 %), got {value!r}")
    return number


def check_calibration_libraries(output: Path) -> None:
    """What calibrate.py needs beyond scoring, which a torch-free install may lack (scipy for the
    exact intervals, onnx to write an `.onnx` model): refused before scoring, not after it."""
    needed = [("scipy.stats", "scipy", "the threshold's exact (Clopper-Pearson) intervals")]
    if output.suffix.lower() == ".onnx":
        needed.append(("onnx", "onnx", "writing the threshold into the .onnx model"))
    for module, package, why in needed:
        try:
            importlib.import_module(module)
        except ImportError:
            raise SettingError(
                f"calibrate.py needs {package} for {why}, and it is not installed: pip install {package}; "
                "nothing was scored"
            ) from None


def calibrate_model(
    model: str,
    input: str,
    output: str | os.PathLike,
    target_fpr: float = 0.01,
    confidence: float = 0.95,
    device: str = "auto",
    batch_size: int = 32,
    num_workers: int = 2,
    progress: bool = True,
    by: str | None = None,
    rule: str = "quantile",
    tiles: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score `input` with `model`, recalibrate on its genuine images (`by="category"`: also one
    threshold per manifest category, see `recalibrate_by_category`), write the calibrated model and
    its report (`<output stem>.calibration.md` / `.json`) and the scores (`.calibration_scores.csv`, kept
    and named when the calibration is refused: the scoring is the costly part).
    `tiles` (`inference.tiling.tile_settings`): scored over tiles as infer.py will score, recorded
    with the threshold (`scoring`), which infer.py compares with how it scores.

    `input` is a folder of genuine images (no labels: every image is genuine) or a labelled
    manifest / layout (label 0 genuine, 1 fake; unlabelled rows are then left out).
    """
    from datamodules.layouts import records_from_input
    from inference.runtime import load_runtime
    from inference.tiling import tile_settings, tiled

    if by not in (None, "category"):
        raise ValueError(f"by must be null or category, got {by!r}")
    check_rule(rule)  # before scoring: a typo must not cost the user a scoring run
    target_fpr, confidence = open_fraction("target_fpr", target_fpr), open_fraction("confidence", confidence)
    output = Path(output)
    if Path(model).suffix.lower() != output.suffix.lower():  # before scoring, as every setting
        raise ValueError(f"output must have the model's suffix ({Path(model).suffix}), got {output}")
    check_calibration_libraries(output)
    runtime = load_runtime(model, device)
    if getattr(getattr(runtime, "net", None), "is_pair_detector", False):
        raise CalibrationRefused(
            "calibrate.py calibrates a detector of single images; a pair detector is calibrated on pairs "
            "without duplication when train.py fits it (data=duplication_pairs or duplication_pair_images)"
        )
    ceiling = float(np.float32(getattr(getattr(runtime, "net", None), "score_ceiling", 1.0)))  # as scores are
    tiles = tile_settings(tiles or {})
    runtime = tiled(runtime, tiles, batch_size)
    records = records_from_input(input)
    scores_path = output.with_name(f"{output.stem}.calibration_scores.csv")
    genuine_rows, fake_rows = score_for_calibration(runtime, records, scores_path, batch_size, num_workers, progress)
    try:
        summary = threshold_summary(genuine_rows, fake_rows, records, by, target_fpr, confidence, rule, ceiling)
    except CalibrationRefused as error:  # the scoring is kept, said as what it is: scores, no threshold
        kept = f"the scores of the {len(genuine_rows) + len(fake_rows)} images are kept in {scores_path}"
        raise CalibrationRefused(f"{error} No threshold was set and no model written; {kept} (no decisions)") from None
    record = {**provenance(summary, input, runtime.threshold), "scoring": tiles}
    write_calibrated_model(model, output, record)
    output.with_name(f"{output.stem}.calibration.json").write_text(json.dumps(record, indent=2))
    report = calibration_report(record, str(model), output)
    output.with_name(f"{output.stem}.calibration.md").write_text(report)
    return record


def threshold_summary(
    genuine_rows: Sequence[dict[str, Any]],
    fake_rows: Sequence[dict[str, Any]],
    records: Sequence[Record],
    by: str | None,
    target_fpr: float,
    confidence: float,
    rule: str,
    ceiling: float,
) -> dict[str, Any]:
    """`recalibrate` (or, `by="category"`, `recalibrate_by_category`) on the scored rows."""
    genuine, fakes = (np.asarray([r["score"] for r in rows], dtype=np.float32) for rows in (genuine_rows, fake_rows))
    if by != "category":
        return recalibrate(genuine, target_fpr, fakes, confidence, rule, ceiling)
    kinds = {r.path: r.category for r in records}
    of = [[kinds[r["path"]] for r in rows] for rows in (genuine_rows, fake_rows)]
    return recalibrate_by_category(genuine, of[0], target_fpr, fakes, of[1], confidence, rule, ceiling)


def score_for_calibration(
    runtime: Runtime, records: Sequence[Record], scores_path: Path, batch_size: int, num_workers: int, progress: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Score the genuine and fake images of `records` into `scores_path`; their scored rows, genuine
    then fake. Without labels every image is genuine; with labels, unlabelled rows are left out
    (their count said by `read_manifest`, the one input whose rows can be partly labelled).
    The file holds each image's score and its label as given (`true_label`), not a decision: the
    model's threshold is the one being replaced."""
    from inference.scoring import score_records
    from inference.writer import TRUTH_COLUMN, ResultWriter, read_results

    labelled = any(r.label is not None for r in records)
    genuine = {r.path for r in records if r.label == 0 or not labelled}
    fakes = {r.path for r in records if r.label == 1}
    truth = {path: 0 for path in genuine} | {path: 1 for path in fakes}
    columns = ("path", "score", TRUTH_COLUMN, "status", "error")
    with ResultWriter(scores_path, columns, truth=truth) as writer:
        score_records(
            runtime,
            [r for r in records if r.path in genuine | fakes],
            writer,
            batch_size=batch_size,
            num_workers=num_workers,
            progress=progress,
        )
    rows = read_results(scores_path)
    scored = [r for r in rows if r["status"] == "ok"]
    if rows and not scored:  # not "too few genuine images": no image could be read
        raise CalibrationRefused(f"nothing could be scored: all {len(rows)} inputs failed (see {scores_path})")
    return [r for r in scored if r["path"] in genuine], [r for r in scored if r["path"] in fakes]
