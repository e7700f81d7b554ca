"""A broken pipeline folder ends generator=diffusers in one line naming the folder or file and what
is wrong, never a traceback; pickled weights that could run code are refused, never loaded. The
folders are a tiny random pipeline (tests.diffusers_helpers) with one part broken each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from synthesis.diffusers_backend import DiffusersOptions, DiffusersUnavailable, load_pipelines


@pytest.fixture
def copy(pipeline, tmp_path):
    """A copy of the tiny pipeline to break."""
    folder = tmp_path / "broken"
    shutil.copytree(pipeline, folder)
    return folder


def _refusal(folder: Path) -> str:
    with pytest.raises(DiffusersUnavailable) as refused:
        load_pipelines(DiffusersOptions(model=str(folder), steps=2, strengths=(0.5,), device="cpu"))
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_a_model_index_that_is_not_an_object_is_named(copy):
    (copy / "model_index.json").write_text("[1, 2]")
    assert (
        _refusal(copy) == f"{copy / 'model_index.json'} must be a JSON object (component: [library, class]), not a list"
    )


def test_a_malformed_component_entry_is_named_with_its_file(copy):
    index = json.loads((copy / "model_index.json").read_text())
    (copy / "model_index.json").write_text(json.dumps({**index, "unet": []}))
    message = _refusal(copy)
    assert message.startswith(f"{copy / 'model_index.json'}: component 'unet' must be [library, class]")
    assert message.endswith("got []")


@pytest.mark.parametrize("name", ["model_index.json", "unet/config.json", "scheduler/scheduler_config.json"])
def test_invalid_json_is_refused_naming_the_file(copy, name):
    (copy / name).write_text("{not json")
    assert _refusal(copy).startswith(f"{copy / name} is not valid JSON: Expecting property name")


def test_a_component_without_weights_is_named(copy):
    (copy / "unet" / "diffusion_pytorch_model.safetensors").unlink()
    message = _refusal(copy)
    assert message.startswith(f"{copy / 'unet'} has no weights: no weight file (*.safetensors")


def test_weights_that_are_no_valid_safetensors_file_are_said_in_one_line(copy):
    weights = copy / "vae" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    message = _refusal(copy)
    assert message.startswith(f"cannot load the diffusers pipeline in {copy}:") and str(weights) in message


class WritesAFile:
    """Pickled, it calls open(marker, "w") when loaded unsafely: the marker shows code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.mark.parametrize(
    ("safe", "pickled"),
    [
        ("unet/diffusion_pytorch_model.safetensors", "unet/diffusion_pytorch_model.bin"),  # read by diffusers
        ("text_encoder/model.safetensors", "text_encoder/pytorch_model.bin"),  # read by transformers
    ],
)
def test_pickled_weights_that_could_run_code_are_refused_and_never_run(copy, tmp_path, safe, pickled):
    marker = tmp_path / "code_ran"
    (copy / safe).unlink()
    torch.save({"weight": WritesAFile(marker)}, copy / pickled)
    message = _refusal(copy)
    assert message.startswith(f"refused the pickled weights in {copy} ({pickled}): ")
    assert "could run code" in message and "safetensors" in message
    assert not marker.exists()
