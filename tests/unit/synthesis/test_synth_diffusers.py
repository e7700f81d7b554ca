"""generator=diffusers on a tiny randomly initialized Stable Diffusion pipeline (tests.diffusers_helpers)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import data

from synthesis.diffusers_backend import DiffusersOptions, DiffusersUnavailable, generate_fakes, load_pipelines
from tests.diffusers_helpers import save_tiny_pipeline, tiny_options

PANELS = [
    ("astronaut", data.astronaut()[::16, ::16].copy()),  # 32 x 32
    ("chelsea", data.chelsea()[::10, ::10].copy()),
]  # 30 x 46: padded to the pipeline's multiple inside


@pytest.fixture(scope="module")
def tiny_pipeline(tmp_path_factory) -> Path:
    """A Stable Diffusion img2img pipeline of tiny random parts, saved like a downloaded one."""
    return save_tiny_pipeline(tmp_path_factory.mktemp("pipeline") / "tiny-sd")


def _options(model: Path, **extra) -> DiffusersOptions:
    return tiny_options(model, batch_size=2, seed=7, **extra)


@pytest.mark.slow  # building and loading the pipeline imports diffusers and transformers (~20-60 s)
def test_img2img_and_inpainting_make_images_with_their_records(tiny_pipeline):
    torch.set_num_threads(1)
    fakes = list(generate_fakes(PANELS, _options(tiny_pipeline)))
    assert sorted((f.key, f.operation) for f in fakes) == [
        ("astronaut", "img2img"),
        ("astronaut", "inpaint"),
        ("chelsea", "img2img"),
        ("chelsea", "inpaint"),
    ]
    source = dict(PANELS)
    for fake in fakes:
        original = source[fake.key]
        assert fake.image.shape == original.shape and fake.image.dtype == np.uint8
        assert fake.meta["model"] == "tiny-sd" and fake.meta["steps"] == 2 and fake.meta["device"] == "cpu"
        assert fake.meta["dtype"] == "float32" and isinstance(fake.meta["seed"], int)
        if fake.operation == "img2img":
            assert fake.group == "diffusers_img2img_0.5" and fake.meta["strength"] == 0.5
            assert fake.meta["pipeline"] == "StableDiffusionImg2ImgPipeline" and fake.mask.all()
            assert np.abs(fake.image.astype(int) - original).mean() > 1  # re-generated
        else:
            assert fake.group == "diffusers_inpaint" and fake.meta["strength"] == 1.0
            assert fake.meta["pipeline"] == "StableDiffusionInpaintPipeline"
            assert fake.mask.any() and not fake.mask.all()
            assert np.array_equal(fake.image[~fake.mask], original[~fake.mask])  # the rest kept exactly
    again = list(generate_fakes(PANELS, _options(tiny_pipeline)))  # seeded per (seed, panel)
    assert all(np.array_equal(a.image, b.image) and a.meta == b.meta for a, b in zip(fakes, again))


@pytest.mark.slow
def test_generate_py_with_the_diffusers_backend_writes_a_manifest(tiny_pipeline, tmp_path):
    from datamodules.records import read_manifest
    from generate import generate
    from tests.helpers import compose_config

    source = tmp_path / "photos"
    source.mkdir()
    from datamodules.io import write_image

    for name in ("astronaut", "coffee", "chelsea"):
        write_image(source / f"{name}.png", getattr(data, name)()[::8, ::8].copy())
    cfg = compose_config(
        "generate",
        [
            f"source={source}",
            f"output={tmp_path / 'out'}",
            "generator=diffusers",
            f"generator.model={tiny_pipeline}",
            "generator.steps=3",
            "generator.device=cpu",
            "generator.strengths=[0.4]",
            "generator.guidance_scale=1.0",
            "workers=1",
            "progress=false",
            "panels.crops_per_photo=0",
            "panels.min_panel_side=32",
        ],
    )
    records = read_manifest(generate(cfg))
    groups = {r.group for r in records}
    assert groups == {"genuine", "diffusers_img2img_0.4", "diffusers_inpaint"}
    for r in records:
        if r.label == 1:
            meta = json.loads(Path(r.mask).with_suffix(".json").read_text())["meta"]
            assert meta["model"] == "tiny-sd" and meta["strength"] in (0.4, 1.0) and meta["steps"] == 3
            assert "seed" in meta and meta["prompt"] == "a photograph"
    assert (tmp_path / "out" / "contact_sheet.png").is_file()


def test_steps_too_few_for_a_strength_are_refused():
    with pytest.raises(ValueError, match="steps x strength"):
        DiffusersOptions(model="x", strengths=(0.4,), steps=2)


def test_missing_pipeline_parts_are_named(tmp_path, monkeypatch):
    with pytest.raises(DiffusersUnavailable, match="generator.model"):
        load_pipelines(DiffusersOptions(model=None))
    with pytest.raises(DiffusersUnavailable, match="does not exist"):
        load_pipelines(DiffusersOptions(model=str(tmp_path / "nowhere")))
    with pytest.raises(DiffusersUnavailable, match="model_index.json"):
        load_pipelines(DiffusersOptions(model=str(tmp_path)))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model_index.json").write_text(
        json.dumps(
            {
                "_class_name": "StableDiffusionImg2ImgPipeline",
                "unet": ["diffusers", "UNet2DConditionModel"],
                "vae": ["diffusers", "AutoencoderKL"],
                "safety_checker": [None, None],
            }
        )
    )
    (broken / "vae").mkdir()
    with pytest.raises(DiffusersUnavailable, match="unet"):
        load_pipelines(DiffusersOptions(model=str(broken)))
    monkeypatch.setitem(__import__("sys").modules, "diffusers", None)  # as if the extra were not installed
    with pytest.raises(DiffusersUnavailable, match=r"\.\[generate\]"):
        load_pipelines(DiffusersOptions(model=str(broken)))
