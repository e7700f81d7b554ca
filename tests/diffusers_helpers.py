"""Tiny randomly initialized diffusers pipelines, saved with `save_pretrained` as a downloaded one
is: the parts are a few kilobytes, so loading and sampling one takes about a second on a CPU."""

from __future__ import annotations

import json
from pathlib import Path


def _tokenizer(folder: Path):
    """A CLIP BPE tokenizer with a 54-token vocabulary, written to disk: built offline."""
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


def save_tiny_pipeline(folder: Path, kind: str = "sd", seed: int = 0) -> Path:
    """A pipeline of tiny random parts in `folder`: `kind="sd"` a Stable Diffusion img2img pipeline
    (with an inpainting variant), `"lcm"` a latent consistency model (img2img only). Other seeds
    give other weights of the same sizes, as a fine-tune of a model does."""
    import torch
    from diffusers import (
        AutoencoderKL,
        DDIMScheduler,
        LatentConsistencyModelPipeline,
        LCMScheduler,
        StableDiffusionImg2ImgPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(seed)
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
        time_cond_proj_dim=8 if kind == "lcm" else None,  # an LCM's U-Net takes the guidance scale
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
    pipeline, scheduler = {
        "sd": (StableDiffusionImg2ImgPipeline, DDIMScheduler),
        "lcm": (LatentConsistencyModelPipeline, LCMScheduler),
    }[kind]
    pipe = pipeline(
        vae=vae,
        text_encoder=text,
        tokenizer=_tokenizer(folder.parent / f"{folder.name}_tokenizer"),
        unet=unet,
        scheduler=scheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(folder)
    return folder


def write_small_photos(folder: Path) -> Path:
    """Three bundled photographs at an eighth of their size: a source folder a tiny pipeline is quick on."""
    from skimage import data

    from datamodules.io import write_image

    for name in ("astronaut", "coffee", "chelsea"):
        write_image(folder / f"{name}.png", getattr(data, name)()[::8, ::8].copy())
    return folder


def tiny_options(model: Path, **changes):
    """`DiffusersOptions` a tiny pipeline samples quickly on a CPU (two steps, strength 0.5, every
    panel faked both ways), with `changes` applied."""
    from synthesis.diffusers_backend import DiffusersOptions

    settings = {"strengths": (0.5,), "img2img": 1.0, "inpaint": 1.0, "steps": 2, "guidance_scale": 1.0}
    return DiffusersOptions(model=str(model), **{**settings, "batch_size": 1, "device": "cpu", **changes})
