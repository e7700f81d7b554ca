"""Check how a detector maps its authors' released weights against a dump of their own model.

    python -m tools.check_mapping cospy DUMP.pt
    python -m tools.check_mapping effort DUMP.pt
    python -m tools.check_mapping mvss DUMP.pt
    python -m tools.check_mapping trufor DUMP.pt [--config trufor]
    python -m tools.check_mapping released DUMP.pt [DUMP.pt ...]
    (every form takes one or more dumps and --tolerance, 1e-4 by default)

A dump is what a short script kept next to the authors' code writes after building their model
(random weights are enough) and running it on a fixed input: a `torch.save`d dict of plain tensors
and configs, read with `weights_only=True`. Every dump holds `input` (N x 3 x H x W RGB in [0, 1],
as the authors' test transform leaves it) and `outputs`; the rest depends on the detector:

- `cospy`: `variant`, `files` ({semantic, artifact, fusion} -> the state dicts the authors'
  `save_weights` writes), `clip_config` + `clip_state_dict` (an open_clip config for SD v1.4, a
  Hugging Face CLIPVisionConfig dict otherwise), `vae_config` + `vae_state_dict` (SD v1.4),
  `outputs` (fused logits) and `branch_logits` (N x 2).
- `effort`: `state_dict` (the authors' checkpoint, `module.` keys), `clip_config` +
  `clip_state_dict`, `outputs` (softmax probability of class 1). The file is also checked with the
  frozen SVD copies removed (W_main recomputed from the original CLIP).
- `mvss` (github.com/dong03/MVSS-Net, `get_mvss(sobel=True, constrain=True)`): `state_dict`,
  `channel_order` ("bgr": the authors' model was fed `(input.flip(1) - mean) / std`), `outputs`
  {`mask_logit`, `edge_logit_quarter`, `score`}.
- `trufor`: `state_dict` (published key names), `outputs` {`anomaly`: N x 2 x H x W logits,
  `confidence`: N x 1 x H x W logits, `detection`: N x 1 logits, optionally `fingerprint`}; the
  architecture comes from `--config` (a detector config name).
- `released` (any detector loading a `.pth` whose weights sit under one entry): `state_dict`,
  `entry` ("model_state_dict" | "model"), `detector` (our config with `_target_`), `outputs`
  (probabilities, N).

Our detector is rebuilt from those files the way a user would build it (a weights folder or file,
local tower folders; nothing of the authors' code is imported), runs on `input`, and the largest
absolute differences are printed as JSON. The exit status is 1 when a checked difference (the
scores, and the maps of the localizers) exceeds `--tolerance`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import torch

from detectors.blocks.weights import architecture_only
from detectors.build import build_detector

# the differences held to --tolerance; the others (logits, branch outputs) are printed for diagnosis
CHECKED = {
    "cospy": ("score",),
    "effort": ("score_full", "score_without_frozen_copies"),
    "mvss": ("mask_logit", "score", "edge_logit_quarter", "mask_probability"),
    "trufor": ("anomaly_probability", "confidence_probability", "score"),
    "released": ("score",),
}


def _largest(difference: torch.Tensor) -> float:
    return float(difference.abs().max())


def _hf_vision_folder(config: dict, state: dict, folder: Path, projection: bool) -> str:
    import transformers

    cls = transformers.CLIPVisionModelWithProjection if projection else transformers.CLIPVisionModel
    config = {k: v for k, v in config.items() if k not in ("transformers_version", "architectures")}
    model = cls(transformers.CLIPVisionConfig(**config))
    model.load_state_dict(state)
    model.save_pretrained(folder)
    return str(folder)


@torch.no_grad()
def check_cospy(dump: dict, workdir: Path) -> dict[str, float]:
    """Fused logits, scores and branch logits of our CoSpy built from a weights folder."""
    from detectors.cospy import RELEASE_FILES, CoSpy

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
    theirs = dump["outputs"].flatten()
    branches = torch.stack([out["logit_semantic"], out["logit_artifact"]], dim=1)
    return {
        "logit": _largest(out["logit"] - theirs),
        "score": _largest(out["logit"].sigmoid() - theirs.sigmoid()),
        "branch_logit": _largest(branches - dump["branch_logits"]),
    }


@torch.no_grad()
def check_effort(dump: dict, workdir: Path) -> dict[str, float]:
    """Scores for the full checkpoint and for one without the frozen SVD copies."""
    from detectors.effort import FROZEN_FACTOR_KEYS, Effort

    clip = _hf_vision_folder(dump["clip_config"], dump["clip_state_dict"], workdir / "clip", projection=False)
    full, slim = workdir / "effort_full.pth", workdir / "effort_without_frozen_copies.pth"
    state = dump["state_dict"]
    torch.save(state, full)
    frozen = FROZEN_FACTOR_KEYS + ("weight_main",)
    torch.save({k: v for k, v in state.items() if k.rsplit(".", 1)[-1] not in frozen}, slim)
    differences = {}
    for label, path in (("full", full), ("without_frozen_copies", slim)):
        net = Effort(clip=clip, pretrained=str(path)).eval()
        score = net(dump["input"])["logit"].sigmoid()
        differences[f"score_{label}"] = _largest(score - dump["outputs"].flatten())
    return differences


@torch.no_grad()
def check_mvss(dump: dict, workdir: Path) -> dict[str, float]:
    """Mask logits, edge logits at 1/4 and the image score (sigmoid of the map's maximum)."""
    from detectors.mvss import MVSSNet, map_authors_state_dict

    model = MVSSNet(backbone="resnet50", pretrained=None, channel_order=dump.get("channel_order", "bgr"))
    model.load_state_dict(map_authors_state_dict(dump["state_dict"]), strict=True)
    model.eval()
    image, theirs = dump["input"].float(), dump["outputs"]
    coarse, ours = model.coarse_logits(image), model(image)
    return {
        "mask_logit": _largest(ours["mask_logit"] - theirs["mask_logit"]),
        "score": _largest(torch.sigmoid(ours["logit"]) - theirs["score"]),
        "edge_logit_quarter": _largest(coarse["edge"] - theirs["edge_logit_quarter"]),
        "mask_probability": _largest(torch.sigmoid(ours["mask_logit"]) - torch.sigmoid(theirs["mask_logit"])),
        "mask_logit_range": _largest(theirs["mask_logit"]),
    }


@torch.no_grad()
def check_trufor(dump: dict, workdir: Path, config: str = "trufor") -> dict[str, float]:
    """Anomaly and confidence maps, image score and fingerprint of our TruFor (architecture from
    `config`, no pretrained files) with the published state dict mapped in."""
    from detectors.registry import net_config as composed
    from detectors.trufor_weights import map_published_state_dict

    net_config = composed(config)
    with architecture_only():
        # the dump's input is the authors' network input itself: no rescaling of 8-bit pixels here
        preprocess = {**net_config.get("preprocess", {}), "pixel_divisor": 255}
        model = build_detector(
            {**net_config, "pretrained": None, "encoder_weights": None, "phase": "full", "preprocess": preprocess}
        )
    model.load_state_dict(map_published_state_dict(dump["state_dict"]), strict=True)
    ours, theirs = model.eval()(dump["input"]), dump["outputs"]
    difference = {
        "anomaly_probability": torch.sigmoid(ours["mask_logit"]) - theirs["anomaly"].softmax(1)[:, 1:2],
        "mask_logit": ours["mask_logit"] - (theirs["anomaly"][:, 1:2] - theirs["anomaly"][:, 0:1]),
        "confidence_probability": torch.sigmoid(ours["confidence_logit"]) - torch.sigmoid(theirs["confidence"]),
        "confidence_logit": ours["confidence_logit"] - theirs["confidence"],
        "score": torch.sigmoid(ours["logit"]) - torch.sigmoid(theirs["detection"].reshape(-1)),
        "score_logit": ours["logit"] - theirs["detection"].reshape(-1),
    }
    if theirs.get("fingerprint") is not None:
        difference["fingerprint"] = ours["fingerprint"].expand_as(theirs["fingerprint"]) - theirs["fingerprint"]
    return {name: _largest(value) for name, value in difference.items()}


@torch.no_grad()
def check_released(dump: dict, workdir: Path) -> dict[str, float]:
    """Scores of our detector built with `pretrained` pointing at the released file, stored under
    `entry` as the authors' training code saves it (the path users take)."""
    released = workdir / "released.pth"
    torch.save({dump.get("entry", "model_state_dict"): dump["state_dict"]}, released)
    net = build_detector({**dump["detector"], "pretrained": str(released)}).eval()
    ours = torch.sigmoid(net(dump["input"].float())["logit"].float())
    return {"score": _largest(ours - dump["outputs"].float().flatten())}


CHECKS: dict[str, Callable[..., dict[str, float]]] = {
    "cospy": check_cospy,
    "effort": check_effort,
    "mvss": check_mvss,
    "trufor": check_trufor,
    "released": check_released,
}


def check_dump(kind: str, path: Path, **options) -> dict[str, float]:
    """The largest differences of one dump, computed in a scratch folder that is removed after."""
    dump = torch.load(path, map_location="cpu", weights_only=True)
    with tempfile.TemporaryDirectory() as workdir:
        return CHECKS[kind](dump, Path(workdir), **options)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("detector", choices=sorted(CHECKS), help="which mapping to check")
    parser.add_argument("dumps", nargs="+", type=Path, help="dumps of the authors' model")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest difference accepted (1e-4)")
    parser.add_argument("--config", default="trufor", help="trufor: the detector config giving the architecture")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.dumps if not path.is_file()]
    if missing:
        parser.error(f"no such dump: {', '.join(missing)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    options = {"config": args.config} if args.detector == "trufor" else {}
    check = partial(check_dump, args.detector, **options)
    worst_overall = 0.0
    for path in args.dumps:
        differences = check(path)
        checked = {name: differences[name] for name in CHECKED[args.detector] if name in differences}
        worst = max(checked, key=checked.get)
        worst_overall = max(worst_overall, checked[worst])
        print(json.dumps({"dump": str(path), "detector": args.detector, "max_abs_difference": differences}, indent=2))
        verdict = "OK" if checked[worst] <= args.tolerance else "FAIL"
        print(
            f"{verdict}: {path.name}: largest checked difference {checked[worst]:.2e} ({worst}), "
            f"tolerance {args.tolerance:g}"
        )
    return 0 if worst_overall <= args.tolerance else 1


if __name__ == "__main__":
    raise SystemExit(main())
