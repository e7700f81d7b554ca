"""The README's second-language example: Node.js with onnxruntime-node scores the same files as
infer.py, reading the model's metadata from the JSON sidecar, without Python.

Runs where `node` and the example's packages are installed (`.ci/run` installs them with
`npm install --ignore-scripts` in examples/node); skipped, with the reason, elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from exporting.variants import build_variant
from infer import infer
from inference.writer import read_results
from tests.helpers import ROOT, compose_config, write_images

EXAMPLE = ROOT / "examples" / "node"
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (EXAMPLE / "node_modules" / "onnxruntime-node").is_dir(),
    reason="needs node and `npm install --ignore-scripts` in examples/node (done by .ci/run)",
)


def test_node_scores_match_python_on_the_same_files(tiny_model, tmp_path):
    model = tmp_path / "model.onnx"
    build_variant(tiny_model["onnx"], model, graph_preprocess=True)
    files = write_images(tmp_path / "files", [(40, 50), (33, 31), (70, 21), (32, 32), (100, 64)])
    (tmp_path / "files" / "broken.png").write_bytes(b"not a png")
    infer(
        compose_config(
            "infer",
            [
                f"model={tiny_model['onnx']}",
                f"input={tmp_path / 'files'}",
                f"output={tmp_path / 'python.csv'}",
                "progress=false",
            ],
        )
    )
    python = {row["path"]: row for row in read_results(tmp_path / "python.csv")}

    done = subprocess.run(
        ["node", str(EXAMPLE / "score.mjs"), str(model), *map(str, files), str(tmp_path / "files" / "broken.png")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["path"] for r in rows[:-1]] == list(map(str, files)) and "error" in rows[-1]
    for row in rows[:-1]:
        assert row["score"] == pytest.approx(python[row["path"]]["score"], abs=1e-5)
        assert row["label"] == python[row["path"]]["label"]


def score_in_node(model, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["node", str(EXAMPLE / "score.mjs"), str(model), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_node_turns_a_phone_jpeg_upright_by_its_exif_orientation_as_python_does(tmp_path):
    from PIL import Image

    from datamodules.io import read_image

    # flat 8 x 8 grey blocks at quality 100: every JPEG decoder gives the same pixels
    blocks = np.random.default_rng(3).integers(0, 256, (5, 12), dtype=np.uint8)
    pixels = Image.fromarray(np.kron(blocks, np.ones((8, 8), np.uint8)), "L")
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        photo = tmp_path / f"turned{orientation}.jpg"
        pixels.save(photo, quality=100, exif=exif)
        seen, upright = decoded_in_node(photo), read_image(photo)
        assert seen.shape == upright.shape and np.array_equal(seen, upright), orientation


def decoded_in_node(path) -> np.ndarray:
    decoded = subprocess.run(
        ["node", "--input-type=module", "-e", DECODE],
        env={**os.environ, "SCRIPT": str(EXAMPLE / "score.mjs"), "PHOTO": str(path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert decoded.returncode == 0, decoded.stderr
    seen = json.loads(decoded.stdout)
    return np.asarray(seen["data"], np.uint8).reshape(seen["dims"][1:])


@pytest.mark.parametrize(
    ("name", "top", "channels"),
    [
        ("grey_12_bit", 4095, 1),
        ("grey_10_bit", 1023, 1),
        ("grey_16_bit", 65535, 1),
        ("rgb_12_bit", 4095, 3),
        ("rgb_16_bit", 65535, 3),
        ("rgba_12_bit", 4095, 4),
    ],
)
def test_node_reads_a_16_bit_png_at_its_own_depth_as_python_does(tmp_path, name, top, channels):
    """pngjs divides every 16-bit file by 257: a 12-bit micrograph came out nearly black."""
    import cv2

    from datamodules.io import read_image

    shape = (7, 9) if channels == 1 else (7, 9, channels)
    stored = np.random.default_rng(top + channels).integers(0, top + 1, shape).astype(np.uint16)
    if channels == 4:  # alpha over the whole 16-bit range
        stored[..., 3] = np.random.default_rng(1).integers(0, 65536, (7, 9))
    path = tmp_path / f"{name}.png"
    cv2.imwrite(str(path), stored if channels == 1 else stored[..., [2, 1, 0, 3][:channels]])
    assert np.array_equal(decoded_in_node(path), read_image(path))


DECODE = """
import { pathToFileURL } from "node:url";
const { decode } = await import(pathToFileURL(process.env.SCRIPT).href);
const tensor = decode(process.env.PHOTO);
console.log(JSON.stringify({ dims: tensor.dims, data: Array.from(tensor.data) }));
"""


def test_node_decides_at_the_threshold_of_the_category_it_is_given(tiny_model, tmp_path):
    model = tmp_path / "model.onnx"
    build_variant(tiny_model["onnx"], model, graph_preprocess=True)
    sidecar = json.loads(model.with_suffix(".json").read_text())
    files = write_images(tmp_path / "files", [(40, 50), (33, 31)])
    plain = score_in_node(model, *files)
    assert plain.returncode == 0 and "leave --category out" in score_in_node(model, "--category", "x", *files).stderr
    calibrated = {**sidecar, "category_thresholds": {"charts": 0.0, "photos": 1.0}}
    model.with_suffix(".json").write_text(json.dumps(calibrated))
    charts = [json.loads(line) for line in score_in_node(model, "--category", "charts", *files).stdout.splitlines()]
    assert [(r["label"], r["threshold"]) for r in charts] == [(1, 0.0), (1, 0.0)]
    assert [json.loads(line)["threshold"] for line in plain.stdout.splitlines()] == [sidecar["threshold"]] * 2
    unknown = score_in_node(model, "--category", "blots", *files)
    assert unknown.returncode == 2 and 'no threshold for category "blots": it knows charts, photos' in unknown.stderr


def test_node_warns_when_the_threshold_was_calibrated_on_tiles_and_still_scores(tiny_model, tmp_path):
    """It scores each image whole: a threshold set on tiled scores (calibrate.py tiles=true) flags otherwise."""
    model = tmp_path / "model.onnx"
    build_variant(tiny_model["onnx"], model, graph_preprocess=True)
    files = write_images(tmp_path / "files", [(40, 50)])
    assert "tiles" not in score_in_node(model, *files).stderr
    sidecar = json.loads(model.with_suffix(".json").read_text())
    scoring = {"tiles": True, "tile_reduce": "mean", "tile_size": None, "tile_overlap": 0.25}
    model.with_suffix(".json").write_text(json.dumps({**sidecar, "calibration": {"scoring": scoring}}))
    done = score_in_node(model, *files)
    assert done.returncode == 0 and [json.loads(line)["path"] for line in done.stdout.splitlines()] == [str(files[0])]
    assert "calibrated on scores over tiles (calibrate.py tiles=true)" in done.stderr
    assert f"python calibrate.py model={model} input=GENUINE_IMAGES" in done.stderr


def test_node_gives_an_image_under_the_sidecars_min_side_an_error_row_as_infer_does(tiny_model, tmp_path):
    """It fed it to the model: onnxruntime's Reshape error, and its log in red on stderr."""
    model = tmp_path / "model.onnx"
    build_variant(tiny_model["onnx"], model, graph_preprocess=True)
    sidecar = json.loads(model.with_suffix(".json").read_text())
    model.with_suffix(".json").write_text(json.dumps({**sidecar, "min_side": 40}))
    small, large = write_images(tmp_path / "files", [(33, 39), (40, 50)])
    done = score_in_node(model, small, large)
    assert done.returncode == 0 and done.stderr == ""
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert rows[0] == {"path": str(small), "error": "npr needs an image of at least 40 px on each side; got 33 x 39"}
    assert rows[1]["path"] == str(large) and "score" in rows[1]


@pytest.mark.parametrize("sidecar", [None, "{ not json"])
def test_node_without_a_readable_sidecar_says_what_it_is_in_one_line(tiny_model, tmp_path, sidecar):
    """No model.json beside the model ended in an ENOENT stack trace."""
    model = tmp_path / "model.onnx"
    model.write_bytes(tiny_model["onnx"].read_bytes())
    if sidecar is not None:
        model.with_suffix(".json").write_text(sidecar)
    files = write_images(tmp_path / "files", [(40, 50)])
    done = score_in_node(model, *files)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert str(model.with_suffix(".json")) in done.stderr and ("not JSON" in done.stderr) == (sidecar is not None)
    assert "the JSON sidecar python export.py writes beside every model it exports" in done.stderr


def test_node_decides_a_category_left_on_the_global_threshold_there_and_still_refuses_a_typo(tiny_model, tmp_path):
    """train.py calibration.by=category leaves a category with too few genuine images on the global
    threshold (infer.py decides it there); Node refused it as unknown."""
    model = tmp_path / "model.onnx"
    build_variant(tiny_model["onnx"], model, graph_preprocess=True)
    sidecar = json.loads(model.with_suffix(".json").read_text())
    calibrated = {**sidecar, "threshold": 0.0, "category_thresholds": {"charts": 1.0}}
    model.with_suffix(".json").write_text(json.dumps({**calibrated, "categories_on_global_threshold": ["blots"]}))
    files = write_images(tmp_path / "files", [(40, 50)])
    blots = score_in_node(model, "--category", "blots", *files)
    assert blots.returncode == 0, blots.stderr
    assert [(r["label"], r["threshold"]) for r in map(json.loads, blots.stdout.splitlines())] == [(1, 0.0)]
    assert 'category "blots" had too few genuine images for a threshold of its own' in blots.stderr
    assert "decided at the global threshold 0" in blots.stderr
    typo = score_in_node(model, "--category", "blot", *files)
    assert typo.returncode == 2 and typo.stdout == ""
    assert 'no threshold for category "blot": it knows charts (and blots, on the global threshold)' in typo.stderr
