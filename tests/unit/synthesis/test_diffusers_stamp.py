"""A set made by generator=diffusers is stamped with its model (by name and content) and every option
that changes its fakes, as the other generators' sets are: a re-run into it with another model or
other options is refused, naming what differs, before anything is written; the same options (the
model folder moved or not) resume it. Tiny random pipelines (tests.diffusers_helpers) on 3 small
photos: a run takes about a second."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from generate import generate
from tests.diffusers_helpers import save_tiny_pipeline
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
