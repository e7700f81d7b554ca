"""Check a released-checkpoint key mapping against the authors' own model (a script).

    python benchmarks/check_mapping.py cospy  dump.pt
    python benchmarks/check_mapping.py effort dump.pt

A dump is what a small script (kept outside this repository, next to the authors' code) writes
after building the authors' model with random weights and tiny random towers and running it:
`torch.save` of a dict with plain tensors and configs only (read with `weights_only=True`):
- `input`: N x 3 x H x W RGB in [0, 1], preprocessed as the authors' test transform leaves it;
- `outputs`: the authors' score logits (CO-SPY: fused logit; Effort: softmax probability of class 1);
- `clip_config`, `clip_state_dict`: the random tower (open_clip config + state dict for CO-SPY
  SD v1.4; a Hugging Face CLIPVisionConfig dict + state dict otherwise);
- CO-SPY: `variant`, `files` ({semantic, artifact, fusion} -> the state dicts the authors' `save_weights`
  writes), `vae_config` + `vae_state_dict` (SD v1.4), `branch_logits` (N x 2);
- Effort: `state_dict` (the authors' checkpoint, `module.` keys).
The tool rebuilds our detector from those files exactly as a user would (a weights folder or file,
local tower folders), runs it on `input` and prints the largest differences. For Effort it also
checks the file with the frozen SVD copies removed (W_main recomputed from the original CLIP).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from detectors.cospy import RELEASE_FILES, CoSpy  # noqa: E402
from detectors.effort import FROZEN_FACTOR_KEYS, Effort  # noqa: E402


def _hf_vision_folder(config: dict, state: dict, folder: Path, projection: bool) -> str:
    import transformers

    cls = transformers.CLIPVisionModelWithProjection if projection else transformers.CLIPVisionModel
    config = {k: v for k, v in config.items() if k not in ("transformers_version", "architectures")}
    model = cls(transformers.CLIPVisionConfig(**config))
    model.load_state_dict(state)
    model.save_pretrained(folder)
    return str(folder)


@torch.no_grad()
def check_cospy(dump: dict, workdir: Path) -> dict:
    """Max |logit difference| of the fused and branch logits; our model built from a weights folder."""
    weights = workdir / "cospy_weights"
    weights.mkdir()
    for part, name in RELEASE_FILES.items():
        torch.save(dump["files"][part], weights / name)
    variant = dump["variant"]
    if variant == "sd-v1.4":
        from diffusers import AutoencoderKL

        clip, clip_pretrained = dump["clip_config"], str(workdir / "clip.pt")
        torch.save(dump["clip_state_dict"], clip_pretrained)
        vae_model = AutoencoderKL.from_config(dump["vae_config"])
        vae_model.load_state_dict(dump["vae_state_dict"])
        vae_model.save_pretrained(workdir / "vae")
        vae = str(workdir / "vae")
    else:
        clip = _hf_vision_folder(dump["clip_config"], dump["clip_state_dict"], workdir / "clip", projection=True)
        clip_pretrained, vae = None, None
    net = CoSpy(variant=variant, clip=clip, clip_pretrained=clip_pretrained, vae=vae, pretrained=str(weights)).eval()
    out = net(dump["input"])
    ours = torch.stack([out["logit_semantic"], out["logit_artifact"]], dim=1)
    return {"detector": f"cospy ({variant})", "images": len(dump["input"]),
            "max_abs_logit_difference": float((out["logit"] - dump["outputs"].flatten()).abs().max()),
            "max_abs_score_difference": float((out["logit"].sigmoid() - dump["outputs"].flatten().sigmoid()).abs().max()),
            "max_abs_branch_logit_difference": float((ours - dump["branch_logits"]).abs().max())}


@torch.no_grad()
def check_effort(dump: dict, workdir: Path) -> dict:
    """Max |score difference| for the full checkpoint and for one without the frozen SVD copies."""
    clip = _hf_vision_folder(dump["clip_config"], dump["clip_state_dict"], workdir / "clip", projection=False)
    full, slim = workdir / "effort_full.pth", workdir / "effort_without_frozen_copies.pth"
    state = dump["state_dict"]
    torch.save(state, full)
    frozen = FROZEN_FACTOR_KEYS + ("weight_main",)
    torch.save({k: v for k, v in state.items() if k.rsplit(".", 1)[-1] not in frozen}, slim)
    result = {"detector": "effort", "images": len(dump["input"])}
    for label, path in (("full", full), ("without_frozen_copies", slim)):
        net = Effort(clip=clip, pretrained=str(path)).eval()
        score = net(dump["input"])["logit"].sigmoid()
        result[f"max_abs_score_difference_{label}"] = float((score - dump["outputs"].flatten()).abs().max())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("detector", choices=["cospy", "effort"])
    parser.add_argument("dump", type=Path)
    args = parser.parse_args()
    dump = torch.load(args.dump, map_location="cpu", weights_only=True)
    with tempfile.TemporaryDirectory() as workdir:
        check = check_cospy if args.detector == "cospy" else check_effort
        print(json.dumps(check(dump, Path(workdir)), indent=2))


if __name__ == "__main__":
    main()
