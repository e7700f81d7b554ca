"""How far the toolkit's released-weight path is from the authors' own outputs (a script).

    python benchmarks/golden_gaps.py

For each family in `tests/data/golden/` (TruFor, MVSS-Net: small networks with random weights in
the authors' key names, an 8-bit PNG, the authors' outputs on it; README there), the weights go
through the released-weight loader (`tools.released`) into a checkpoint, the PNG is decoded
and scored as `infer.py` does, and the largest and mean absolute differences of the probability
map and the image score are printed, plus the map `infer.py` writes (8 bits) against the authors'
map. For TruFor the same is printed with 8-bit pixels divided by 255 instead of the authors' 256
(`preprocess.pixel_divisor`), the gap the published layout had before it divided by 256.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from datamodules.geometry import to_network_input
from datamodules.io import read_image
from inference.masks import to_uint8_map
from inference.runtime import load_runtime
from tools.released import build_released, save_checkpoint

ROOT = Path(__file__).resolve().parents[1]

GOLDEN = ROOT / "tests" / "data" / "golden"
# the small configurations the golden networks were built with, shared with the golden tests
SMALL = json.loads((GOLDEN / "small_configs.json").read_text())


def authors_map(family: str, authors: dict) -> np.ndarray:
    if family == "trufor":
        return authors["map"].astype(np.float64)
    return 1 / (1 + np.exp(-authors["mask_logit"].astype(np.float64)))


def gaps(family: str, extra: list[str], folder: Path) -> dict[str, float]:
    weights, overrides = SMALL[family]["weights"], SMALL[family]["overrides"]
    data = GOLDEN / family
    module = build_released(family, [f"net.pretrained={data / weights}", *overrides, *extra])
    runtime = load_runtime(save_checkpoint(module, folder / f"{family}.ckpt"), "cpu")
    outputs = runtime.predict(to_network_input([read_image(data / "input.png")]))
    authors = dict(np.load(data / "authors_outputs.npz"))
    expected = authors_map(family, authors)
    ours = outputs["mask"][0, 0].astype(np.float64)
    written = to_uint8_map(ours, ours.shape).astype(np.float64) / 255
    difference = np.abs(ours - expected)
    result = {
        "map_max": float(difference.max()),
        "map_mean": float(difference.mean()),
        "score": float(abs(float(outputs["score"][0]) - float(authors["score"]))),
        "written_map_max": float(np.abs(written - expected).max()),
    }
    if "map_uint8" in authors:  # the authors' own 8-bit map file (MVSS-Net's inference writes one)
        authors_png = authors["map_uint8"] / 255
        result["written_vs_authors_png_max"] = float(np.abs(written - authors_png).max())
    return result


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    report = {}
    with tempfile.TemporaryDirectory() as folder:
        report["trufor (pixels / 256, published layout)"] = gaps("trufor", [], Path(folder))
        report["trufor (pixels / 255)"] = gaps("trufor", ["net.preprocess.pixel_divisor=255"], Path(folder))
        report["mvss (bgr)"] = gaps("mvss", [], Path(folder))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
