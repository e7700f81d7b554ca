"""Scoring only genuine images (a user's own, to see what is flagged): the metrics undefined for one
class are said once in words and shown as n/a, not as nan and Python warnings with source lines."""

from __future__ import annotations

import logging
import warnings

import numpy as np

from datamodules.io import write_image, write_manifest
from evaluation import UndefinedMetricWarning
from infer import infer
from tests.helpers import compose_config, write_tiny_model


def test_genuine_only_input_reports_na_and_says_why_once(tmp_path, caplog):
    model = write_tiny_model(tmp_path / "model", onnx=False)["ckpt"]
    rng = np.random.default_rng(0)
    rows = []
    for i in range(6):
        write_image(tmp_path / "mine" / f"{i}.png", rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
        rows.append({"path": str(tmp_path / "mine" / f"{i}.png"), "label": 0})
    write_manifest(rows, tmp_path / "mine.csv")
    output = tmp_path / "out" / "scores.csv"
    manifest = tmp_path / "mine.csv"
    overrides = [f"model={model}", f"input={manifest}", f"output={output}", "num_workers=0", "progress=false"]
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        infer(compose_config("infer", overrides))
    assert not [w for w in shown if w.category is UndefinedMetricWarning]
    assert "auroc n/a, tpr n/a, tnr " in caplog.text and "undefined (" in caplog.text
