"""Where an ONNX model scores with `devices=N`: with `device=auto` each process takes the GPU Fabric
gave it when onnxruntime can run there, and the CPU quietly otherwise, as one process does; a CUDA
device the user names is still refused when onnxruntime cannot use it.

No GPU is needed: Fabric is replaced by one that places its process on `cuda:1` (of a machine
with CUDA), and onnxruntime by a build without the CUDA execution provider."""

from __future__ import annotations

import logging
import sys
import types

import onnxruntime
import pytest
import torch

from infer import InferenceFailed, infer
from inference.writer import read_results
from tests.helpers import compose_config, write_images


class FabricOnSecondGpu:
    """What Lightning Fabric does on a CUDA machine, for one process that is the whole run."""

    global_rank, world_size, device = 0, 1, torch.device("cuda", 1)

    def __init__(self, accelerator: str, **_: object) -> None:
        self.accelerator = accelerator

    def launch(self) -> None:
        pass

    def barrier(self) -> None:
        pass

    def all_reduce(self, tensor: torch.Tensor, reduce_op: str = "sum") -> torch.Tensor:
        return tensor


def on_a_cuda_machine(monkeypatch, providers: list[str]) -> None:
    """Fabric places the process on cuda:1; onnxruntime offers `providers` (the CPU ones here start
    no CUDA session even when told they have the CUDA provider: a GPU build that cannot start it)."""
    monkeypatch.setitem(sys.modules, "lightning.fabric", types.SimpleNamespace(Fabric=FabricOnSecondGpu))
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: providers)
    monkeypatch.setattr("inference.runtime.gpu_present", lambda: True)


def run_infer(model, input, output, *overrides):
    return infer(
        compose_config("infer", [f"model={model}", f"input={input}", f"output={output}", "progress=false", *overrides])
    )


@pytest.mark.parametrize(
    "providers", [["CPUExecutionProvider"], ["CUDAExecutionProvider", "CPUExecutionProvider"]], ids=["cpu", "gpu"]
)
def test_devices_with_device_auto_score_an_onnx_model_on_the_cpu_where_onnxruntime_cannot_use_the_gpu(
    tiny_model, tmp_path, monkeypatch, caplog, providers
):
    write_images(tmp_path / "in", [(40, 50), (64, 48)])
    run_infer(tiny_model["onnx"], tmp_path / "in", tmp_path / "alone.csv", "device=cpu")
    on_a_cuda_machine(monkeypatch, providers)
    with caplog.at_level(logging.INFO):
        run_infer(tiny_model["onnx"], tmp_path / "in", tmp_path / "out.csv", "devices=2", "device=auto")
    assert "onnxruntime cannot run on cuda:1 here, so this process scores on the CPU" in caplog.text
    rows, alone = read_results(tmp_path / "out.csv"), read_results(tmp_path / "alone.csv")
    assert [row["status"] for row in rows] == ["ok", "ok"]
    assert [row["score"] for row in rows] == [row["score"] for row in alone]


def test_devices_with_a_cuda_device_named_are_refused_where_onnxruntime_has_no_cuda(tiny_model, tmp_path, monkeypatch):
    write_images(tmp_path / "in", [(40, 50)])
    on_a_cuda_machine(monkeypatch, ["CPUExecutionProvider"])
    with pytest.raises(InferenceFailed, match="device=cuda:1 was requested but this onnxruntime has no CUDA"):
        run_infer(tiny_model["onnx"], tmp_path / "in", tmp_path / "out.csv", "devices=2", "device=cuda")
    assert not (tmp_path / "out.csv").exists()
