"""The README's second-language example: Node.js with onnxruntime-node scores the same files as
infer.py, reading the model's metadata from the JSON sidecar, without Python.

Runs where `node` and the example's packages are installed (`.ci/run` installs them with
`npm install --ignore-scripts` in examples/node); skipped, with the reason, elsewhere."""

from __future__ import annotations

import json
import shutil
import subprocess

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
