"""A model whose outputs are not finite (broken weights, overflow) gives error rows, never `ok` rows
holding NaN: a NaN score compares false with every threshold and would pass as genuine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from infer import InferenceFailed, infer
from inference.scoring import non_finite_output
from inference.writer import read_results
from tests.helpers import compose_config, write_images, write_tiny_model


@pytest.fixture(scope="module")
def broken_models(tmp_path_factory):
    """A tiny NPR as .ckpt and .onnx whose head bias is NaN (every score NaN), as a damaged file gives."""
    import onnx
    from onnx import numpy_helper

    folder = tmp_path_factory.mktemp("broken_model")
    written = write_tiny_model(folder)
    checkpoint = torch.load(written["ckpt"], weights_only=True)
    bias = next(key for key in checkpoint["state_dict"] if key.endswith("head.bias"))
    checkpoint["state_dict"][bias] = torch.full_like(checkpoint["state_dict"][bias], float("nan"))
    torch.save(checkpoint, folder / "broken.ckpt")
    graph = onnx.load(str(written["onnx"]))
    for initializer in graph.graph.initializer:  # every float weight NaN: the score must be NaN too
        values = numpy_helper.to_array(initializer)
        if values.dtype == np.float32:
            initializer.CopyFrom(numpy_helper.from_array(np.full_like(values, np.nan), initializer.name))
    onnx.save(graph, str(folder / "broken.onnx"))
    return {"ckpt": folder / "broken.ckpt", "onnx": folder / "broken.onnx"}


@pytest.mark.parametrize("kind", ["ckpt", "onnx"])
def test_broken_weights_give_error_rows_with_the_reason(broken_models, tmp_path, kind):
    images = write_images(tmp_path / "in", [(40, 40), (36, 44), (50, 32)])
    with pytest.raises(InferenceFailed, match="nothing could be scored"):  # no usable score: the run fails
        infer(
            compose_config(
                "infer",
                [
                    f"model={broken_models[kind]}",
                    f"input={tmp_path / 'in'}",
                    f"output={tmp_path / 'scores.csv'}",
                    "progress=false",
                    "batch_size=2",
                ],
            )
        )
    rows = read_results(tmp_path / "scores.csv")
    assert sorted(Path(row["path"]).name for row in rows) == [path.name for path in images]
    for row in rows:
        assert row["status"] == "error" and row["score"] is None and row["label"] is None
        assert "non-finite score (nan)" in row["error"] and "weights may be broken" in row["error"]


def test_a_non_finite_map_value_flags_only_its_own_image():
    masks = np.zeros((3, 1, 4, 4), dtype=np.float32)
    masks[1, 0, 2, 3] = np.inf
    outputs = {"score": np.array([0.2, 0.9, np.nan], dtype=np.float32), "mask": masks}
    assert non_finite_output(outputs, 0) == ""
    assert "non-finite mask (inf)" in non_finite_output(outputs, 1)
    assert "non-finite score (nan)" in non_finite_output(outputs, 2)
