"""The export's parity check sees a wrong graph even where random pixels saturate the scores.

The stand-in detector scores an image by its pixel-to-pixel differences: random pixels score
1 - 1e-9 (logit about 21), photographs well inside (0, 1), as the quickstart detector does. A
graph whose bias moved by 6 agrees with it on noise to 1e-6 and disagrees on photographs.
"""

from __future__ import annotations

from types import SimpleNamespace

import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from exporting.onnx_export import PARITY_TOLERANCE, parity_differences, parity_probes

GAIN, BIAS = 100.0, -12.0


class Roughness(torch.nn.Module):
    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor]:
        rough = (image[..., 1:] - image[..., :-1]).abs().mean((1, 2, 3))
        return (torch.sigmoid(GAIN * rough + BIAS),)


def roughness_onnx(bias: float) -> ort.InferenceSession:
    const = lambda name, values: helper.make_tensor(name, TensorProto.INT64, [len(values)], values)  # noqa: E731
    nodes = [
        helper.make_node("Slice", ["image", "one", "end", "three"], ["right"]),
        helper.make_node("Slice", ["image", "zero", "minus_one", "three"], ["left"]),
        helper.make_node("Sub", ["right", "left"], ["step"]),
        helper.make_node("Abs", ["step"], ["size"]),
        helper.make_node("ReduceMean", ["size", "axes"], ["rough"], keepdims=0),
        helper.make_node("Mul", ["rough", "gain"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["score"]),
    ]
    initializers = [
        const("one", [1]),
        const("zero", [0]),
        const("end", [2**62]),
        const("minus_one", [-1]),
        const("three", [3]),
        const("axes", [1, 2, 3]),
        helper.make_tensor("gain", TensorProto.FLOAT, [], [GAIN]),
        helper.make_tensor("bias", TensorProto.FLOAT, [], [bias]),
    ]
    graph = helper.make_graph(
        nodes,
        "roughness",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture
def probes() -> list[torch.Tensor]:
    module = SimpleNamespace(net=SimpleNamespace(is_localizer=False))
    return parity_probes(module, 64, torch.Generator().manual_seed(0))


def test_the_faithful_graph_passes_on_every_probe(probes):
    difference = parity_differences(Roughness(), roughness_onnx(BIAS), ["score"], probes)["score"]
    assert difference <= PARITY_TOLERANCE


def test_a_graph_that_agrees_only_on_saturating_noise_fails_on_the_photographs(probes):
    wrong = roughness_onnx(BIAS + 6)
    noise, photos = probes
    assert parity_differences(Roughness(), wrong, ["score"], [noise])["score"] < 1e-6  # noise alone passes it
    assert parity_differences(Roughness(), wrong, ["score"], probes)["score"] > 0.1


def test_the_file_has_the_opset_asked_for_or_is_refused(tmp_path):
    import onnx

    from exporting.onnx_export import ExportError, export_graph

    graph, inputs = Roughness(), {"image": torch.rand(2, 3, 8, 8)}
    with pytest.raises(ExportError, match="opset=13: the exporter writes opsets 18 to"):
        export_graph(graph, inputs, ["score"], {"image": {}}, tmp_path / "old.onnx", 13)
    assert not (tmp_path / "old.onnx").exists()
    newest = onnx.defs.onnx_opset_version()  # past it torch printed a converter's traceback, then fell back to 18
    with pytest.raises(ExportError, match=f"opset={newest + 1}: the exporter writes opsets 18 to {newest}"):
        export_graph(graph, inputs, ["score"], {"image": {}}, tmp_path / "unknown.onnx", newest + 1)
    assert not (tmp_path / "unknown.onnx").exists()
    export_graph(graph, inputs, ["score"], {"image": {}}, tmp_path / "new.onnx", 20)
    assert {o.version for o in onnx.load(str(tmp_path / "new.onnx")).opset_import if o.domain == ""} == {20}


def test_a_graph_that_scores_nan_fails_parity(probes):
    class NotANumber(torch.nn.Module):
        def forward(self, image: torch.Tensor) -> tuple[torch.Tensor]:
            return (Roughness()(image)[0] * float("nan"),)

    difference = parity_differences(NotANumber(), roughness_onnx(BIAS), ["score"], probes)["score"]
    assert not difference <= PARITY_TOLERANCE  # NaN, which the export refuses
