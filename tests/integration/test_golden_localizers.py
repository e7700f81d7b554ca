"""Released-weight localizers against outputs of their authors' own code (golden data).

`tests/data/golden/<family>/` holds, for TruFor and MVSS-Net, a small network with random weights
saved in the authors' key names, an 8-bit PNG, and what the authors' code computed from that PNG
their way (README there). Each test goes the way a user goes: the released-weight loader
(`tools.released`, i.e. the documented key mapping) writes a checkpoint, `infer.py` scores the
PNG, and the map and score must be the authors'. A mapping that loads every tensor into a place of
the same shape but the wrong one (two `kv` projections traded, say) changes the outputs, which a
round trip of names cannot see.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules.geometry import to_network_input
from datamodules.io import read_image
from inference.runtime import load_runtime
from inference.writer import read_results
from tests.integration.test_infer import run_infer
from tools.released import build_released, save_checkpoint

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
# the small configurations the golden networks were built with (README of each family)
SMALL = json.loads((GOLDEN / "small_configs.json").read_text())
TRUFOR_SMALL, MVSS_SMALL = SMALL["trufor"]["overrides"], SMALL["mvss"]["overrides"]
# float32 summation order: measured 7.7e-7 (TruFor), 8e-8 (MVSS-Net) on one thread
FLOAT_TOLERANCE = 1e-5
HALF_LEVEL = 0.5 / 255  # infer.py writes maps as round(255 p)


def released_checkpoint(detector: str, weights: Path, overrides: list[str], folder: Path) -> Path:
    module = build_released(detector, [f"net.pretrained={weights}", *overrides])
    return save_checkpoint(module, folder / f"{detector}_golden.ckpt")


def float_outputs(checkpoint: Path, image: Path, confidence: bool = False) -> dict[str, np.ndarray]:
    """What the runtime infer.py builds from the checkpoint gives for the PNG decoded as infer.py
    decodes it."""
    runtime = load_runtime(checkpoint, "cpu")
    runtime.confidence_maps = confidence
    pixels = read_image(image)
    return {k: v[0] for k, v in runtime.predict(to_network_input([pixels])).items()}


def infer_outputs(checkpoint: Path, image: Path, folder: Path) -> tuple[float, np.ndarray]:
    """Score and 8-bit map (as 0..1) that `infer.py save_masks=true` writes for the PNG."""
    run_infer(checkpoint, image, folder / "scores.csv", "save_masks=true", "device=cpu")
    row = read_results(folder / "scores.csv")[0]
    assert row["status"] == "ok", row
    mask = Path(row["mask"]) if Path(row["mask"]).is_absolute() else folder / row["mask"]
    return float(row["score"]), np.asarray(Image.open(mask), dtype=np.float64) / 255


@pytest.fixture(scope="module")
def trufor(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("trufor_golden")
    data = GOLDEN / "trufor"
    checkpoint = released_checkpoint("trufor", data / "trufor_small.pth.tar", TRUFOR_SMALL, folder)
    return {
        "checkpoint": checkpoint,
        "image": data / "input.png",
        "authors": dict(np.load(data / "authors_outputs.npz")),
        "folder": folder,
    }


@pytest.fixture(scope="module")
def mvss(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("mvss_golden")
    data = GOLDEN / "mvss"
    checkpoint = released_checkpoint("mvss", data / "mvss_small.pt", MVSS_SMALL, folder)
    return {
        "checkpoint": checkpoint,
        "image": data / "input.png",
        "authors": dict(np.load(data / "authors_outputs.npz")),
        "folder": folder,
    }


def test_trufor_released_weights_give_the_authors_map_confidence_and_score(trufor):
    authors = trufor["authors"]
    ours = float_outputs(trufor["checkpoint"], trufor["image"], confidence=True)
    assert ours["mask"].shape[-2:] == authors["map"].shape == (52, 76)
    assert np.abs(ours["mask"][0] - authors["map"]).max() <= FLOAT_TOLERANCE
    assert np.abs(ours["confidence"][0] - authors["conf"]).max() <= FLOAT_TOLERANCE
    assert abs(float(ours["score"]) - float(authors["score"])) <= FLOAT_TOLERANCE


def test_trufor_infer_py_writes_the_map_and_score_of_the_authors_test_script(trufor):
    """Their loader divides 8-bit pixels by 256: with 255 the map is off by up to 0.015 here."""
    score, saved_map = infer_outputs(trufor["checkpoint"], trufor["image"], trufor["folder"])
    assert abs(score - float(trufor["authors"]["score"])) <= FLOAT_TOLERANCE
    assert np.abs(saved_map - trufor["authors"]["map"]).max() <= HALF_LEVEL + FLOAT_TOLERANCE


def test_mvss_released_weights_give_the_authors_mask_logits_and_score(mvss):
    authors = mvss["authors"]
    ours = float_outputs(mvss["checkpoint"], mvss["image"])
    logits = np.log(ours["mask"][0]) - np.log1p(-ours["mask"][0])
    probability = 1 / (1 + np.exp(-authors["mask_logit"].astype(np.float64)))
    assert ours["mask"].shape[-2:] == authors["mask_logit"].shape == (48, 64)
    assert np.abs(ours["mask"][0] - probability).max() <= FLOAT_TOLERANCE
    assert np.abs(logits - authors["mask_logit"]).max() <= 1e-3  # logits from float32 probabilities
    assert abs(float(ours["score"]) - float(authors["score"])) <= FLOAT_TOLERANCE


def test_mvss_released_weights_give_the_authors_edge_logits(mvss):
    """The edge branch feeds no map or score, only fine-tuning: compared at its own 1/4 scale."""
    net = load_runtime(mvss["checkpoint"], "cpu").net
    image = torch.from_numpy(to_network_input([read_image(mvss["image"])]))
    with torch.no_grad():
        edge = net.coarse_logits(image)["edge"][0, 0].numpy()
    assert edge.shape == mvss["authors"]["edge_logit_quarter"].shape == (12, 16)
    # logits up to about 150, where float32 summation order moves a few ulps: 7.6e-5 seen on one CPU
    np.testing.assert_allclose(edge, mvss["authors"]["edge_logit_quarter"], rtol=FLOAT_TOLERANCE, atol=FLOAT_TOLERANCE)


def test_mvss_infer_py_map_differs_from_the_authors_png_by_their_truncation_only(mvss):
    """Their inference writes floor(255 p) (ToPILImage of a float map), infer.py round(255 p): the
    saved maps differ by one level where the fraction of 255 p is at least one half, nowhere
    else."""
    authors = mvss["authors"]
    score, saved_map = infer_outputs(mvss["checkpoint"], mvss["image"], mvss["folder"])
    probability = 1 / (1 + np.exp(-authors["mask_logit"].astype(np.float64)))
    assert abs(score - float(authors["score"])) <= FLOAT_TOLERANCE
    assert np.abs(saved_map - probability).max() <= HALF_LEVEL + FLOAT_TOLERANCE
    levels = np.rint(saved_map * 255).astype(int) - authors["map_uint8"].astype(int)
    assert set(np.unique(levels)) <= {0, 1}
    clear = np.abs(probability * 255 % 1 - 0.5) > 1e-3  # float rounding decides ties
    assert np.array_equal(levels[clear] == 1, (probability * 255 % 1 >= 0.5)[clear])
