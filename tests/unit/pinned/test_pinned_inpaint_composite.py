"""Inpainting fakes change pixels inside their mask only: whatever the pipeline returns (a VAE
touches every pixel), the panel is composited back with the exact mask, on odd, non-square panels
that the pipeline sees padded. A stand-in pipeline replaces diffusers, so this runs in
milliseconds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import synthesis.diffusers_backend as backend
from synthesis.diffusers_backend import DiffusersOptions, generate_fakes


class RepaintEverything:
    """Stands in for a diffusers pipeline: returns every padded input image painted a flat grey,
    so any pixel the toolkit does not restore from the panel shows."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        images = [np.full((image.height, image.width, 3), 0.5, np.float32) for image in kwargs["image"]]
        return type("Output", (), {"images": images})()


@pytest.fixture
def no_diffusers(monkeypatch):
    monkeypatch.setattr(backend, "_imports", lambda: (None, torch))


PANELS = [
    ("odd", np.random.default_rng(0).integers(0, 256, (37, 51, 3), dtype=np.uint8)),
    ("tall", np.random.default_rng(1).integers(0, 256, (45, 29, 3), dtype=np.uint8)),
]


def test_inpainting_changes_no_pixel_outside_the_mask(no_diffusers):
    inpaint = RepaintEverything()
    info = {"device": "cpu", "model": "stand-in", "img2img_pipeline": "none", "inpaint_pipeline": "RepaintEverything"}
    options = DiffusersOptions(
        model="unused",
        strengths=(0.5,),
        img2img=0.0,
        inpaint=2.0,
        steps=2,
        batch_size=2,
        region_fraction=(0.1, 0.3),
        seed=5,
    )
    fakes = list(generate_fakes(PANELS, options, pipelines=(None, inpaint, info)))
    assert sorted(f.key for f in fakes) == ["odd", "odd", "tall", "tall"]
    assert all(call["image"][0].size[0] % 64 == 0 and call["image"][0].size[1] % 64 == 0 for call in inpaint.calls)
    panels = dict(PANELS)
    for fake in fakes:
        panel, mask = panels[fake.key], fake.mask.astype(bool)
        assert fake.image.shape == panel.shape and mask.shape == panel.shape[:2]
        assert 0 < mask.mean() < 0.5
        np.testing.assert_array_equal(fake.image[~mask], panel[~mask])
        inner = np.zeros_like(mask)  # well inside the mask the pipeline's grey shows through
        inner[2:-2, 2:-2] = mask[:-4, :-4] & mask[4:, 4:] & mask[:-4, 4:] & mask[4:, :-4]
        assert inner.any() and np.all(fake.image[inner] == 128)
