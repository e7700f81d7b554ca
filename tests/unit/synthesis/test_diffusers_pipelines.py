"""Which pipelines generator=diffusers builds from a folder: the inpainting one only when inpainting
fakes are asked for, so a model with an img2img variant only (a latent consistency model) serves
img2img fakes. Tiny random pipelines (tests.diffusers_helpers) load and sample in about a second."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from synthesis.diffusers_backend import DiffusersOptions, DiffusersUnavailable, generate_fakes, load_pipelines
from tests.diffusers_helpers import save_tiny_pipeline

PANEL = [("p", np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8))]


@pytest.fixture(scope="module")
def lcm(tmp_path_factory) -> Path:
    return save_tiny_pipeline(tmp_path_factory.mktemp("lcm") / "tiny-lcm", kind="lcm")


@pytest.fixture(scope="module")
def sd(tmp_path_factory) -> Path:
    return save_tiny_pipeline(tmp_path_factory.mktemp("sd") / "tiny-sd")


def _options(model: Path, inpaint: float) -> DiffusersOptions:
    return DiffusersOptions(
        model=str(model), strengths=(0.5,), img2img=1.0, inpaint=inpaint, steps=2, guidance_scale=1.0, device="cpu"
    )


def test_an_img2img_only_pipeline_makes_img2img_fakes_when_inpainting_is_off(lcm):
    torch.set_num_threads(1)
    pipelines = load_pipelines(_options(lcm, inpaint=0.0))
    assert pipelines[1] is None and pipelines[2]["inpaint_pipeline"] is None
    fakes = list(generate_fakes(PANEL, _options(lcm, inpaint=0.0), pipelines))
    assert [f.operation for f in fakes] == ["img2img"]
    assert fakes[0].meta["pipeline"] == "LatentConsistencyModelImg2ImgPipeline"
    assert fakes[0].image.shape == PANEL[0][1].shape


def test_inpainting_asked_of_a_pipeline_without_an_inpainting_variant_is_refused_saying_to_turn_it_off(lcm):
    with pytest.raises(DiffusersUnavailable) as refused:
        load_pipelines(_options(lcm, inpaint=0.5))
    message = str(refused.value)
    assert "LatentConsistencyModelImg2ImgPipeline" in message and "set generator.inpaint=0" in message
    assert str(lcm) in message and "\n" not in message


def test_no_inpainting_pipeline_is_built_when_inpainting_is_off(sd):
    img2img, inpaint, info = load_pipelines(_options(sd, inpaint=0.0))
    assert inpaint is None and info["inpaint_pipeline"] is None
    assert info["img2img_pipeline"] == "StableDiffusionImg2ImgPipeline"
    _, inpaint, info = load_pipelines(_options(sd, inpaint=0.5))
    assert info["inpaint_pipeline"] == "StableDiffusionInpaintPipeline" == type(inpaint).__name__
