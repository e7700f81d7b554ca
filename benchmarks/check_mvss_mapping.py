"""Check the MVSS-Net key mapping against a dump of the authors' model (a script).

    python benchmarks/check_mvss_mapping.py DUMP.pt [--tolerance 1e-4]

DUMP.pt is what you save after running the authors' model (github.com/dong03/MVSS-Net,
`get_mvss(sobel=True, constrain=True)`, any weights) on a fixed input, with `torch.save`:
`{"state_dict": model.state_dict(), "input": RGB in [0, 1] (N, 3, H, W), "channel_order": "bgr",
"outputs": {"mask_logit": their seg output, "edge_logit_quarter": their edge output}}`, where the
authors' model was fed `(input.flip(1) - mean) / std` as their inference does. This script does not
import their code: it maps the state dict with `detectors.mvss.map_authors_state_dict`, runs our
`MVSSNet` on the same input and prints the largest differences (mask logits, edge logits at 1/4,
image score = sigmoid of the max logit). Exit status 1 when one exceeds `--tolerance`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from detectors.mvss import MVSSNet, map_authors_state_dict  # noqa: E402


def compare(dump: dict) -> dict[str, float]:
    """Largest absolute differences between the dumped outputs and ours on the dumped input."""
    model = MVSSNet(backbone="resnet50", pretrained=None, channel_order=dump.get("channel_order", "bgr"))
    model.load_state_dict(map_authors_state_dict(dump["state_dict"]), strict=True)
    model.eval()
    image, expected = dump["input"].float(), dump["outputs"]
    with torch.no_grad():
        coarse = model.coarse_logits(image)
        ours = model(image)
    differences = {
        "mask_logit": (ours["mask_logit"] - expected["mask_logit"]).abs().max().item(),
        "score": (torch.sigmoid(ours["logit"]) - expected["score"]).abs().max().item(),
        "edge_logit_quarter": (coarse["edge"] - expected["edge_logit_quarter"]).abs().max().item(),
    }
    differences["mask_probability"] = (torch.sigmoid(ours["mask_logit"])
                                       - torch.sigmoid(expected["mask_logit"])).abs().max().item()
    differences["mask_logit_range"] = expected["mask_logit"].abs().max().item()
    return differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump", type=Path)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(argv)
    dump = torch.load(args.dump, map_location="cpu", weights_only=True)
    differences = compare(dump)
    print(json.dumps(differences, indent=2))
    checked = {k: v for k, v in differences.items() if k != "mask_logit_range"}
    worst = max(checked, key=checked.get)
    ok = checked[worst] <= args.tolerance
    print(f"{'OK' if ok else 'FAIL'}: largest difference {checked[worst]:.3g} ({worst}), tolerance {args.tolerance:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
