"""The released-weight mappings of CO-SPY, Effort, ForgeLens and IAPL reproduce their authors' code.

Each `tests/data/golden/<family>/*.npz` holds what the authors' own model code produced on a small
configuration with random weights (see the README there): the state dict under the authors' key
names, 8-bit RGB input images and the authors' outputs from those pixels. Each test writes the
weights as the authors' files, loads them the way a user does (`pretrained:`), takes the images
through the toolkit's own reading and preprocessing (`read_image`, the detector's `Preprocess`)
and must give the authors' outputs. A mapping that swaps two tensors of one shape, a channel order,
a scale or a crop offset changes those outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules.geometry import eval_geometry, to_network_input
from datamodules.io import read_image

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"


def load_golden(family: str, name: str) -> tuple[dict[str, np.ndarray], dict]:
    with np.load(GOLDEN / family / f"{name}.npz", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return arrays, json.loads(str(arrays.pop("meta")))


def authors_file(arrays: dict[str, np.ndarray], name: str) -> dict[str, torch.Tensor]:
    """The tensors stored under `name|key`, in float32 as the authors save them (stored in fp16
    where that is exact)."""
    state = {}
    for key, value in arrays.items():
        if key.startswith(name + "|"):
            tensor = torch.from_numpy(value)
            state[key[len(name) + 1 :]] = tensor.float() if tensor.is_floating_point() else tensor
    assert state, f"no tensors stored for {name}"
    return state


def images(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [arrays[f"image{i}"] for i in range(sum(k.startswith("image") for k in arrays))]


@torch.no_grad()
def score_from_pixels(net: torch.nn.Module, pixels: list[np.ndarray], folder: Path) -> dict[str, torch.Tensor]:
    """The path `infer.py` takes: an RGB image file, read, brought to the input size by the
    detector's preprocessing, scaled to [0, 1], normalized inside the network."""
    geometry = eval_geometry(net.preprocess)
    batch = []
    for index, image in enumerate(pixels):
        path = folder / f"image{index}.png"
        Image.fromarray(image).save(path)
        batch.append(geometry(read_image(path)))
    return net.eval()(torch.from_numpy(to_network_input(batch)))


def assert_close(ours: torch.Tensor, authors: np.ndarray) -> None:
    expected = torch.from_numpy(np.asarray(authors)).float().reshape(ours.shape)
    torch.testing.assert_close(ours.float(), expected, rtol=5e-5, atol=2e-6)


def save_hf_clip(config: dict, state: dict[str, torch.Tensor], folder: Path, projection: bool) -> str:
    """A Hugging Face CLIP vision folder (`save_pretrained`), as users pass the original CLIP."""
    import transformers

    cls = transformers.CLIPVisionModelWithProjection if projection else transformers.CLIPVisionModel
    model = cls(transformers.CLIPVisionConfig(**config))
    model.load_state_dict(state, strict=False)
    missing = {k for k in model.state_dict() if "position_ids" not in k} - set(state)
    assert not missing, f"tower weights missing from the golden file: {sorted(missing)[:5]}"
    model.save_pretrained(folder)
    return str(folder)


def cospy_weights_folder(arrays: dict[str, np.ndarray], folder: Path) -> str:
    """The authors' released folder: `semantic_weights.pth`, `artifact_weights.pth`,
    `fusion_weights.pth`."""
    folder.mkdir()
    for name in ("semantic_weights.pth", "artifact_weights.pth", "fusion_weights.pth"):
        torch.save(authors_file(arrays, name), folder / name)
    return str(folder)


def test_cospy_sd14_released_folder_gives_the_authors_logits_from_pixels(tmp_path):
    """SigLIP-style open_clip tower at 384 px (mean = std = 0.5), the VAE residual at 224 px and
    the fusion layer, with the authors' Resize(384) + CenterCrop(384) on a landscape and a
    portrait image (odd and even crop margins)."""
    import diffusers

    from detectors.cospy import CoSpy

    arrays, meta = load_golden("cospy", "sd-v1_4")
    clip_file = tmp_path / "open_clip_tower.pt"
    torch.save(authors_file(arrays, "clip"), clip_file)
    # their artifact file carries the frozen SD VAE they ran with: a diffusers folder, as users
    # pass it
    artifact = authors_file(arrays, "artifact_weights.pth")
    vae = diffusers.AutoencoderKL.from_config(meta["vae_config"])
    prefix = "artifact_encoder.vae."
    vae.load_state_dict({k[len(prefix) :]: v for k, v in artifact.items() if k.startswith(prefix)})
    vae.save_pretrained(tmp_path / "vae")
    net = CoSpy(
        variant="sd-v1.4",
        clip=meta["clip_config"],
        clip_pretrained=str(clip_file),
        vae=str(tmp_path / "vae"),
        artifact_width=8,
        pretrained=cospy_weights_folder(arrays, tmp_path / "sd-v1_4"),
    )
    out = score_from_pixels(net, images(arrays), tmp_path)
    branches = torch.stack([out["logit_semantic"], out["logit_artifact"]], dim=1)
    assert_close(branches, arrays["branch_logits"])
    assert_close(out["logit"], arrays["outputs"])


def test_cospy_progan_released_folder_gives_the_authors_logits_from_pixels(tmp_path):
    """Hugging Face CLIP `get_image_features` (CLIP mean/std) and the NPR residual (ImageNet
    mean/std), with the authors' Resize(256) + CenterCrop(224)."""
    from detectors.cospy import CoSpy

    arrays, meta = load_golden("cospy", "progan")
    clip = save_hf_clip(meta["clip_config"], authors_file(arrays, "clip"), tmp_path / "clip", projection=True)
    net = CoSpy(
        variant="progan",
        clip=clip,
        clip_pretrained=None,
        vae=None,
        pretrained=cospy_weights_folder(arrays, tmp_path / "progan"),
        artifact_width=8,
    )
    out = score_from_pixels(net, images(arrays), tmp_path)
    branches = torch.stack([out["logit_semantic"], out["logit_artifact"]], dim=1)
    assert_close(branches, arrays["branch_logits"])
    assert_close(out["logit"], arrays["outputs"])


def test_effort_released_checkpoint_gives_the_authors_probabilities_from_pixels(tmp_path):
    """SVD-residual attention projections (`weight_main` + U S V residual), the pooled CLS and the
    two-class head, from their demo's BGR read, cv2 resize to 224 x 224 and CLIP mean/std."""
    from detectors.effort import Effort

    arrays, meta = load_golden("effort", "effort")
    checkpoint = tmp_path / "ckpt_best.pth"
    torch.save(authors_file(arrays, "ckpt_best.pth"), checkpoint)
    net = Effort(clip=meta["clip_config"], pretrained=str(checkpoint))
    out = score_from_pixels(net, images(arrays), tmp_path)
    assert_close(out["class_logits"], arrays["class_logits"])
    assert_close(torch.sigmoid(out["logit"]), arrays["outputs"])


@pytest.mark.parametrize("stage", [1, 2])
def test_forgelens_released_checkpoint_gives_the_authors_logits_from_pixels(tmp_path, stage):
    """Weight-shared guidance modules (3 blocks sharing 2 modules), the per-layer CLS tokens through
    FAFormer (stage 2) or the stage-1 head, with their tiling of small images and CenterCrop(224).
    The stage-1 file is the stage-2 file's `backbone.` net, as their stage-1 trainer saves it."""
    from detectors.forgelens import ForgeLens

    arrays, meta = load_golden("forgelens", "forgelens")
    state = authors_file(arrays, "model_state_dict")
    if stage == 1:
        state = {k[len("backbone.") :]: v for k, v in state.items() if k.startswith("backbone.")}
    checkpoint = tmp_path / "forgelens.pth"
    torch.save({"model_state_dict": state, "epoch": 0}, checkpoint)
    net = ForgeLens(
        model=meta["clip_config"],
        clip_pretrained=None,
        pretrained=str(checkpoint),
        stage=stage,
        faformer_heads=meta["faformer_heads"],
    )
    out = score_from_pixels(net, images(arrays), tmp_path)
    assert_close(out["logit"], arrays[f"outputs_stage{stage}"])


def test_iapl_released_checkpoint_gives_the_authors_logits_from_pixels(tmp_path):
    """Context tokens, two deep prompts with their gates, adapters on blocks 0 and 2 and the DCT
    condition module (its auxiliary head too), with their GenImage test transform (tiling,
    CenterCrop(224), their mean/std)."""
    from detectors.iapl import IAPL

    arrays, meta = load_golden("iapl", "iapl")
    checkpoint = tmp_path / "checkpoint.pth"
    torch.save({"model": authors_file(arrays, "model"), "epoch": 0}, checkpoint)
    net = IAPL(
        model=meta["clip_config"],
        clip_pretrained=None,
        pretrained=str(checkpoint),
        n_ctx=meta["n_ctx"],
        prompt_depth=meta["prompt_depth"],
        adapter_layers=meta["adapter_layers"],
        preprocess={"size": 224, "mode": "tile", "mean": meta["mean"], "std": meta["std"]},
    )
    out = score_from_pixels(net, images(arrays), tmp_path)
    assert_close(out["aux_logit"], arrays["aux_outputs"])
    assert_close(out["logit"], arrays["outputs"])
