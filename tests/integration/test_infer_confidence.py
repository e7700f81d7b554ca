"""infer.py with TruFor: `save_confidence=true` writes the reliability map beside the mask, at the
original size, from the .ckpt and from the exported .onnx alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from detectors.registry import net_config
from inference.writer import read_results
from tests.integration.test_infer import run_infer
from tests.localization_helpers import save_untrained_checkpoint

SIZES = {"wide.png": (45, 70), "tall.png": (90, 37)}


@pytest.fixture(scope="module")
def trufor(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trufor")
    net = net_config("trufor_tiny")
    module = save_untrained_checkpoint(folder / "trufor_tiny.ckpt", net=net)
    return folder / "trufor_tiny.ckpt", module


@pytest.fixture
def images(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    folder = tmp_path / "images"
    folder.mkdir()
    for name, (h, w) in SIZES.items():
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / name)
    return folder


def test_confidence_maps_are_written_beside_the_masks(trufor, images, tmp_path):
    checkpoint, module = trufor
    output = tmp_path / "out" / "scores.csv"
    result = run_infer(checkpoint, images, output, "save_masks=true", "save_confidence=true")
    assert result["counts"]["ok"] == len(SIZES)
    for row in read_results(output):
        saved = Path(row["confidence"])
        assert saved.parent == tmp_path / "out" / "scores_masks" / "confidence" and Path(row["mask"]).is_file()
        pixels = np.asarray(Image.open(saved))
        name = Path(row["path"]).name
        assert pixels.shape == SIZES[name]
        image = torch.from_numpy(np.array(Image.open(images / name))).permute(2, 0, 1)[None].float() / 255
        with torch.no_grad():
            expected = torch.sigmoid(module.net(image)["confidence_logit"])[0, 0].numpy() * 255
        assert np.abs(pixels.astype(np.float32) - expected).max() <= 0.5 + 1e-3


def test_without_the_option_no_confidence_column(trufor, images, tmp_path):
    checkpoint, _ = trufor
    output = tmp_path / "scores.csv"
    run_infer(checkpoint, images, output, "save_masks=true")
    assert all("confidence" not in row for row in read_results(output))
    assert not (tmp_path / "scores_masks" / "confidence").exists()
