"""calibrate.py: the threshold for a target FPR on the user's genuine images, exact intervals, a
refusal that says how many images are needed, and calibrated .onnx / .ckpt files that carry it."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inference.calibration_report import calibration_report
from inference.recalibration import CalibrationRefused, calibrate_model, recalibrate
from inference.runtime import OnnxRuntime, TorchRuntime
from tests.helpers import ROOT, write_images


def binomial_cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def bisect(f, low=0.0, high=1.0) -> float:
    """The root of a function increasing on [low, high]."""
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if f(middle) < 0 else (low, middle)
    return (low + high) / 2


def test_threshold_and_clopper_pearson_interval_against_a_hand_computation():
    genuine = np.arange(400, dtype=np.float32) / 400  # 0, 1/400, ..., 399/400
    fakes = np.asarray([0.1, 0.5, 0.99, 0.995, 0.999], dtype=np.float32)
    result = recalibrate(genuine, target_fpr=0.01, fake_scores=fakes)
    # 1 % of 400 = 4 genuine images may be flagged: 396/400 .. 399/400; t sits between 395 and 396.
    assert np.float32(395 / 400) < result["threshold"] <= np.float32(396 / 400)
    assert result["false_positives"] == 4 and result["tnr"] == 396 / 400
    # Clopper-Pearson at 95 %: the FPR p with P(X >= 4 | p) = 2.5 % and P(X <= 4 | p) = 2.5 %.
    fpr_low = bisect(lambda p: (1 - binomial_cdf(3, 400, p)) - 0.025)
    fpr_high = bisect(lambda p: 0.025 - binomial_cdf(4, 400, p))
    assert result["tnr_interval"] == pytest.approx([1 - fpr_high, 1 - fpr_low], abs=1e-9)
    assert result["n_fake"] == 5 and result["tpr"] == 3 / 5
    assert result["tpr_interval"][0] < 0.6 < result["tpr_interval"][1]


def test_rule_bound_flags_only_what_keeps_the_true_fpr_under_the_target_and_says_so():
    genuine = np.arange(1000, dtype=np.float32) / 1000
    quantile, bound = recalibrate(genuine, 0.01), recalibrate(genuine, 0.01, rule="bound")
    # 1 % of 1000 is 10; P(Binomial(1000, 0.01) <= 4) = 0.029 <= 5 % < P(<= 5) = 0.067.
    assert quantile["false_positives"] == 10 and bound["false_positives"] == 4
    assert bound["rule"] == "bound" and quantile["rule"] == "quantile"
    record = {**bound, "input": "own/", "previous_threshold": 0.5, "date": "today"}
    assert "rule bound: the true FPR is at or under the target with 95% confidence" in calibration_report(
        record, "m.onnx", Path("out.onnx")
    )


def test_too_few_genuine_images_are_refused_with_the_number_needed():
    # (1 - 0.01)^n <= 0.05 first holds at n = 299 (0.99^298 = 0.0503, 0.99^299 = 0.0498).
    with pytest.raises(CalibrationRefused, match=r"298 genuine images .* needs at least 299"):
        recalibrate(np.linspace(0, 1, 298), target_fpr=0.01)
    assert recalibrate(np.linspace(0, 1, 299), target_fpr=0.01)["n_genuine"] == 299
    with pytest.raises(CalibrationRefused, match="needs at least 59"):
        recalibrate(np.zeros(30), target_fpr=0.05)


def test_genuine_images_saturating_the_model_are_refused_rather_than_a_threshold_above_1():
    """12 of 70 genuine images score exactly 1.0: flagging at most 5 % of them needs a threshold over
    1, which flags nothing, fakes included."""
    scores = np.concatenate([np.linspace(0.1, 0.9, 58), np.ones(12)]).astype(np.float32)
    with pytest.raises(CalibrationRefused, match="12 of 70 genuine images score 1, the highest score the detector"):
        recalibrate(scores, target_fpr=0.05)
    assert recalibrate(scores, target_fpr=0.2)["threshold"] <= 1.0  # 12 of 70 may be flagged at 20 %


def test_a_pair_detector_is_refused_before_any_image_is_scored(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import inference.runtime

    pair_model = SimpleNamespace(net=SimpleNamespace(is_pair_detector=True))
    monkeypatch.setattr(inference.runtime, "load_runtime", lambda *args: pair_model)
    with pytest.raises(CalibrationRefused, match="a pair detector is calibrated on pairs without duplication"):
        calibrate_model(tmp_path / "pairs.ckpt", tmp_path, tmp_path / "out.ckpt", target_fpr=0.05)


@pytest.fixture
def manifest(tmp_path):
    """35 genuine images and 6 fakes (random pixels: the labels only say which is which)."""
    paths = write_images(tmp_path / "own", [(30 + i % 7, 34) for i in range(41)])
    path = tmp_path / "own" / "manifest.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([["path", "label"]] + [[p.name, int(i >= 35)] for i, p in enumerate(paths)])
    return path


@pytest.mark.parametrize("kind", ["onnx", "ckpt"])
def test_calibrated_model_carries_the_threshold_and_its_provenance(tiny_model, manifest, tmp_path, kind):
    output = tmp_path / f"calibrated.{kind}"
    record = calibrate_model(
        str(tiny_model[kind]), str(manifest), output, target_fpr=0.1, num_workers=0, progress=False
    )
    assert record["n_genuine"] == 35 and record["n_fake"] == 6 and record["false_positives"] <= 3
    assert record["input"] == str(manifest) and record["previous_threshold"] == 0.5 and record["date"]
    runtime = (OnnxRuntime if kind == "onnx" else TorchRuntime)(output, "cpu")
    assert runtime.threshold == pytest.approx(record["threshold"], rel=1e-7)
    rows = list(csv.DictReader(open(tmp_path / "calibrated.calibration_scores.csv")))
    scores = [float(r["score"]) for r in rows]
    assert sum(s >= runtime.threshold for s in scores[:35]) == record["false_positives"]
    # each image's label as given, not a decision at the threshold being replaced
    assert "label" not in rows[0] and [r["true_label"] for r in rows] == ["0"] * 35 + ["1"] * 6
    if kind == "onnx":
        stored = json.loads(runtime.session.get_modelmeta().custom_metadata_map["calibration"])
        assert stored == record
    report = (tmp_path / "calibrated.calibration.md").read_text()
    assert "Clopper-Pearson" in report and "35 genuine images" in report


def test_command_line_refuses_too_few_images_and_writes_no_model(tiny_model, manifest, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "calibrate.py"),
            f"model={tiny_model['onnx']}",
            f"input={manifest}",
            "target_fpr=0.01",
            f"output={tmp_path / 'out.onnx'}",
            "progress=false",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert "35 genuine images were scored; target_fpr=0.01 needs at least 299" in done.stdout + done.stderr
    assert not (tmp_path / "out.onnx").exists()


def test_a_refused_calibration_keeps_its_scores_and_says_where_they_are_and_that_no_threshold_was_set(
    tiny_model, manifest, tmp_path
):
    """The scoring is the run's costly part: its rows stay, named in the refusal as scores without
    decisions, so nobody takes them for a calibrated result."""
    with pytest.raises(CalibrationRefused) as refused:
        calibrate_model(str(tiny_model["onnx"]), str(manifest), tmp_path / "c.onnx", target_fpr=0.01, progress=False)
    scores = tmp_path / "c.calibration_scores.csv"
    message = str(refused.value)
    assert message.startswith("35 genuine images were scored; target_fpr=0.01 needs at least 299")
    assert f"the scores of the 41 images are kept in {scores}" in message and "No threshold was set" in message
    rows = list(csv.DictReader(scores.open()))
    assert len(rows) == 41 and "label" not in rows[0] and not (tmp_path / "c.onnx").exists()


def test_an_unknown_rule_is_refused_before_any_image_is_scored(tiny_model, manifest, tmp_path):
    with pytest.raises(ValueError, match="quantile, bound"):
        calibrate_model(str(tiny_model["onnx"]), str(manifest), tmp_path / "c.onnx", rule="strict", progress=False)
    assert not (tmp_path / "c.calibration_scores.csv").exists() and not (tmp_path / "c.onnx").exists()


@pytest.mark.parametrize("setting", [{"target_fpr": "1%"}, {"target_fpr": 1.0}, {"confidence": 95}])
def test_a_target_or_confidence_outside_0_and_1_is_refused_before_any_image_is_scored(
    tiny_model, manifest, tmp_path, setting
):
    ((name, value),) = setting.items()
    with pytest.raises(ValueError, match=rf"{name} must be a number between 0 and 1 \(0.01 for 1 %\), got"):
        calibrate_model(str(tiny_model["onnx"]), str(manifest), tmp_path / "c.onnx", progress=False, **setting)
    assert not (tmp_path / "c.calibration_scores.csv").exists()


def test_an_output_of_another_suffix_than_the_model_is_refused_before_any_image_is_scored(
    tiny_model, manifest, tmp_path
):
    with pytest.raises(ValueError, match=r"output must have the model's suffix \(.onnx\)"):
        calibrate_model(str(tiny_model["onnx"]), str(manifest), tmp_path / "c.ckpt", progress=False)
    assert not (tmp_path / "c.calibration_scores.csv").exists()


def test_an_input_whose_every_image_fails_is_said_so_not_too_few(tiny_model, tmp_path):
    (tmp_path / "manifest.csv").write_text("path,label\nmissing1.png,0\nmissing2.png,0\n")
    with pytest.raises(CalibrationRefused, match="nothing could be scored: all 2 inputs failed"):
        calibrate_model(str(tiny_model["onnx"]), str(tmp_path / "manifest.csv"), tmp_path / "c.onnx", progress=False)


def test_unlabelled_rows_of_a_labelled_manifest_are_said_to_be_left_out(tiny_model, manifest, tmp_path, caplog):
    rows = manifest.read_text().splitlines()
    rows[1:4] = [row.rsplit(",", 1)[0] + "," for row in rows[1:4]]  # three genuine rows lose their label
    manifest.write_text("\n".join(rows) + "\n")
    with pytest.raises(CalibrationRefused, match="32 genuine images"):
        calibrate_model(str(tiny_model["onnx"]), str(manifest), tmp_path / "c.onnx", target_fpr=0.05, progress=False)
    assert [m for m in caplog.messages if "have no label" in m] == [  # said once, by the manifest's reader
        f"manifest {manifest}: 3 of {len(rows) - 1} row(s) have no label, so they are left out of metrics and "
        "calibration (neither genuine nor fake)"
    ]


def test_category_names_are_shown_as_text_in_the_calibration_report():
    own = {"threshold": 0.5, "n_genuine": 70, "tnr": 0.95, "tnr_interval": [0.9, 0.99]}
    summary = {**own, "previous_threshold": 0.5, "target_fpr": 0.05, "confidence": 0.95, "false_positives": 3}
    summary |= {"input": "in|put", "date": "today", "by_category": {"a|b": own, "<b>x</b>": own}}
    text = calibration_report(summary, "model.onnx", Path("out.onnx"))
    assert "| a\\|b | 0.5 |" in text and "| \\<b\\>x\\</b\\> | 0.5 |" in text and "from in\\|put" in text


def test_a_detector_whose_scores_stop_under_1_is_refused_where_its_threshold_would_flag_nothing(tmp_path, monkeypatch):
    """splicebuster's maps are clipped: on photos where it finds two classes it gives its top score,
    and a threshold above that flags no image at all (calibrated, it said TNR 1.0 and flagged nothing)."""
    import inference.recalibration
    from detectors.registry import create_module
    from tools.released import save_checkpoint

    module = create_module("splicebuster")
    top = np.float32(module.net.score_ceiling)
    scores = np.concatenate([np.linspace(0.1, 0.9, 28), np.full(42, top)]).astype(np.float32)
    with pytest.raises(CalibrationRefused, match="42 of 70 genuine images score 0.99989\\d*, the highest score the"):
        recalibrate(scores, target_fpr=0.05, ceiling=float(top))
    assert recalibrate(scores, target_fpr=0.05)["threshold"] > top  # what a ceiling of 1 let through
    model = save_checkpoint(module, tmp_path / "splicebuster.ckpt")
    write_images(tmp_path / "photos", [(96, 96)])
    # calibrate.py reads the ceiling from the model: every photo at the top score, as on the audit's
    monkeypatch.setattr(inference.recalibration, "score_for_calibration", lambda *a: ([{"score": top}] * 60, []))
    with pytest.raises(CalibrationRefused, match="60 of 60 genuine images score 0.99989\\d*, the highest"):
        calibrate_model(str(model), str(tmp_path / "photos"), tmp_path / "c.ckpt", target_fpr=0.05, progress=False)


def test_tiles_calibrate_on_tiled_scores_and_infer_says_when_it_scores_otherwise(
    tiny_model, manifest, tmp_path, caplog
):
    from omegaconf import OmegaConf

    from datamodules.layouts import records_from_input
    from infer import scoring_as_asked
    from inference.scoring import score_records
    from inference.tiling import TiledRuntime
    from inference.writer import ResultWriter, read_results

    output = tmp_path / "tiled.ckpt"
    tiles = {"tiles": True, "tile_reduce": "max"}
    record = calibrate_model(
        str(tiny_model["ckpt"]), str(manifest), output, target_fpr=0.1, num_workers=0, progress=False, tiles=tiles
    )
    asked = {"tiles": True, "tile_reduce": "max", "tile_size": None, "tile_overlap": 0.25}
    assert record["scoring"] == asked and TorchRuntime(output, "cpu").calibrated_tiles == asked
    with ResultWriter(tmp_path / "direct.csv") as writer:  # the images are wider than the 32 px crop: 2 tiles
        score_records(
            TiledRuntime(TorchRuntime(tiny_model["ckpt"], "cpu"), "max"), records_from_input(manifest), writer
        )
    direct = {r["path"]: r["score"] for r in read_results(tmp_path / "direct.csv")}
    calibrated = read_results(tmp_path / "tiled.calibration_scores.csv")
    assert [r["score"] for r in calibrated] == pytest.approx([direct[r["path"]] for r in calibrated], abs=1e-7)

    def warned(*options: str) -> bool:
        caplog.clear()
        cfg = OmegaConf.merge(OmegaConf.load(ROOT / "configs" / "infer.yaml"), OmegaConf.from_dotlist(list(options)))
        with caplog.at_level("WARNING"):
            scoring_as_asked(cfg, TorchRuntime(output, "cpu"))
        return "calibrated on scores made with tiles (tile_reduce=max" in caplog.text

    assert not warned("tiles=true", "tile_reduce=max")
    assert warned("tiles=false") and warned("tiles=true", "tile_reduce=mean")
    assert not warned("tiles=false", "threshold=0.5")  # a threshold of the user's own


def test_recalibrating_an_onnx_model_without_a_sidecar_writes_the_outputs_sidecar(tiny_model, manifest, tmp_path):
    """The output had none: the Node example and other services reading the sidecar could not use it."""
    assert not tiny_model["onnx"].with_suffix(".json").exists()
    output = tmp_path / "calibrated.onnx"
    record = calibrate_model(str(tiny_model["onnx"]), str(manifest), output, target_fpr=0.1, progress=False)
    sidecar = json.loads(output.with_suffix(".json").read_text())
    assert sidecar["threshold"] == pytest.approx(record["threshold"]) and sidecar["target_fpr"] == 0.1
    assert sidecar["calibration"] == record and sidecar["input"] == "image" and sidecar["detector"] == "npr"
    assert not list(tmp_path.glob(".*partial*"))


def test_recalibrating_keeps_what_the_models_sidecar_says_beyond_its_metadata(tiny_model, manifest, tmp_path):
    import onnx

    from exporting.variants import write_sidecar

    model = tmp_path / "exported.onnx"
    model.write_bytes(tiny_model["onnx"].read_bytes())
    write_sidecar(model, onnx.load(str(model)), {"precision": "fp32", "export_report": {"precision": "fp32"}})
    output = tmp_path / "calibrated.onnx"
    record = calibrate_model(str(model), str(manifest), output, target_fpr=0.1, progress=False)
    sidecar = json.loads(output.with_suffix(".json").read_text())
    assert sidecar["export_report"] == {"precision": "fp32"} and sidecar["threshold"] == pytest.approx(
        record["threshold"]
    )
