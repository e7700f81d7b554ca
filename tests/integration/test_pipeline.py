"""End to end on tiny data: generate -> train -> infer (.ckpt) -> export -> infer (.onnx); resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from datamodules.records import read_manifest
from exporting.onnx_export import ExportError, export_onnx
from infer import infer
from inference.runtime import ModelLoadError, load_checkpoint
from inference.writer import read_results
from tests.helpers import ROOT, compose_config, prepare_train_config, small_train_overrides
from train import train

METRIC_KEYS = {
    "auroc",
    "pauroc@0.1",
    "ap",
    "tpr@fpr=0.001",
    "tpr@fpr=0.01",
    "tpr@fpr=0.05",
    "tpr@fpr=0.1",
    "tpr",
    "tnr",
    "balanced_accuracy",
    "f1",
    "n_pos",
    "n_neg",
}


def infer_config(model: Path, input: Path, output: Path, *extra: str):
    return compose_config(
        "infer",
        [
            f"model={model}",
            f"input={input}",
            f"output={output}",
            "num_workers=0",
            "progress=false",
            "batch_size=16",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, small_dataset):
    """One short training run shared by the tests of this module."""
    run = tmp_path_factory.mktemp("run")
    cfg = prepare_train_config(
        [*small_train_overrides(small_dataset), "trainer.max_epochs=2", "detector.optimizer.lr=2e-3"], run
    )
    return run, train(cfg), cfg


def test_training_writes_checkpoints_metrics_and_resolved_config(trained_run):
    run, metrics, _ = trained_run
    for name in (
        "checkpoints/best.ckpt",
        "checkpoints/last.ckpt",
        "metrics.json",
        "config.yaml",
        "report.md",
        "roc.png",
        "score_histogram.png",
    ):
        assert (run / name).is_file(), name
    written = json.loads((run / "metrics.json").read_text())
    assert METRIC_KEYS <= set(written) and METRIC_KEYS <= set(written["val"])
    assert written["n_pos"] > 0 and written["n_neg"] > 0
    generators = set(written["by_group"])
    assert generators and generators <= {
        "rerender_nearest",
        "rerender_bilinear",
        "rerender_bicubic",
        "rerender_lanczos",
    }
    assert written["intervals"]["auroc"][0] <= written["auroc"] <= written["intervals"]["auroc"][1]
    assert 0.0 < written["threshold"] < 1.0
    assert "${" not in (run / "config.yaml").read_text()  # resolved


def test_metrics_and_report_say_how_far_the_calibration_can_be_trusted(trained_run, small_dataset):
    run, _, _ = trained_run
    written = json.loads((run / "metrics.json").read_text())
    calibration = written["calibration"]
    val_genuine = sum(r.label == 0 and r.split == "val" for r in read_manifest(small_dataset))
    assert calibration["n_genuine"] == val_genuine > 0
    low, high = calibration["fpr_interval"]
    assert 0.0 <= low <= calibration["fpr"] <= high <= 1.0
    # a tiny validation split cannot support a 1 % target: said in metrics.json and report.md
    assert val_genuine < 299 and not calibration["sufficient"] and str(val_genuine) in calibration["warning"]
    report = (run / "report.md").read_text()
    assert "Clopper-Pearson" in report and "Warning" in report


def test_the_reported_calibration_is_the_tested_checkpoints(trained_run):
    """metrics.json describes the threshold the test used (the best checkpoint's), not whichever
    validation epoch ran last: the check is saved with the weights and restored with them."""
    run, metrics, _ = trained_run
    best = torch.load(run / "checkpoints/best.ckpt", map_location="cpu", weights_only=True)
    last = torch.load(run / "checkpoints/last.ckpt", map_location="cpu", weights_only=True)
    assert best["calibration"] == metrics["calibration"]
    assert last["calibration"]["n_genuine"] == best["calibration"]["n_genuine"] > 0
    assert float(best["state_dict"]["threshold"]) == pytest.approx(metrics["threshold"])


def test_checkpoint_loads_without_hydra_and_keeps_the_calibrated_threshold(trained_run):
    run, metrics, _ = trained_run
    module = load_checkpoint(run / "checkpoints" / "best.ckpt")
    assert float(module.threshold) == pytest.approx(metrics["threshold"])
    assert module.net.preprocess.size == 64


@pytest.mark.slow
@pytest.mark.ci  # in CI's slow phase (the ONNX scoring path test checks the same parity in the default run)
def test_ckpt_and_onnx_score_identically_through_infer(trained_run, small_dataset, tmp_path):
    run, _, _ = trained_run
    best = run / "checkpoints" / "best.ckpt"
    from_ckpt = infer(infer_config(best, small_dataset, tmp_path / "ckpt.csv"))
    report = export_onnx(load_checkpoint(best), tmp_path / "model.onnx")
    assert report.max_score_difference <= 1e-4
    model = onnx.load(str(tmp_path / "model.onnx"))
    metadata = {p.key: p.value for p in model.metadata_props}
    assert {"detector", "toolkit_version", "preprocess", "threshold", "outputs"} <= set(metadata)
    assert json.loads(metadata["preprocess"])["size"] == 64
    assert [i.name for i in model.graph.input] == ["image"] and [o.name for o in model.graph.output] == ["score"]
    from_onnx = infer(infer_config(tmp_path / "model.onnx", small_dataset, tmp_path / "onnx.jsonl", "batch_size=7"))

    ckpt_rows = {r["path"]: r for r in read_results(tmp_path / "ckpt.csv")}
    onnx_rows = {r["path"]: r for r in read_results(tmp_path / "onnx.jsonl")}
    assert set(ckpt_rows) == set(onnx_rows) == {r.path for r in read_manifest(small_dataset)}
    differences = [abs(ckpt_rows[p]["score"] - onnx_rows[p]["score"]) for p in ckpt_rows]
    assert max(differences) <= 1e-4
    assert from_ckpt["metrics"]["auroc"] == pytest.approx(from_onnx["metrics"]["auroc"], abs=1e-3)
    assert (tmp_path / "ckpt.metrics.json").is_file() and (tmp_path / "onnx.metrics.json").is_file()


@pytest.mark.slow  # three export processes (~60 s)
def test_export_command_line_and_exit_codes(trained_run, tmp_path):
    """`python export.py model=... output=...` as the README shows it: exit 0 and a file carrying the
    checkpoint's threshold; exit 1 with the reason (and no file) for a missing checkpoint or a parity
    failure."""
    run, _, _ = trained_run
    last = run / "checkpoints" / "last.ckpt"

    def export(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "export.py"), *args], capture_output=True, text=True, cwd=tmp_path, timeout=600
        )

    done = export(f"model={last}", "output=shipped/model.onnx")
    assert done.returncode == 0, done.stdout + done.stderr
    model = onnx.load(str(tmp_path / "shipped" / "model.onnx"))
    metadata = {p.key: p.value for p in model.metadata_props}
    assert float(metadata["threshold"]) == pytest.approx(float(load_checkpoint(last).threshold))
    missing = export(f"model={tmp_path / 'nope.ckpt'}", "output=missing.onnx")
    assert missing.returncode == 2 and "does not exist" in missing.stdout + missing.stderr
    strict = export(f"model={last}", "output=strict.onnx", "tolerance=-1")
    assert strict.returncode == 2 and "parity failed" in strict.stdout + strict.stderr
    assert not (tmp_path / "missing.onnx").exists() and not (tmp_path / "strict.onnx").exists()


@pytest.mark.slow
@pytest.mark.ci  # in CI's slow phase: keeps the default run under 5 minutes
def test_export_refuses_a_model_that_onnx_cannot_reproduce(trained_run, tmp_path):
    module = load_checkpoint(trained_run[0] / "checkpoints" / "last.ckpt")
    with pytest.raises(ExportError, match="parity failed"):
        export_onnx(module, tmp_path / "strict.onnx", tolerance=-1.0)
    assert not (tmp_path / "strict.onnx").exists()


def test_untrusted_checkpoints_do_not_run_code(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("code ran",))

    torch.save({"state_dict": {}, "hyper_parameters": {"net": Payload()}}, tmp_path / "evil.ckpt")
    with pytest.raises(ModelLoadError, match="refusing to load"):
        load_checkpoint(tmp_path / "evil.ckpt")
    torch.save(
        {"state_dict": {}, "hyper_parameters": {"net": {"_target_": "os.system", "command": "true"}}},
        tmp_path / "target.ckpt",
    )
    with pytest.raises(ModelLoadError, match="refusing to build"):
        load_checkpoint(tmp_path / "target.ckpt")


def test_tiled_scoring_averages_native_tiles_covering_the_whole_image(trained_run, tmp_path):
    from PIL import Image

    from inference.runtime import TorchRuntime
    from inference.tiling import TiledRuntime, tile_image, tile_positions

    assert tile_positions(150, 64) == [0, 64, 86] and tile_positions(40, 64) == [0]
    pixels = np.random.default_rng(0).integers(0, 256, (100, 150, 3), dtype=np.uint8)
    (tmp_path / "big").mkdir()
    Image.fromarray(pixels).save(tmp_path / "big" / "photo.png")
    best = trained_run[0] / "checkpoints" / "best.ckpt"
    run = infer(infer_config(best, tmp_path / "big", tmp_path / "tiled.csv", "tiles=true"))
    assert run["counts"]["ok"] == 1
    score = read_results(tmp_path / "tiled.csv")[0]["score"]

    image = pixels.transpose(2, 0, 1).astype(np.float32) / 255
    tiles = tile_image(image, 64)
    assert tiles.shape == (2 * 3, 3, 64, 64)
    np.testing.assert_array_equal(tiles[-1], image[:, 36:100, 86:150])
    tile_scores = TorchRuntime(best, "cpu").predict(tiles)["score"]
    assert score == pytest.approx(float(tile_scores.mean()), abs=1e-6)
    infer(infer_config(best, tmp_path / "big", tmp_path / "tiled_max.csv", "tiles=true", "tile_reduce=max"))
    highest = read_results(tmp_path / "tiled_max.csv")[0]["score"]
    assert highest == pytest.approx(float(tile_scores.max()), abs=1e-6) and tile_scores.max() > tile_scores.mean()
    with pytest.raises(ModelLoadError, match="tile_reduce"):
        TiledRuntime(TorchRuntime(best, "cpu"), reduce="median")
