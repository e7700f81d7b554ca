"""ONNX export with the preprocessing and the calibrated threshold inside, and a parity check."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import detectors
from detectors.module import DetectorModule
from inference.runtime import scoring_preprocess

PARITY_TOLERANCE = 1e-4
MIN_OPSET = 18  # torch's dynamo exporter (the TorchScript one, which wrote older opsets, is deprecated)
# Pixel maps pass through bilinear resampling and long attention chains whose float reductions
# onnxruntime orders differently; their probabilities are held to a looser bound than the score.
MAP_PARITY_TOLERANCE = 1e-3


class ExportError(Exception):
    """An export that must not be shipped (unsupported graph or failed parity)."""


class ScoringGraph(nn.Module):
    """The exported graph: `image` (N x 3 x H x W, RGB in [0, 1]) -> `score` (N) [, `mask`
    [, `confidence`]] (probabilities; `confidence` for localizers with a reliability map)."""

    def __init__(self, module: DetectorModule) -> None:
        super().__init__()
        self.net = module.net

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = self.net(image)
        score = torch.sigmoid(outputs["logit"])
        if "mask_logit" not in outputs:
            return (score,)
        if getattr(self.net, "has_confidence", False):
            return score, torch.sigmoid(outputs["mask_logit"]), torch.sigmoid(outputs["confidence_logit"])
        return score, torch.sigmoid(outputs["mask_logit"])


def output_names(net: nn.Module) -> list[str]:
    """The exported graph's outputs, in order."""
    if not net.is_localizer:
        return ["score"]
    return ["score", "mask", "confidence"] if getattr(net, "has_confidence", False) else ["score", "mask"]


@dataclass
class ExportReport:
    path: Path
    max_score_difference: float
    outputs: list[str]
    max_mask_difference: float | None = None
    checked_shapes: list[tuple[int, ...]] | None = None


def photo_batch(count: int, height: int, width: int) -> torch.Tensor:
    """`count` bundled photographs resized to height x width (N x 3 x H x W in [0, 1])."""
    import cv2

    from exporting.variants import bundled_photographs

    photos = [cv2.resize(p, (width, height), interpolation=cv2.INTER_AREA) for p in bundled_photographs()[:count]]
    return torch.from_numpy(np.stack(photos)).permute(0, 3, 1, 2).float() / 255


def parity_probes(module: DetectorModule, size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Inputs the export is checked on: batches of 3 (the graph was traced with 2) of random pixels
    and of photographs (whose scores noise alone may leave saturated, where wrong graphs agree) and,
    for localizers, whose height and width are dynamic, both again at another, odd size."""
    probes = [torch.rand(3, 3, size, size, generator=generator), photo_batch(3, size, size)]
    if module.net.is_localizer:
        odd = (size + size // 2 + 3, max(32, size - 5))
        probes += [torch.rand(1, 3, *odd, generator=generator), photo_batch(1, *odd)]
    return probes


def parity_differences(
    graph: nn.Module, session: Any, names: list[str], probes: list[torch.Tensor]
) -> dict[str, float]:
    """Largest |onnxruntime - PyTorch| difference of every output over all probes."""
    differences = dict.fromkeys(names, 0.0)
    for probe in probes:
        with torch.inference_mode():
            expected = [tensor.numpy() for tensor in graph(probe)]
        actual = session.run(names, {"image": probe.numpy()})
        for name, a, e in zip(names, actual, expected):
            if a.shape != e.shape:
                raise ExportError(f"ONNX output {name} has shape {a.shape}, PyTorch {e.shape}")
            differences[name] = float(np.maximum(differences[name], np.max(np.abs(a - e))))  # NaN stays NaN
    return differences


def example_size(module: DetectorModule) -> int:
    preprocess = module.net.preprocess
    return int(preprocess.size) if preprocess.size else 256


def stamp_metadata(path: Path, module: DetectorModule, names: list[str]) -> None:
    """Write what a user of the file needs (detector, version, the preprocessing `infer.py` applies,
    threshold, outputs) into its `metadata_props`, then run `onnx.checker` on the result."""
    import onnx

    model = onnx.load(str(path))
    trained = module.net.preprocess
    scoring = scoring_preprocess(trained, module.net.is_localizer)  # localizers: each image whole
    metadata = {
        "detector": module.hparams.get("name") or type(module.net).__name__,
        "toolkit_version": detectors.__version__,
        "preprocess": json.dumps(scoring.to_dict()),
        "threshold": repr(float(module.threshold)),
        "outputs": json.dumps(names),
        "target_fpr": repr(float(module.hparams.get("target_fpr", 0.01))),
    }
    if scoring != trained:  # tiles (infer.py tiles=true) are cut at the size it was trained at
        metadata["trained_preprocess"] = json.dumps(trained.to_dict())
    if getattr(module, "category_thresholds", None):  # calibration.by=category
        metadata["category_thresholds"] = json.dumps(module.category_thresholds)
    if getattr(module, "calibration", None):  # its reports say how far the threshold can be trusted
        metadata["calibration"] = json.dumps(module.calibration, default=float)
    if getattr(module.net, "min_image_side", 1) > 1:  # e.g. noise_level: more than half a block
        metadata["min_side"] = str(int(module.net.min_image_side))
    del model.metadata_props[:]
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))
    onnx.checker.check_model(str(path))


def export_graph(
    graph: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    outputs: list[str],
    dynamic_shapes: dict[str, dict],
    path: Path,
    opset: int,
) -> None:
    """`torch.onnx.export` (dynamo, one file, its warnings silenced), with any exporter failure
    reported as an ExportError naming the network, and a file of another opset than asked refused
    (the exporter falls back to its own when it cannot convert)."""
    import onnx

    newest = onnx.defs.onnx_opset_version()  # the installed onnx converts no further
    if not MIN_OPSET <= opset <= newest:
        raise ExportError(f"opset={opset}: the exporter writes opsets {MIN_OPSET} to {newest} (the installed onnx)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                graph,
                tuple(inputs.values()),
                str(path),
                input_names=list(inputs),
                output_names=outputs,
                dynamic_shapes=dynamic_shapes,
                opset_version=opset,
                dynamo=True,
                external_data=False,
                verbose=False,
            )
        except Exception as error:  # the exporter raises many internal types; report them uniformly
            name = type(getattr(graph, "net", graph)).__name__
            raise ExportError(f"torch.onnx.export failed for {name}: {error}") from error
    written = {o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx")}
    if written != {opset}:
        path.unlink(missing_ok=True)
        raise ExportError(f"opset={opset}: the exporter wrote opset {sorted(written)}; the file was not written")


def check_exportable(module: DetectorModule) -> None:
    """Refuse a detector that is no fixed graph (fitted per image, matching), with its reason, and
    weights that are not finite (a run that diverged: its parity check failed as `nan`)."""
    if refusal := getattr(module.net, "onnx_export_refusal", None):
        raise ExportError(f"{type(module.net).__name__} cannot be exported to ONNX: {refusal}")
    broken = [name for name, t in module.net.state_dict().items() if t.is_floating_point() and not t.isfinite().all()]
    if broken:
        raise ExportError(
            f"the checkpoint holds NaN or infinite weights in {len(broken)} tensor(s), e.g. {broken[0]}: the run "
            "that wrote it diverged; export a checkpoint from before (an earlier epoch) or train again"
        )


def export_onnx(
    module: DetectorModule,
    output: str | os.PathLike,
    opset: int = 18,
    tolerance: float = PARITY_TOLERANCE,
    seed: int = 0,
    map_tolerance: float = MAP_PARITY_TOLERANCE,
) -> ExportReport:
    """Export, stamp metadata, run `onnx.checker`, and refuse the file unless onnxruntime reproduces
    PyTorch's scores within `tolerance` on a batch of size different from the traced one; for
    localizers also every map (mask, confidence) within `map_tolerance`, at two input sizes.

    Kept in one piece: export, metadata, checker and the parity check are one refusal path.
    """
    import onnxruntime as ort

    check_exportable(module)
    output = Path(output)
    if getattr(module.net, "is_pair_detector", False):  # two image inputs (learned pair detectors)
        from exporting.pair_export import export_pair_onnx

        return export_pair_onnx(module, output, opset, tolerance, map_tolerance, seed)
    output.parent.mkdir(parents=True, exist_ok=True)
    module = module.eval().cpu()
    graph = ScoringGraph(module).eval()
    names = output_names(module.net)
    size = example_size(module)
    generator = torch.Generator().manual_seed(seed)
    example = torch.rand(2, 3, size, size, generator=generator)
    batch = torch.export.Dim("batch", min=1, max=4096)
    dims = {0: batch}
    if module.net.is_localizer:
        dims.update({2: torch.export.Dim("height", min=32, max=8192), 3: torch.export.Dim("width", min=32, max=8192)})
    tmp = output.with_name(f".{output.stem}.partial.onnx")
    export_graph(graph, {"image": example}, names, {"image": dims}, tmp, opset)
    stamp_metadata(tmp, module, names)

    probes = parity_probes(module, size, generator)
    shapes = [tuple(p.shape) for p in probes]
    session = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    try:
        differences = parity_differences(graph, session, names, probes)
    except Exception as error:  # a size the graph cannot take is a failed export too
        tmp.unlink(missing_ok=True)
        raise ExportError(
            f"ONNX parity check could not run on inputs {shapes}: {error}; the file was not written"
        ) from error
    bounds = {name: tolerance if name == "score" else map_tolerance for name in names}
    failed = {name: value for name, value in differences.items() if not value <= bounds[name]}
    if failed:
        tmp.unlink(missing_ok=True)
        detail = ", ".join(f"{name} {value:.3g} > {bounds[name]:g}" for name, value in failed.items())
        raise ExportError(f"ONNX parity failed on inputs {shapes}: max |difference| {detail}; the file was not written")
    os.replace(tmp, output)
    return ExportReport(output, differences["score"], names, differences.get("mask"), shapes)
