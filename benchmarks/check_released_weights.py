"""Check a detector's mapping of its authors' checkpoint against their own model (a script).

    python benchmarks/check_released_weights.py DUMP.pt [DUMP.pt ...]

A dump is what a short script next to the authors' code writes after building their model with
random weights and running it: `torch.save({"state_dict": their_model.state_dict(), "entry":
"model_state_dict" | "model", "input": images in [0, 1] (N x 3 x H x W), "outputs": their scores
(probabilities, N), "detector": our detector config with `_target_`}, path)`. This script stores the
state dict under `entry` as the authors' training code saves it, builds our detector from
`detector` with `pretrained` pointing at that file (the same path users take), scores `input`
and prints the largest absolute score difference. Nothing of the authors' code is needed here.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from detectors.build import build_detector  # noqa: E402


def check(dump_path: Path) -> float:
    dump = torch.load(dump_path, map_location="cpu", weights_only=True)
    with tempfile.TemporaryDirectory() as folder:
        released = Path(folder) / "released.pth"
        torch.save({dump.get("entry", "model_state_dict"): dump["state_dict"]}, released)
        net = build_detector({**dump["detector"], "pretrained": str(released)}).eval()
    with torch.no_grad():
        ours = torch.sigmoid(net(dump["input"].float())["logit"].float())
    expected = dump["outputs"].float().flatten()
    return float((ours - expected).abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dumps", nargs="+", type=Path)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    worst = 0.0
    for path in args.dumps:
        difference = check(path)
        worst = max(worst, difference)
        print(f"{path.name}: largest score difference {difference:.2e}")
    sys.exit(0 if worst <= args.tolerance else 1)


if __name__ == "__main__":
    main()
