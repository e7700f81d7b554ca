"""generator=diffusers on a tiny randomly initialized Stable Diffusion pipeline built here (no weight files)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import data

from synthesis.diffusers_backend import DiffusersOptions, DiffusersUnavailable, generate_fakes, load_pipelines

PANELS = [
    ("astronaut", data.astronaut()[::16, ::16].copy()),  # 32 x 32
    ("chelsea", data.chelsea()[::10, ::10].copy()),
]  # 30 x 46: padded to the pipeline's multiple inside


def _tokenizer(folder: Path):
    """A CLIP BPE tokenizer with a 60-token vocabulary, written to disk: built offline."""
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for i, c in enumerate("abcdefghijklmnopqrstuvwxyz"):
        vocab[c], vocab[c + "</w>"] = 2 + 2 * i, 3 + 2 * i
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return CLIPTokenizer(
        vocab_file=str(folder / "vocab.json"), merges_file=str(folder / "merges.txt"), model_max_length=8
    )


@pytest.fixture(scope="module")
def tiny_pipeline(tmp_path_factory) -> Path:
    """A Stable Diffusion img2img pipeline of tiny random parts, saved like a downloaded one."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionImg2ImgPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    root = tmp_path_factory.mktemp("pipeline")
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16,
        attention_head_dim=2,
        norm_num_groups=4,
    )
    vae = AutoencoderKL(
        block_out_channels=[8, 16],
        down_block_types=["DownEncoderBlock2D"] * 2,
        up_block_types=["UpDecoderBlock2D"] * 2,
        latent_channels=4,
        norm_num_groups=4,
    )
    text = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_attention_heads=2,
            num_hidden_layers=1,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
            max_position_embeddings=8,
            projection_dim=16,
        )
    )
    pipe = StableDiffusionImg2ImgPipeline(
        vae=vae,
        text_encoder=text,
        tokenizer=_tokenizer(root / "tok"),
        unet=unet,
        scheduler=DDIMScheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(root / "tiny-sd")
    return root / "tiny-sd"


def _options(model: Path, **extra) -> DiffusersOptions:
    return DiffusersOptions(
        model=str(model),
        strengths=(0.5,),
        img2img=1.0,
        inpaint=1.0,
        steps=2,
        guidance_scale=1.0,
        batch_size=2,
        device="cpu",
        seed=7,
        **extra,
    )


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
