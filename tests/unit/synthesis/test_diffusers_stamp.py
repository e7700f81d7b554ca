"""A set made by generator=diffusers is stamped with its model (by name and content) and every option
that changes its fakes (the dtype and the kind of device among them, not the batch size), as the
other generators' sets are: a re-run into it with another model or other options is refused, naming
what differs and the values to go on with, before anything is written; the same options (the model
folder moved or not) resume it. Tiny random pipelines (tests.diffusers_helpers) on 3 small
photos: a run takes about a second."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from generate import generate
from synthesis.diffusers_backend import generate_fakes
from tests.diffusers_helpers import save_tiny_pipeline, tiny_options
from tests.helpers import compose_config


def run(photos: Path, output: Path, model: Path, *overrides: str) -> Path:
    torch.set_num_threads(1)
    cfg = compose_config(
        "generate",
        [
            f"source={photos}",
            f"output={output}",
            "generator=diffusers",
            f"generator.model={model}",
            "generator.steps=2",
            "generator.device=cpu",
            "generator.strengths=[0.5]",
            "generator.guidance_scale=1.0",
            "workers=1",
            "progress=false",
            "panels.crops_per_photo=0",
            "panels.min_panel_side=32",
            *overrides,
        ],
    )
    return generate(cfg)


@pytest.fixture(scope="module")
def made(tmp_path_factory, photo_folder, pipeline) -> Path:
    """A finished set; the tests below re-run into it."""
    output = tmp_path_factory.mktemp("made") / "out"
    run(photo_folder, output, pipeline)
    return output


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("generator.steps=4", "generator.steps"),
        ("generator.strengths=[0.75]", "generator.strengths"),
        ("generator.guidance_scale=2.0", "generator.guidance_scale"),
        ("generator.prompt=a_painting", "generator.prompt"),
        ("generator.negative_prompt=blurry", "generator.negative_prompt"),
        ("generator.inpaint=0.25", "generator.inpaint"),
        ("generator.seed=1", "generator.seed"),
        ("+generator.extra.eta=0.5", "generator.extra"),
        ("generator.dtype=bfloat16", "generator.dtype"),
    ],
)
def test_a_rerun_with_other_options_is_refused_naming_them(made, photo_folder, pipeline, override, named):
    manifest = (made / "manifest.csv").read_bytes()
    with pytest.raises(ValueError, match=rf"generated with other options \({named} differ;"):
        run(photo_folder, made, pipeline, override)
    assert (made / "manifest.csv").read_bytes() == manifest


def test_another_model_of_the_same_name_and_sizes_is_refused(made, photo_folder, tmp_path):
    fine_tune = save_tiny_pipeline(tmp_path / "tiny-sd", seed=1)  # other weights, same files and sizes
    with pytest.raises(ValueError, match=r"generated with other options \(generator.model differ;"):
        run(photo_folder, made, fine_tune)


def test_the_same_model_moved_and_the_same_options_resume(made, photo_folder, pipeline, tmp_path):
    moved = tmp_path / "elsewhere" / "tiny-sd"
    shutil.copytree(pipeline, moved)
    assert run(photo_folder, made, moved, "generator.batch_size=1") == made / "manifest.csv"


def restamped(made: Path, folder: Path, **backend) -> Path:
    """A copy of the set `made` whose stamp holds `backend` (None: the key left out, as an older
    toolkit wrote it)."""
    copy = shutil.copytree(made, folder)
    stamp = copy / ".items" / "spec.json"
    options = json.loads(stamp.read_text())
    options["backend"].update(backend)
    options["backend"] = {key: value for key, value in options["backend"].items() if value is not None}
    stamp.write_text(json.dumps(options))
    return copy


def test_a_set_made_on_cuda_in_half_precision_is_not_resumed_on_a_cpu_and_says_how_to_go_on(
    made, photo_folder, pipeline, tmp_path
):
    gpu_set = restamped(made, tmp_path / "gpu", device="cuda", dtype="float16")  # as a GPU run with auto stamps it
    manifest = (gpu_set / "manifest.csv").read_bytes()
    with pytest.raises(ValueError) as refused:
        run(photo_folder, gpu_set, pipeline)  # device=cpu, dtype=auto: float32
    message = str(refused.value)
    assert "generated with other options (generator.device, generator.dtype differ;" in message
    assert (
        "to go on with it, run with the options it was made with (generator.device=cuda generator.dtype=float16)"
        in message
    )
    assert message.endswith("else choose a new output folder or delete the old one")
    assert (gpu_set / "manifest.csv").read_bytes() == manifest


def test_a_set_stamped_before_dtype_and_device_were_resumes_and_is_stamped_with_them(
    made, photo_folder, pipeline, tmp_path
):
    older = restamped(made, tmp_path / "older", device=None, dtype=None)
    assert run(photo_folder, older, pipeline) == older / "manifest.csv"
    backend = json.loads((older / ".items" / "spec.json").read_text())["backend"]
    assert (backend["dtype"], backend["device"]) == ("float32", "cpu")
    with pytest.raises(ValueError, match=r"generated with other options \(generator.dtype differ;"):
        run(photo_folder, older, pipeline, "generator.dtype=bfloat16")


def test_the_stamp_holds_the_kind_of_device_not_its_number(pipeline):
    info = {"model_path": str(pipeline), "dtype": "float16", "device": "cuda:1"}
    stamp = tiny_options(pipeline).stamp(info)
    assert (stamp["device"], stamp["dtype"]) == ("cuda", "float16")
    assert "batch_size" not in stamp


def test_the_batch_size_leaves_every_fake_as_it_is_so_it_may_change_between_runs(pipeline):
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    panels = [(f"panel{i}", rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)) for i in range(3)]
    one = {fake.name: fake.image for fake in generate_fakes(panels, tiny_options(pipeline, batch_size=1))}
    three = {fake.name: fake.image for fake in generate_fakes(panels, tiny_options(pipeline, batch_size=3))}
    assert sorted(one) == sorted(three) and len(one) == 6
    assert all(np.array_equal(one[name], three[name]) for name in one)
