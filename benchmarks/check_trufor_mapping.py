"""Check our TruFor key mapping against a dump of the authors' model (a script).

    python benchmarks/check_trufor_mapping.py dump.pt [--config configs/detector/trufor.yaml]

`dump.pt` is a `torch.save`d dict with `state_dict` (the authors' network, published key names),
`input` (N x 3 x H x W in [0, 1]) and `outputs` (`anomaly`: N x 2 x H x W logits, `confidence`:
N x 1 x H x W logits, `detection`: N x 1 logits, optionally `fingerprint`), produced by running
the authors' released code on that input. The state dict goes through
`detectors.trufor_weights.map_published_state_dict` into our `trufor` (architecture from the
config, no pretrained files needed), which runs on the same input; the script prints the largest
absolute difference of the anomaly probability map, the confidence map (probability and logit),
the image score (probability and logit) and the fingerprint, and exits 1 when one exceeds
`--tolerance`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from detectors.blocks.weights import architecture_only  # noqa: E402
from detectors.build import build_detector  # noqa: E402
from detectors.trufor_weights import map_published_state_dict  # noqa: E402


def compare(dump: dict, net_config: dict) -> dict[str, float]:
    """Largest absolute differences between the dump's outputs and ours on the dump's input."""
    # the dump's input is the authors' network input itself: no rescaling of 8-bit pixels here
    preprocess = {**net_config.get("preprocess", {}), "pixel_divisor": 255}
    with architecture_only():
        model = build_detector({**net_config, "pretrained": None, "encoder_weights": None, "phase": "full",
                                "preprocess": preprocess})
    model.load_state_dict(map_published_state_dict(dump["state_dict"]), strict=True)
    model.eval()
    with torch.no_grad():
        ours = model(dump["input"])
    theirs = dump["outputs"]
    difference = {
        "anomaly_probability": (torch.sigmoid(ours["mask_logit"]) - theirs["anomaly"].softmax(1)[:, 1:2]),
        "mask_logit": ours["mask_logit"] - (theirs["anomaly"][:, 1:2] - theirs["anomaly"][:, 0:1]),
        "confidence_probability": torch.sigmoid(ours["confidence_logit"]) - torch.sigmoid(theirs["confidence"]),
        "confidence_logit": ours["confidence_logit"] - theirs["confidence"],
        "score": torch.sigmoid(ours["logit"]) - torch.sigmoid(theirs["detection"].reshape(-1)),
        "score_logit": ours["logit"] - theirs["detection"].reshape(-1),
    }
    if "fingerprint" in theirs and theirs["fingerprint"] is not None:
        difference["fingerprint"] = ours["fingerprint"].expand_as(theirs["fingerprint"]) - theirs["fingerprint"]
    return {name: float(value.abs().max()) for name, value in difference.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dump", type=Path)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "detector" / "trufor.yaml")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(argv)
    if not args.dump.is_file():
        parser.error(f"{args.dump} does not exist")
    dump = torch.load(args.dump, map_location="cpu", weights_only=True)
    net_config = yaml.safe_load(args.config.read_text())["net"]
    differences = compare(dump, net_config)
    size = list(dump["input"].shape)
    print(json.dumps({"input": size, "max_abs_difference": differences}, indent=2))
    probabilities = [v for k, v in differences.items() if "logit" not in k and k != "fingerprint"]
    return 0 if max(probabilities) <= args.tolerance else 1


if __name__ == "__main__":
    raise SystemExit(main())
