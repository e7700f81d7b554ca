"""ONNX export of a learned pair detector (`pairnet`): two image inputs, four outputs, a parity check.

The graph takes `image_a` and `image_b` (float32 N x 3 x S x S, RGB in [0, 1], S the detector's
`preprocess.size`; batch dynamic) and returns `score` (N, probability that B reuses content of A),
`operations` (N x 5 probabilities in `evaluation.protocols.duplication.CMO_OPERATIONS` order),
`mask_a` and `mask_b` (N x 1 x S x S probabilities). Metadata as for every export (`outputs` also
names the operations). The file is refused unless onnxruntime reproduces PyTorch within the
score tolerance on the score and the map tolerance on the other outputs, on a batch size other
than the traced one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from evaluation.protocols.duplication import CMO_OPERATIONS

PAIR_OUTPUTS = ["score", "operations", "mask_a", "mask_b"]


class PairScoringGraph(nn.Module):
    """(image_a, image_b) -> (score, operations, mask_a, mask_b), all probabilities."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, image_a: torch.Tensor, image_b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = self.net(image_a, image_b)
        return (
            torch.sigmoid(outputs["logit"]),
            torch.sigmoid(outputs["operation_logit"]),
            torch.sigmoid(outputs["mask_logit_a"]),
            torch.sigmoid(outputs["mask_logit_b"]),
        )


def export_pair_onnx(
    module: Any, output: Path, opset: int, tolerance: float, map_tolerance: float, seed: int = 0
) -> Any:
    """`exporting.onnx_export.export_onnx` for pair detectors (it delegates here)."""
    import onnxruntime as ort

    from exporting.onnx_export import ExportError, ExportReport, export_graph, photo_batch, stamp_metadata

    output.parent.mkdir(parents=True, exist_ok=True)
    module = module.eval().cpu()
    graph = PairScoringGraph(module.net).eval()
    size = int(module.net.preprocess.size)
    generator = torch.Generator().manual_seed(seed)
    example = tuple(torch.rand(2, 3, size, size, generator=generator) for _ in range(2))
    batch = torch.export.Dim("batch", min=1, max=4096)
    tmp = output.with_name(f".{output.stem}.partial.onnx")
    inputs = {"image_a": example[0], "image_b": example[1]}
    export_graph(graph, inputs, PAIR_OUTPUTS, {"image_a": {0: batch}, "image_b": {0: batch}}, tmp, opset)
    stamp_metadata(tmp, module, PAIR_OUTPUTS)
    annotate_operations(tmp)
    # random pixels, and photographs paired with others and with their own mirror (a duplicate)
    photos = photo_batch(3, size, size)
    noise = tuple(torch.rand(3, 3, size, size, generator=generator) for _ in range(2))
    probe = (torch.cat([noise[0], photos]), torch.cat([noise[1], photos.roll(1, 0)[:2], photos[2:].flip(-1)]))
    session = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    with torch.inference_mode():
        expected = [t.numpy() for t in graph(*probe)]
    actual = session.run(PAIR_OUTPUTS, {"image_a": probe[0].numpy(), "image_b": probe[1].numpy()})
    differences = {}
    for name, a, e in zip(PAIR_OUTPUTS, actual, expected):
        if a.shape != e.shape:
            tmp.unlink(missing_ok=True)
            raise ExportError(f"ONNX output {name} has shape {a.shape}, PyTorch {e.shape}; the file was not written")
        differences[name] = float(np.max(np.abs(a - e)))
    bounds = {name: tolerance if name == "score" else map_tolerance for name in PAIR_OUTPUTS}
    failed = {name: value for name, value in differences.items() if not value <= bounds[name]}
    shapes = [tuple(p.shape) for p in probe]
    if failed:
        tmp.unlink(missing_ok=True)
        detail = ", ".join(f"{name} {value:.3g} > {bounds[name]:g}" for name, value in failed.items())
        raise ExportError(f"ONNX parity failed on inputs {shapes}: max |difference| {detail}; the file was not written")
    os.replace(tmp, output)
    mask = max(differences["mask_a"], differences["mask_b"])
    return ExportReport(output, differences["score"], list(PAIR_OUTPUTS), mask, shapes)


def annotate_operations(path: Path) -> None:
    """Name the columns of the `operations` output in the metadata (`operations`: JSON list), and
    say that panels are resized by pixel area, as the pair detector does whatever its config says."""
    import onnx

    model = onnx.load(str(path))
    for prop in model.metadata_props:
        if prop.key == "preprocess":
            prop.value = json.dumps({**json.loads(prop.value), "interpolation": "area"})
    model.metadata_props.add(key="operations", value=json.dumps(list(CMO_OPERATIONS)))
    onnx.save(model, str(path))
