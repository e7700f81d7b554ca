"""calibration.by=category: one threshold per kind of genuine image, refused per category when it
has too few genuine images, carried by .ckpt and .onnx files, applied by infer.py per input, and
reported per category with every category that misses its genuine TNR target named."""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from datamodules.records import Record
from detectors.module import DetectorModule
from evaluation import report_records
from evaluation.calibration import calibrate_by_category, row_thresholds
from exporting.variants import write_sidecar
from infer import infer
from inference.recalibration import CalibrationRefused, calibrate_model, recalibrate_by_category
from inference.runtime import OnnxRuntime, TorchRuntime
from tests.helpers import compose_config, tiny_npr_net, write_images


def test_each_category_gets_the_threshold_of_its_own_genuine_scores():
    grainy = np.linspace(0.5, 1.0, 100)  # a kind the detector scores high, e.g. micrographs
    smooth = np.linspace(0.0, 0.5, 100)
    result = calibrate_by_category(np.concatenate([grainy, smooth]), ["grainy"] * 100 + ["smooth"] * 100, 0.1)
    assert set(result["thresholds"]) == {"grainy", "smooth"} and result["too_few"] == {}
    for name, scores in (("grainy", grainy), ("smooth", smooth)):
        flagged = int(np.sum(scores >= result["thresholds"][name]))
        assert flagged == 10  # 10 % of its own 100, not of the pooled 200
    # the pooled threshold would flag 20 % of the grainy category and none of the smooth one
    per_row = row_thresholds(["grainy", "smooth", None, "other"], result["thresholds"], default=0.9)
    assert per_row.tolist() == [result["thresholds"]["grainy"], result["thresholds"]["smooth"], 0.9, 0.9]


def test_a_category_with_too_few_genuine_images_is_named_and_refused():
    scores = np.linspace(0, 1, 330)
    categories = ["photo"] * 300 + ["gel"] * 30
    with pytest.raises(CalibrationRefused, match=r"gel \(30 of 299\)"):
        recalibrate_by_category(scores, categories, target_fpr=0.01)
    split = calibrate_by_category(scores, categories, target_fpr=0.01)
    assert set(split["thresholds"]) == {"photo"} and split["too_few"] == {"gel": (30, 299)}
    with pytest.raises(CalibrationRefused, match="needs a category"):
        recalibrate_by_category(scores, [None] * 330, target_fpr=0.01)


def test_a_category_of_fakes_only_is_named_as_one_with_no_genuine_image():
    scores, categories = np.linspace(0, 1, 300), ["photo"] * 300
    with pytest.raises(CalibrationRefused, match=r"blot \(0 of 299\)"):
        recalibrate_by_category(scores, categories, 0.01, fake_scores=[0.9, 0.8], fake_categories=["blot", "photo"])
    split = calibrate_by_category(scores, categories, 0.01, other_categories=["blot", "photo"])
    assert split["too_few"] == {"blot": (0, 299)} and set(split["thresholds"]) == {"photo"}


def test_a_category_the_model_saturates_is_named_in_the_refusal():
    scores = np.concatenate([np.linspace(0.1, 0.9, 260), np.ones(21)]).astype(np.float32)
    categories = ["photo"] * 260 + ["texture"] * 21
    with pytest.raises(CalibrationRefused, match="category 'texture': 21 of 21 genuine images score 1"):
        recalibrate_by_category(scores, categories, target_fpr=0.2)


def test_report_names_the_category_that_misses_the_target_instead_of_averaging_it(tmp_path):
    rows = (
        [{"label": 0, "score": 0.1, "category": "photo"}] * 98
        + [{"label": 0, "score": 0.8, "category": "gel"}] * 2
        + [{"label": 0, "score": 0.1, "category": "gel"}] * 8
        + [{"label": 1, "score": 0.9, "category": "photo"}] * 10
    )
    report = report_records(tmp_path, rows, threshold=0.5, target_tnr=0.99, n_resamples=0)
    assert report.metrics["tnr"] == pytest.approx(106 / 108)
    assert report.metrics["by_category"]["gel"]["tnr"] == pytest.approx(0.8)
    assert report.metrics["genuine_tnr_below_target"] == {"gel": pytest.approx(0.8)}
    assert "Genuine TNR below the target 0.99 in categories: gel 0.8000" in (tmp_path / "report.md").read_text()
    # with a threshold of its own above its genuine scores, gel meets the target and nothing is named
    fixed = report_records(
        tmp_path / "fixed", rows, threshold=0.5, category_thresholds={"gel": 0.85}, target_tnr=0.99, n_resamples=0
    )
    assert fixed.metrics["genuine_tnr_below_target"] == {} and fixed.metrics["tnr"] == 1.0
    assert fixed.metrics["category_thresholds"] == {"gel": 0.85}
    assert json.loads((tmp_path / "fixed" / "metrics.json").read_text())["by_category"]["gel"]["tnr"] == 1.0


@pytest.fixture
def two_kinds(tmp_path):
    """35 genuine images of each of two categories and 4 fakes of each."""
    paths = write_images(tmp_path / "own", [(30 + i % 7, 34) for i in range(78)])
    path = tmp_path / "own" / "manifest.csv"
    rows = [[p.name, int(i % 39 >= 35), "chart" if i < 39 else "gel"] for i, p in enumerate(paths)]
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([["path", "label", "category"]] + rows)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["onnx", "ckpt"])
def test_per_category_thresholds_travel_in_the_model_and_decide_each_input(tiny_model, two_kinds, tmp_path, kind):
    model = tiny_model[kind]
    if kind == "onnx":  # with the JSON sidecar export.py writes beside it
        model = Path(shutil.copy(model, tmp_path / "exported.onnx"))
        write_sidecar(model, onnx.load(str(model)), {})
    output = tmp_path / f"calibrated.{kind}"
    record = calibrate_model(
        str(model), str(two_kinds), output, target_fpr=0.1, num_workers=0, progress=False, by="category"
    )
    assert set(record["by_category"]) == {"chart", "gel"}
    assert record["by_category"]["gel"]["n_genuine"] == 35 and record["by_category"]["gel"]["n_fake"] == 4
    runtime = (OnnxRuntime if kind == "onnx" else TorchRuntime)(output, "cpu")
    assert runtime.category_thresholds == pytest.approx(record["category_thresholds"], rel=1e-7)
    assert runtime.target_fpr == pytest.approx(0.1)
    assert "Per category" in (tmp_path / "calibrated.calibration.md").read_text()
    if kind == "onnx":  # services that read only the JSON sidecar decide per category too
        sidecar = json.loads(output.with_suffix(".json").read_text())
        assert sidecar["category_thresholds"] == pytest.approx(record["category_thresholds"])
        assert sidecar["target_fpr"] == pytest.approx(0.1)

    scored = tmp_path / "scored.csv"
    result = infer(
        compose_config(
            "infer",
            [f"model={output}", f"input={two_kinds}", f"output={scored}", "progress=false", "num_workers=0"]
            + ["report=html"],
        )
    )
    category = {row["path"]: row["category"] for row in csv.DictReader(two_kinds.open())}
    decided = {}
    for row in csv.DictReader(scored.open()):
        own = runtime.category_thresholds[category[row["path"].rsplit("/", 1)[-1]]]
        assert int(row["label"]) == int(float(row["score"]) >= own)
        decided[html.escape(row["path"])] = "flagged" if row["label"] == "1" else "not flagged"
    # the reviewers' page shows the decisions the rows hold, and says each category's threshold
    page = (tmp_path / "scored_report.html").read_text()
    shown = dict(
        re.findall(
            r'<tr data-decision="[^"]*"><td>.*?</td><td class="name">([^<]*)</td>.*?'
            r'<td class="decision">([^<]*)</td>',
            page,
        )
    )
    assert shown == decided and len(set(decided.values())) == 2
    assert "per category, calibrated on each category" in page
    for name, value in runtime.category_thresholds.items():
        assert f"{name} {value:.4g}" in page
    metrics = result["metrics"]
    assert metrics["category_thresholds"] == pytest.approx(record["category_thresholds"])
    for name in ("chart", "gel"):  # each category's genuine TNR at its own threshold, as calibrated
        assert metrics["by_category"][name]["tnr"] == pytest.approx(record["by_category"][name]["tnr"])
        assert metrics["by_category"][name]["n_neg"] == 35 and metrics["by_category"][name]["n_pos"] == 4
    assert metrics["target_tnr"] == pytest.approx(0.9)


def test_command_line_by_category_refuses_a_category_with_too_few_genuines(tiny_model, two_kinds, tmp_path):
    with pytest.raises(CalibrationRefused, match=r"chart \(35 of 59\), gel \(35 of 59\)"):
        calibrate_model(
            str(tiny_model["onnx"]),
            str(two_kinds),
            tmp_path / "c.onnx",
            target_fpr=0.05,
            num_workers=0,
            progress=False,
            by="category",
        )
    assert not (tmp_path / "c.onnx").exists()


NET = tiny_npr_net()
CATEGORIES = ["micrograph"] * 100 + ["photo"] * 100 + ["gel"] * 10 + [None] * 5
SCORES = torch.cat([torch.linspace(0.5, 0.99, 100), torch.linspace(0.0, 0.4, 100), torch.full((15,), 0.2)])


def validated(monkeypatch, records: list[Record] | None = None, scores=SCORES, **options) -> DetectorModule:
    """A module after one validation epoch on `scores` (all genuine) of `records` (by default of
    CATEGORIES, calibrated by category)."""
    module = DetectorModule(net=NET, target_fpr=0.1, **{"calibrate_by": "category", **options})
    records = records or [Record(path=str(i), category=c) for i, c in enumerate(CATEGORIES)]
    trainer = type("T", (), {"sanity_checking": False, "datamodule": type("D", (), {"splits": {"val": records}})})()
    monkeypatch.setattr(DetectorModule, "trainer", property(lambda self: trainer))
    monkeypatch.setattr(module, "log_dict", lambda *a, **k: None)
    module._scores["val"] = [(torch.arange(215), scores, torch.zeros(215, dtype=torch.long))]
    module.on_validation_epoch_end()
    return module


def test_training_calibrates_each_validation_category_with_enough_genuines(monkeypatch):
    module = validated(monkeypatch)
    assert set(module.category_thresholds) == {"micrograph", "photo"}
    assert int((SCORES[:100] >= module.category_thresholds["micrograph"]).sum()) == 10
    assert int((SCORES[100:200] >= module.category_thresholds["photo"]).sum()) == 10
    assert module.calibration["too_few_by_category"] == {"gel": [10, 29]}
    assert "gel (10 of 29)" in module.calibration["warning"]
    saved: dict = {}
    module.on_save_checkpoint(saved)
    restored = DetectorModule(net=NET, target_fpr=0.1, calibrate_by="category")
    restored.on_load_checkpoint(saved)
    assert restored.category_thresholds == module.category_thresholds
    with pytest.raises(ValueError, match="calibration.by"):
        DetectorModule(net=NET, calibrate_by="camera")


def test_training_says_a_category_it_cannot_flag_and_one_with_fakes_only_in_the_calibrations_warning(monkeypatch):
    records = [Record(path=str(i), category=c) for i, c in enumerate(CATEGORIES)]
    records += [Record(path="fake", label=1, category="blot")]
    saturated = torch.cat([SCORES[:100], torch.ones(100), SCORES[200:]])  # every photo scores 1
    module = validated(monkeypatch, records, saturated)
    assert module.category_thresholds["photo"] > 1.0
    assert "category photo: the threshold 1.0000" in module.calibration["warning"]
    assert "blot (0 of 29)" in module.calibration["warning"]


def test_training_with_rule_bound_flags_only_what_keeps_each_fpr_under_the_target(monkeypatch):
    module = validated(monkeypatch, calibration_rule="bound")
    # 100 genuines at target 0.1: P(Binomial(100, 0.1) <= 4) = 0.024 <= 5 % < P(<= 5) = 0.058.
    assert int((SCORES[:100] >= module.category_thresholds["micrograph"]).sum()) == 4
    # 215 genuines: P(Binomial(215, 0.1) <= 14) = 0.0496 <= 5 % < P(<= 15) = 0.081.
    assert int((SCORES >= module.threshold).sum()) == 14
    assert module.calibration["rule"] == "bound"
    with pytest.raises(ValueError, match="quantile, bound"):
        DetectorModule(net=NET, calibration_rule="strict")


@pytest.mark.parametrize("named", [True, False], ids=["records name their sources", "no sources"])
def test_training_counts_the_sources_of_the_validation_genuines_where_records_name_them(monkeypatch, named):
    records = [Record(path=str(i), source=f"s{i % 7}" if named else None) for i in range(len(CATEGORIES))]
    module = validated(monkeypatch, records, calibrate_by=None)
    assert module.calibration["n_genuine"] == 215
    assert module.calibration.get("genuine_sources") == (7 if named else None)


def test_the_test_reports_page_decides_each_image_at_its_categorys_threshold(monkeypatch, tmp_path):
    from train import write_test_report

    module = validated(monkeypatch)
    own, general = module.category_thresholds, float(module.threshold)
    # between the global threshold and its category's: the two decide these images differently
    scores = [(own["micrograph"] + general) / 2, (own["photo"] + general) / 2, 0.999, 0.001]
    assert own["photo"] < general < own["micrograph"]
    paths = write_images(tmp_path / "test", [(32, 32)] * 4)
    kinds = ["micrograph", "photo", "photo", "micrograph"]
    records = [Record(path=str(p), label=i % 2, category=c) for i, (p, c) in enumerate(zip(paths, kinds))]
    module.stage_scores["test"] = {
        "index": np.arange(4),
        "label": np.asarray([r.label for r in records]),
        "score": np.asarray(scores, dtype=np.float32),
    }
    # as Lightning's test loop measures them, at the global threshold (both genuines flagged, no fake)
    module.stage_metrics["test"] = {"tpr": 0.0, "tnr": 0.0, "balanced_accuracy": 0.0}
    extra = {**module.stage_metrics["test"], "detector": "npr", "calibration": module.calibration}  # as train.py
    metrics = write_test_report(tmp_path / "run", module, records, extra, True)
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    for figures in (metrics, written):  # each image at its category's threshold, as the page and report.md
        assert (figures["tpr"], figures["tnr"], figures["balanced_accuracy"]) == (0.5, 0.5, 0.5)
    page = (tmp_path / "run" / "report.html").read_text()
    shown = dict(re.findall(r'<td class="name">([^<]*)</td>.*?<td class="decision">([^<]*)</td>', page))
    assert shown == {
        html.escape(str(paths[0])): "not flagged",  # a micrograph under its own threshold
        html.escape(str(paths[1])): "flagged",  # a photo over its own
        html.escape(str(paths[2])): "flagged",
        html.escape(str(paths[3])): "not flagged",
    }
    assert f"micrograph {own['micrograph']:.4g}" in page


def test_a_tiled_run_decides_each_input_at_its_categorys_threshold(tiny_model, two_kinds, tmp_path):
    output = tmp_path / "calibrated.ckpt"
    record = calibrate_model(
        str(tiny_model["ckpt"]), str(two_kinds), output, target_fpr=0.1, num_workers=0, progress=False, by="category"
    )
    scored = tmp_path / "tiled.csv"
    overrides = [f"model={output}", f"input={two_kinds}", f"output={scored}", "progress=false", "num_workers=0"]
    result = infer(compose_config("infer", [*overrides, "tiles=true"]))
    category = {row["path"]: row["category"] for row in csv.DictReader(two_kinds.open())}
    for row in csv.DictReader(scored.open()):
        own = record["category_thresholds"][category[Path(row["path"]).name]]
        assert int(row["label"]) == int(float(row["score"]) >= own), row["path"]
    assert result["metrics"]["category_thresholds"] == pytest.approx(record["category_thresholds"])
    assert result["metrics"]["target_tnr"] == pytest.approx(0.9)
