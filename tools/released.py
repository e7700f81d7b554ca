"""A toolkit checkpoint from a detector config and its authors' released weights.

    python -m tools.released cospy --output cospy_sd14.ckpt \
        net.pretrained=/weights/cospy/sd-v1_4 net.vae=/models/stable-diffusion-v1-4
    python -m tools.released effort --output effort_chameleon.ckpt \
        net.pretrained=/weights/effort_chameleon.pth [--threshold 0.5]

The detector is composed from `configs/detector/<detector>.yaml` with the `net.key=value` overrides
(so its pretrained backbones are read from the local caches and the released weights
mapped in, exactly as `train.py` would), then saved as a `.ckpt` that `infer.py`, `export.py`,
`calibrate.py` and `python -m tools.fraudbench_table` take like any trained checkpoint. The
checkpoint holds every weight and its backbones' architectures, so the machines that use it need
neither the released files nor the backbone caches or folders. The threshold defaults to 0.5, the
authors' operating point.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

import torch

from detectors.blocks.released import IncompatibleWeightsError
from detectors.blocks.weights import MissingWeightsError
from detectors.module import DetectorModule
from detectors.registry import create_module, detector_config, list_detectors
from detectors.run_config import weights_settings

log = logging.getLogger(__name__)


def build_released(detector: str, overrides: Sequence[str] = (), threshold: float = 0.5) -> DetectorModule:
    """The detector named `detector` with `net.key=value` overrides applied, weights loaded."""
    if detector not in list_detectors():
        raise SystemExit(f"unknown detector {detector!r}; known: {', '.join(list_detectors())}")
    bad = [o for o in overrides if not o.startswith("net.") or "=" not in o]
    if bad:
        raise SystemExit(f"overrides must look like net.key=value, got {bad}")
    if not 0.0 <= float(threshold) <= 1.0:
        raise SystemExit(f"--threshold is a probability between 0 and 1, got {threshold}")
    try:
        module = create_module(detector, [f"++{o}" for o in overrides])  # `++`: set, or add if absent
    except ValueError as error:  # a key the network does not take, a setting out of its range
        raise SystemExit(f"{detector}: {error}") from None
    net = module.net
    if not getattr(getattr(net, "score_model", None), "fitted", True):
        raise SystemExit(f"{detector} has score models fitted on pairs: make its checkpoint with train.py")
    learned = any(p.requires_grad for p in net.parameters())
    if learned and not module.hparams["net"].get("pretrained"):  # never random weights without a word
        log.warning(
            "%s: no released weights were given (net.pretrained=PATH), so its learned weights are random "
            "(what its backbone settings load aside): train it with train.py for a checkpoint that detects",
            detector,
        )
    module.threshold.fill_(float(threshold))
    return module.eval()


HF_ARCHITECTURE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "image_size",
    "patch_size",
    "projection_dim",
    "hidden_act",
    "layer_norm_eps",
    "num_channels",
)


def self_contained_net_config(module: DetectorModule) -> dict:
    """The network's hyper-parameters with every file reference replaced by what it held.

    Backbones named by a cache id or a local folder become their architecture configs, and the
    released weight files are dropped: the state dict carries all weights, so the checkpoint
    rebuilds anywhere (the backbones' own files are not needed where it is used).
    """
    from detectors.blocks.clip import clip_model_config

    net, config = module.net, dict(module.hparams["net"])
    for key in ("pretrained", "init_semantic", "init_artifact"):
        if key in config:
            config[key] = None
    if isinstance(config.get("clip"), str):
        tower = getattr(getattr(net, "semantic", None), "encoder", None) or getattr(net, "backbone", None)
        hf_config = getattr(tower, "config", None)
        if hf_config is not None:
            config["clip"] = {k: getattr(hf_config, k) for k in HF_ARCHITECTURE_KEYS if hasattr(hf_config, k)}
        else:  # an open_clip tower, named as open_clip knows it
            config["clip"], config["clip_pretrained"] = clip_model_config(config["clip"]), None
    if isinstance(config.get("vae"), str):
        vae = net.artifact.reconstruction.vae
        config["vae"] = {k: v for k, v in dict(vae.config).items() if not k.startswith("_")}
    return config


def save_checkpoint(module: DetectorModule, output: str | Path) -> Path:
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    hparams = {**dict(module.hparams), "net": self_contained_net_config(module)}
    torch.save({"hyper_parameters": hparams, "state_dict": module.state_dict()}, output)
    return output


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("detector", help="a config name of configs/detector/ (cospy, effort, ...)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="net.KEY=VALUE",
        help="network settings, such as net.pretrained=PATH (the released weights)",
    )
    parser.add_argument("--output", type=Path, required=True, help="the .ckpt to write")
    parser.add_argument("--threshold", type=float, default=0.5, help="decision threshold (0.5, the authors')")
    return parser.parse_intermixed_args(argv)


def main(argv: Sequence[str] | None = None) -> Path:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        module = build_released(args.detector, args.overrides, args.threshold)
    except (MissingWeightsError, IncompatibleWeightsError) as error:  # as train.py says them: one message
        named = weights_settings(detector_config(args.detector, args.overrides).net, prefix="net.")
        raise SystemExit(f"{args.detector}: {error}\n{named}".rstrip()) from None
    path = save_checkpoint(module, args.output)
    log.info("wrote %s", path)
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
