"""`pairnet_tiny` trained through train.py on generated duplication pairs, calibrated on the
validation pairs that share nothing, measured by the pair protocol, and scored by infer.py; the
slow check: a short run ranks held-out pairs above chance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import hydra
import numpy as np
import pytest
import torch

from datamodules.io import read_image, read_mask, write_image
from evaluation import calibrate_threshold
from infer import infer
from inference.runtime import load_detector
from inference.writer import read_results
from synthesis.duplication import global_duplication
from synthesis.pair_set import load_photos
from tests.helpers import compose_config, prepare_train_config
from train import train

PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "camera.png", "flower.jpg")
FEW_PAIRS = [
    f"data.pair_sets.{key}"
    for key in ("positives_per_photo=2", "negatives_per_photo=2", "figure_pairs=1", "train_rounds=1")
]


pytestmark = pytest.mark.slow  # every test here starts from one train.py run (about a minute on 2 cores)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """Six bundled photos at 200 px (a handful of pairs per split, generated in a second)."""
    folder = tmp_path_factory.mktemp("photos")
    for name, image in load_photos().items():
        if name in PHOTOS:
            factor = 200 / max(image.shape[:2])
            size = (round(image.shape[1] * factor), round(image.shape[0] * factor))
            write_image(folder / f"{Path(name).stem}.png", cv2.resize(image, size, interpolation=cv2.INTER_AREA))
    return folder


def train_overrides(photos: Path | None, *extra: str) -> list[str]:
    """pairnet_tiny on generated pairs (from `photos`, or the bundled photos with None), on CPU."""
    return [
        "detector=pairnet_tiny",
        "data=duplication_pair_images",
        f"data.pair_sets.photos={photos or 'null'}",
        "data.batch_size=8",
        "trainer=cpu",
        "trainer.enable_progress_bar=false",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(photos, tmp_path_factory) -> tuple[Path, dict]:
    run = tmp_path_factory.mktemp("run")
    cfg = prepare_train_config(train_overrides(photos, *FEW_PAIRS, "trainer.max_epochs=1"), run)
    return run, train(cfg)


def test_train_py_trains_calibrates_tests_and_measures_the_pair_protocol(trained):
    run, metrics = trained
    assert (run / "checkpoints" / "best.ckpt").is_file() and (run / "report.md").is_file()
    written = json.loads((run / "metrics.json").read_text())
    assert written["detector"] == "pairnet_tiny" and written["n_pos"] >= 1 and written["n_neg"] >= 1
    pairs = written["duplication"]
    assert pairs["n_pairs"] == written["n_pos"] + written["n_neg"]
    assert pairs["operations"]["n"] == written["n_pos"] and 0 <= pairs["operations"]["set_f1"] <= 1
    assert set(pairs["by_operation"]) == {"direct", "scaling", "rotation", "flip", "parameter"}
    assert "pixel_f1_pooled" in pairs and pairs["threshold"] == pytest.approx(written["threshold"])
    # the heads alone: every duplicated pair read as if judged duplicated
    assert pairs["given_duplicated"]["operations"]["n"] == written["n_pos"] and "pixel_f1" in pairs["given_duplicated"]


def test_the_threshold_is_calibrated_on_the_validation_pairs_that_share_nothing(trained, photos):
    run, metrics = trained
    loaded = load_detector(run / "checkpoints" / "best.ckpt")
    cfg = prepare_train_config(train_overrides(photos, *FEW_PAIRS), run / "again")
    data = hydra.utils.instantiate(cfg.data, preprocess=loaded.net.preprocess.to_dict(), _convert_="all")
    data.setup()
    scores, labels = [], []
    with torch.inference_mode():
        for batch in data.val_dataloader():
            scores.append(torch.sigmoid(loaded.net(*loaded.net.batch_inputs(batch))["logit"]))
            labels.append(batch["label"])
    scores, labels = torch.cat(scores).numpy(), torch.cat(labels).numpy()
    assert loaded.threshold == pytest.approx(calibrate_threshold(scores[labels == 0], 0.01), abs=1e-6)
    assert metrics["calibration"]["n_genuine"] == int((labels == 0).sum())


def test_infer_py_scores_a_pair_manifest_with_rows_operations_and_masks(trained, photos, tmp_path):
    run, _ = trained
    coffee = read_image(photos / "coffee.png")
    copy = global_duplication(coffee, np.random.default_rng(0), geometric="hflip", parameters=[])
    write_image(tmp_path / "a.png", coffee)
    write_image(tmp_path / "b.png", copy.panel_b)
    write_image(tmp_path / "mask.png", copy.mask_a.astype(np.uint8) * 255)
    (tmp_path / "pairs.csv").write_text(
        "path_a,path_b,operations,mask_a,mask_b\na.png,b.png,hflip,mask.png,mask.png\n"
        f"a.png,{photos / 'camera.png'},,,\na.png,missing.png,,,\n"
    )
    output = tmp_path / "scores.csv"
    overrides = [f"model={run / 'checkpoints' / 'best.ckpt'}", f"input={tmp_path / 'pairs.csv'}", f"output={output}"]
    result = infer(compose_config("infer", [*overrides, "progress=false", "threshold=0.0"]))
    rows = {Path(r["path_b"]).name: r for r in read_results(output)}
    assert rows["missing.png"]["status"] == "error" and "missing.png" in rows["missing.png"]["error"]
    flagged = rows["b.png"]
    assert flagged["status"] == "ok" and flagged["method"] == "pairnet" and int(flagged["label"]) == 1
    assert flagged["operations"] and read_mask(flagged["mask_b"]).shape == coffee.shape[:2]
    assert result["metrics"]["operations"]["n"] == 1 and "pixel_f1" in result["metrics"]


# the ONNX export takes minutes on two busy cores
def test_infer_py_scores_pairs_alike_from_the_checkpoint_and_its_onnx_export(trained, photos, tmp_path):
    from onnx import load as load_onnx

    from exporting.onnx_export import export_onnx
    from inference.runtime import load_checkpoint

    run, _ = trained
    onnx = export_onnx(load_checkpoint(run / "checkpoints" / "best.ckpt"), tmp_path / "pairnet.onnx").path
    metadata = {p.key: p.value for p in load_onnx(str(onnx)).metadata_props}
    assert json.loads(metadata["preprocess"])["interpolation"] == "area"  # panels are resized by pixel area
    rows = {}
    for model in (run / "checkpoints" / "best.ckpt", onnx):
        output = tmp_path / f"{model.suffix[1:]}.csv"
        infer(compose_config("infer", [f"model={model}", f"input={photos}", f"output={output}", "progress=false"]))
        rows[model.suffix] = {r["path"]: r for r in read_results(output)}
    assert rows[".ckpt"].keys() == rows[".onnx"].keys() and len(rows[".ckpt"]) == 15  # all pairs of 6 panels
    threshold = load_detector(run / "checkpoints" / "best.ckpt").threshold
    for key, row in rows[".ckpt"].items():
        exported = rows[".onnx"][key]
        assert float(exported["score"]) == pytest.approx(float(row["score"]), abs=1e-4)
        if abs(float(row["score"]) - threshold) > 1e-3:  # the same decision away from the threshold
            assert exported["label"] == row["label"]


# about 10 minutes on two busy cores
def test_a_short_run_ranks_held_out_pairs_above_chance(tmp_path):
    extra = [
        "data.pair_sets.positives_per_photo=4",
        "data.pair_sets.negatives_per_photo=4",
        "data.pair_sets.figure_pairs=4",
        "data.pair_sets.train_rounds=2",
        "data.batch_size=16",
        "trainer.max_epochs=3",
    ]
    metrics = train(prepare_train_config(train_overrides(None, *extra), tmp_path))
    n_pos, n_neg = metrics["n_pos"], metrics["n_neg"]
    bar = 0.5 + 2.0 * math.sqrt((n_pos + n_neg + 1) / (12.0 * n_pos * n_neg))  # Mann-Whitney null, 2 sd
    assert n_pos >= 20 and n_neg >= 20
    assert metrics["auroc"] > bar, f"held-out pair AUROC {metrics['auroc']:.3f} <= chance bar {bar:.3f}"
