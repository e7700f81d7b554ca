"""`generator.extra` adds pipeline arguments; it may not change what the toolkit sets and records
itself (strength, steps, guidance, prompt, seeds, the images), and it is recorded with every fake.
A stand-in pipeline replaces diffusers, so this runs in milliseconds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import synthesis.diffusers_backend as backend
from synthesis.diffusers_backend import DiffusersOptions, generate_fakes


class Recorder:
    """Stands in for a diffusers pipeline: records its arguments and returns the inputs unchanged."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        images = [np.asarray(image, np.float32) / 255 for image in kwargs["image"]]
        return type("Output", (), {"images": images})()


PANELS = [("p", np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8))]
INFO = {"device": "cpu", "model": "stand-in", "img2img_pipeline": "Recorder", "inpaint_pipeline": "Recorder"}


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("strength", "generator.strengths"),
        ("num_inference_steps", "generator.steps"),
        ("guidance_scale", "generator.guidance_scale"),
        ("prompt", "generator.prompt"),
        ("negative_prompt", "generator.negative_prompt"),
        ("generator", "generator.seed"),
    ],
)
def test_extra_may_not_override_an_option_and_names_the_option_to_use(key, instead):
    with pytest.raises(ValueError, match=rf"generator\.extra\.{key} is set by the toolkit: use {instead}"):
        DiffusersOptions(model="x", steps=4, strengths=(0.5,), extra={key: 1})


@pytest.mark.parametrize("key", ["image", "mask_image", "output_type", "height"])
def test_extra_may_not_set_the_images_the_toolkit_passes(key):
    with pytest.raises(ValueError, match=rf"generator\.extra\.{key} is set by the toolkit itself"):
        DiffusersOptions(model="x", steps=4, strengths=(0.5,), extra={key: 1})


def test_extra_that_is_not_a_mapping_is_refused():
    with pytest.raises(ValueError, match="generator.extra must be a mapping"):
        DiffusersOptions(model="x", steps=4, strengths=(0.5,), extra=3)


def test_extra_reaches_every_call_and_is_recorded_with_every_fake(monkeypatch):
    monkeypatch.setattr(backend, "_imports", lambda: (None, torch))
    pipe = Recorder()
    options = DiffusersOptions(
        model="unused", strengths=(0.5,), img2img=1.0, inpaint=1.0, steps=4, seed=3, extra={"eta": 0.3}
    )
    fakes = list(generate_fakes(PANELS, options, pipelines=(pipe, pipe, INFO)))
    assert sorted(f.operation for f in fakes) == ["img2img", "inpaint"]
    assert all(call["eta"] == 0.3 and call["num_inference_steps"] == 4 for call in pipe.calls)
    assert [call["strength"] for call in pipe.calls] == [0.5, 1.0]
    assert all(fake.meta["extra"] == {"eta": 0.3} for fake in fakes)
