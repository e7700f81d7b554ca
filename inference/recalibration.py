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
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.calibration import calibrate_threshold, clopper_pearson, genuine_needed


class CalibrationRefused(Exception):
    """Too few genuine images for the requested false-positive rate (the message says how many)."""


def needed_rule(target_fpr: float, confidence: float) -> str:
    return (f"with n genuine images and none flagged, the true FPR is below {target_fpr:g} at {confidence:.0%} "
            f"confidence only when (1 - {target_fpr:g})^n <= {1 - confidence:.2g}, i.e. "
            f"n >= {genuine_needed(target_fpr, confidence)} (about 3 / target_fpr)")


def recalibrate(genuine_scores: Any, target_fpr: float, fake_scores: Any = None,
                confidence: float = 0.95) -> dict[str, Any]:
    """The threshold for `target_fpr` on `genuine_scores` and what it achieves.

    Scores keep their dtype (float32 from the runtimes), so the threshold cannot tie with a
    genuine score once stored as float32. Raises `CalibrationRefused` below `genuine_needed`.
    """
    genuine = np.asarray(genuine_scores)
    needed = genuine_needed(target_fpr, confidence)
    if genuine.size < needed:
        raise CalibrationRefused(
            f"{genuine.size} genuine images were scored; target_fpr={target_fpr:g} needs at least {needed}: "
            f"{needed_rule(target_fpr, confidence)}. Add genuine images or raise target_fpr.")
    threshold = calibrate_threshold(genuine, target_fpr)
    false_positives = int(np.sum(genuine >= threshold))
    fpr_low, fpr_high = clopper_pearson(false_positives, genuine.size, confidence)
    summary: dict[str, Any] = {
        "threshold": threshold, "target_fpr": float(target_fpr), "confidence": float(confidence),
        "n_genuine": int(genuine.size), "genuine_needed": needed, "false_positives": false_positives,
        "tnr": 1.0 - false_positives / genuine.size, "tnr_interval": [1.0 - fpr_high, 1.0 - fpr_low],
    }
    fakes = np.asarray(fake_scores if fake_scores is not None else [])
    if fakes.size:
        detected = int(np.sum(fakes >= threshold))
        summary.update({"n_fake": int(fakes.size), "tpr": detected / fakes.size,
                        "tpr_interval": list(clopper_pearson(detected, fakes.size, confidence))})
    return summary


def provenance(summary: dict[str, Any], input: str, previous_threshold: float) -> dict[str, Any]:
    """What a calibrated model records about its threshold: how many images, which target, when."""
    keys = ("threshold", "target_fpr", "confidence", "n_genuine", "false_positives", "tnr", "tnr_interval",
            "n_fake", "tpr", "tpr_interval")
    return {**{k: summary[k] for k in keys if k in summary}, "input": str(input),
            "previous_threshold": float(previous_threshold),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def write_calibrated_model(model: str | os.PathLike, output: str | os.PathLike, record: dict[str, Any]) -> Path:
    """A copy of `model` (.ckpt or .onnx) whose threshold is `record["threshold"]`, with `record`
    stored beside it: `calibration` in the checkpoint, `calibration` in the ONNX metadata (and its
    JSON sidecar when the export wrote one). Written to a temporary file and renamed."""
    model, output = Path(model), Path(output)
    if model.suffix.lower() != output.suffix.lower():
        raise ValueError(f"output must have the model's suffix ({model.suffix}), got {output}")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.stem}.partial{output.suffix}")
    if model.suffix.lower() == ".onnx":
        import onnx

        graph = onnx.load(str(model))
        metadata = {p.key: p.value for p in graph.metadata_props}
        metadata.update({"threshold": repr(float(record["threshold"])), "calibration": json.dumps(record)})
        del graph.metadata_props[:]
        for key, value in metadata.items():
            graph.metadata_props.add(key=key, value=value)
        onnx.save(graph, str(tmp))
        sidecar = model.with_suffix(".json")
        if sidecar.is_file():
            data = json.loads(sidecar.read_text())
            data.update({"threshold": float(record["threshold"]), "calibration": record})
            output.with_suffix(".json").write_text(json.dumps(data, indent=2))
    else:
        import torch

        checkpoint = torch.load(model, map_location="cpu", weights_only=True)
        checkpoint["state_dict"]["threshold"] = torch.tensor(float(record["threshold"]), dtype=torch.float32)
        checkpoint["calibration"] = record
        torch.save(checkpoint, tmp)
    os.replace(tmp, output)
    return output


def calibration_report(summary: dict[str, Any], model: str, output: Path) -> str:
    """The calibration as Markdown: threshold, genuine TNR with its interval, TPR when fakes were given."""
    low, high = summary["tnr_interval"]
    level = f"{summary['confidence']:.0%}"
    lines = [f"# Calibration of {model}", "",
             f"Threshold {summary['threshold']:.6g} (was {summary['previous_threshold']:.6g}) for a target FPR of "
             f"{summary['target_fpr']:g} on {summary['n_genuine']} genuine images from {summary['input']} "
             f"({summary['date']}); written to {output}.", "",
             f"- Genuine TNR: {summary['tnr']:.4f} ({summary['n_genuine'] - summary['false_positives']}/"
             f"{summary['n_genuine']}), {level} Clopper-Pearson interval [{low:.4f}, {high:.4f}]"]
    if "tpr" in summary:
        tlow, thigh = summary["tpr_interval"]
        lines.append(f"- TPR on {summary['n_fake']} fakes: {summary['tpr']:.4f}, {level} Clopper-Pearson interval "
                     f"[{tlow:.4f}, {thigh:.4f}]")
    else:
        lines.append("- TPR: no fakes were given (a labelled manifest with label 1 rows adds it)")
    lines += ["", "These figures hold for images like the calibration set; recalibrate when the images change "
              "(new cameras, compression, platforms or editing tools)."]
    return "\n".join(lines) + "\n"


def calibrate_model(model: str, input: str, output: str | os.PathLike, target_fpr: float = 0.01,
                    confidence: float = 0.95, device: str = "auto", batch_size: int = 32, num_workers: int = 2,
                    progress: bool = True) -> dict[str, Any]:
    """Score `input` with `model`, recalibrate on its genuine images, write the calibrated model and
    its report (`<output stem>.calibration.md` / `.json`) and the scores (`.calibration_scores.csv`).

    `input` is a folder of genuine images (no labels: every image is genuine) or a labelled
    manifest / layout (label 0 genuine, 1 fake; unlabelled rows are then left out).
    """
    from datamodules.layouts import records_from_input
    from inference.runtime import load_runtime
    from inference.scoring import score_records
    from inference.writer import ResultWriter, read_results

    output = Path(output)
    runtime = load_runtime(model, device)
    records = records_from_input(input)
    labelled = any(r.label is not None for r in records)
    genuine = {r.path for r in records if r.label == 0 or not labelled}
    fakes = {r.path for r in records if r.label == 1}
    scores_path = output.with_name(f"{output.stem}.calibration_scores.csv")
    with ResultWriter(scores_path) as writer:
        score_records(runtime, [r for r in records if r.path in genuine | fakes], writer, batch_size=batch_size,
                      num_workers=num_workers, progress=progress)
    rows = [r for r in read_results(scores_path) if r["status"] == "ok"]
    summary = recalibrate(np.asarray([r["score"] for r in rows if r["path"] in genuine], dtype=np.float32),
                          target_fpr, np.asarray([r["score"] for r in rows if r["path"] in fakes], dtype=np.float32),
                          confidence)
    record = provenance(summary, input, runtime.threshold)
    write_calibrated_model(model, output, record)
    output.with_name(f"{output.stem}.calibration.json").write_text(json.dumps(record, indent=2))
    output.with_name(f"{output.stem}.calibration.md").write_text(calibration_report(record, str(model), output))
    return record
