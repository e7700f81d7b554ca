"""The `.onnx` scoring path: torch-free preprocessing identical to the training pipeline's, threaded
batches in input order, and an `infer.py` run that never imports torch or Lightning."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from datamodules.geometry import eval_geometry, to_network_input
from datamodules.transforms import build_transform, to_tensor
from infer import infer
from inference.batches import iter_batches
from inference.writer import read_results
from tests.helpers import ROOT, compose_config, write_images, write_tiny_model

SHAPES = [(45, 71), (32, 32), (31, 33), (100, 20), (7, 9), (64, 64)]


@pytest.mark.parametrize("mode", ["center_crop", "pad", "resize", "resize_crop", "tile", "none"])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic", "area", "lanczos"])
@pytest.mark.parametrize("size", [32, 33])
def test_numpy_geometry_is_pixel_identical_to_the_albumentations_eval_transform(mode, interpolation, size):
    preprocess = {"size": None if mode == "none" else size, "mode": mode, "interpolation": interpolation}
    reference, ours = build_transform(preprocess, train=False), eval_geometry(preprocess)
    rng = np.random.default_rng(size)
    for shape in SHAPES:
        image = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
        np.testing.assert_array_equal(ours(image), reference(image=image)["image"], err_msg=f"{mode} {shape}")


def test_network_input_is_bit_identical_to_stacked_to_tensor():
    images = [np.random.default_rng(i).integers(0, 256, (9, 11, 3), dtype=np.uint8) for i in range(3)]
    ours = to_network_input(images)
    expected = np.stack([to_tensor(image).numpy() for image in images])
    assert ours.dtype == np.float32 and ours.shape == (3, 3, 9, 11)
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("workers", [0, 3])
def test_threaded_batches_keep_input_order_and_report_unreadable_files(tmp_path, workers):
    paths = write_images(tmp_path, [(20 + i, 30) for i in range(7)])
    paths[2].write_bytes(b"not an image")
    items = list(enumerate(map(str, paths)))
    geometry = eval_geometry({"size": 16, "mode": "center_crop"})
    batches = list(iter_batches(items, geometry, batch_size=3, workers=workers, read_ahead=1))
    assert [len(b["path"]) + len(b["errors"]) for b in batches] == [3, 3, 1]
    assert batches[0]["errors"] == [(str(paths[2]), "not a recognised image format (or the file is corrupt)")]
    assert [i for b in batches for i in b["index"]] == [0, 1, 3, 4, 5, 6]
    assert batches[1]["size"] == [(23, 30), (24, 30), (25, 30)]
    assert batches[1]["image"].shape == (3, 3, 16, 16) and batches[1]["image"].dtype == np.float32


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny_onnx"))


def test_onnx_run_imports_neither_torch_nor_lightning_and_matches_the_checkpoint(tiny_model, tmp_path):
    write_images(tmp_path / "in", [(40, 50), (32, 32), (70, 21)])
    (tmp_path / "in" / "broken.jpg").write_bytes(b"nope")

    arguments = [f"input={tmp_path / 'in'}", "progress=false", "batch_size=2"]
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            str(ROOT / "infer.py"),
            f"model={tiny_model['onnx']}",
            f"output={tmp_path / 'onnx.csv'}",
            *arguments,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "onnxruntime" in imported and "numpy" in imported  # the import log is what we think it is
    assert not {m for m in imported if m.split(".")[0] in ("torch", "lightning", "albumentations")}
    infer(compose_config("infer", [f"model={tiny_model['ckpt']}", f"output={tmp_path / 'ckpt.csv'}", *arguments]))
    onnx_rows, ckpt_rows = read_results(tmp_path / "onnx.csv"), read_results(tmp_path / "ckpt.csv")
    assert [r["path"] for r in onnx_rows] == [r["path"] for r in ckpt_rows]
    assert [r["status"] for r in onnx_rows].count("error") == 1
    for onnx_row, ckpt_row in zip(onnx_rows, ckpt_rows):
        assert onnx_row["status"] == ckpt_row["status"]
        if onnx_row["status"] == "ok":
            assert onnx_row["score"] == pytest.approx(ckpt_row["score"], abs=1e-5)
