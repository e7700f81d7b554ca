"""Localizers export with a dynamic batch, height and width; infer.py gives the same rows and maps
with the .ckpt and the .onnx; an export whose map drifts from PyTorch is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from PIL import Image

from exporting.onnx_export import ExportError, export_onnx
from inference.runtime import load_checkpoint
from inference.writer import read_results
from tests.integration.test_infer import run_infer
from tests.localization_helpers import save_untrained_checkpoint


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    save_untrained_checkpoint(folder / "seg_tiny.ckpt")
    module = load_checkpoint(folder / "seg_tiny.ckpt")
    report = export_onnx(module, folder / "seg_tiny.onnx")
    return folder, module, report


@pytest.mark.slow  # exports and compares a localizer at several sizes (~10 s)
def test_mask_output_has_dynamic_batch_height_and_width_and_matches_pytorch(exported):
    folder, module, report = exported
    assert report.outputs == ["score", "mask"]
    assert report.max_score_difference <= 1e-4 and report.max_mask_difference <= 1e-3
    assert len({shape[2:] for shape in report.checked_shapes}) == 2  # two different input sizes
    session = ort.InferenceSession(str(folder / "seg_tiny.onnx"), providers=["CPUExecutionProvider"])
    image = torch.rand(2, 3, 41, 97)
    score, mask = session.run(["score", "mask"], {"image": image.numpy()})
    with torch.no_grad():
        expected = torch.sigmoid(module.net(image)["mask_logit"]).numpy()
    assert mask.shape == (2, 1, 41, 97) and score.shape == (2,)
    assert np.abs(mask - expected).max() <= 1e-3
    # what a service must feed: each image whole, as infer.py does; tiles are cut at the trained size
    metadata = session.get_modelmeta().custom_metadata_map
    assert json.loads(metadata["preprocess"])["mode"] == "none" and json.loads(metadata["preprocess"])["size"] is None
    assert json.loads(metadata["trained_preprocess"]) == module.net.preprocess.to_dict()


@pytest.mark.slow  # scores with both runtimes: about a minute on a shared CPU
def test_infer_gives_the_same_rows_and_maps_with_ckpt_and_onnx(exported, tmp_path):
    folder, _, _ = exported
    rng = np.random.default_rng(1)
    images = tmp_path / "images"
    images.mkdir()
    for name, size in {"a.png": (50, 70), "b.png": (64, 33), "c.png": (80, 80)}.items():
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(images / name)
    rows = {}
    for suffix in ("ckpt", "onnx"):
        output = tmp_path / f"{suffix}.csv"
        run_infer(folder / f"seg_tiny.{suffix}", images, output, "save_masks=true")
        rows[suffix] = {Path(r["path"]).name: r for r in read_results(output)}
    assert rows["ckpt"].keys() == rows["onnx"].keys() == {"a.png", "b.png", "c.png"}
    for name, row in rows["ckpt"].items():
        other = rows["onnx"][name]
        assert row["status"] == other["status"] == "ok" and row["label"] == other["label"]
        assert row["score"] == pytest.approx(other["score"], abs=1e-4)
        a, b = (np.asarray(Image.open(r["mask"])).astype(int) for r in (row, other))
        assert a.shape == b.shape and np.abs(a - b).max() <= 1  # 8-bit maps: 1e-3 is at most one level


@pytest.mark.slow  # a second export
def test_export_is_refused_when_the_map_drifts(exported, tmp_path):
    _, module, _ = exported
    with pytest.raises(ExportError, match=r"max \|difference\| mask"):
        export_onnx(module, tmp_path / "strict.onnx", map_tolerance=-1.0)
    assert not (tmp_path / "strict.onnx").exists()
