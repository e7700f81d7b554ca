"""Did phase 1 work? Chain separation and splice visibility of a trufor fingerprint (a script).

    python benchmarks/fingerprint_separation.py --manifest data/manifest.csv \
        [--checkpoint runs/phase1/checkpoints/last.ckpt] [--config configs/detector/trufor_tiny.yaml]
        [--size 96] [--patch 16] [--pool 8] [--images 24]

On the *test* split's genuine photos (held out from phase-1 training) every photo is cropped and
passed through every processing chain; the extractor's fingerprints are cut into tiles and
`detectors.blocks.noiseprint.chain_separation_auroc` reports how well the tile distance tells
same-chain pairs (of different photos) from different-chain pairs (0.5 = chance). Then each photo
gets a square from itself processed by another chain pasted in (a splice with no visible seam):
the fingerprint's local log-energy, scored against the pasted square, gives a pixel AUROC per
image, averaged ("does the spliced region stand out"). With `--checkpoint` the trained extractor
is measured next to the same architecture with random weights (`--config`), in the same run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from datamodules.chains import DEFAULT_CHAINS, apply_chain, crop  # noqa: E402
from datamodules.io import read_image  # noqa: E402
from datamodules.records import read_manifest  # noqa: E402
from detectors.blocks.noiseprint import NoiseFingerprint, chain_separation_auroc  # noqa: E402


def extractor_from(config: Path, checkpoint: Path | None) -> NoiseFingerprint:
    settings = {**{"depth": 17, "width": 64}, **yaml.safe_load(config.read_text())["net"].get("fingerprint", {})}
    extractor = NoiseFingerprint(depth=int(settings["depth"]), width=int(settings["width"]))
    if checkpoint is not None:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
        extractor.load_state_dict({k[len("net.fingerprint."):]: v for k, v in state.items()
                                   if k.startswith("net.fingerprint.")})
    return extractor.eval()


def chain_batch(photos: list[np.ndarray], chains: list[str], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every photo through every chain: centred 2*size crop, chain, centred size crop."""
    images, labels = [], []
    for photo in photos:
        for index, chain in enumerate(chains):
            images.append(crop(apply_chain(crop(photo, 2 * size, None), chain), size, None))
            labels.append(index)
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255, torch.tensor(labels)


def splice_auroc(extractor: NoiseFingerprint, photos: list[np.ndarray], size: int, chain: str,
                 rng: np.random.Generator) -> float:
    """Mean per-image pixel AUROC of the fingerprint's local log-energy against a pasted square."""
    from sklearn.metrics import roc_auc_score

    values = []
    margin = extractor.depth
    for photo in photos:
        base = crop(photo, size, None).copy()
        side = size // 3
        top, left = (int(v) for v in rng.integers(margin, size - side - margin, 2))
        processed = crop(apply_chain(crop(photo, 2 * size, None), chain), size, None)
        base[top:top + side, left:left + side] = processed[top:top + side, left:left + side]
        mask = np.zeros((size, size), bool)
        mask[top:top + side, left:left + side] = True
        with torch.no_grad():
            fingerprint = extractor(torch.from_numpy(base).permute(2, 0, 1)[None].float() / 255)
        energy = torch.log(F.avg_pool2d(fingerprint.pow(2), 9, 1, 4) + 1e-6)[0].mean(0).numpy()
        inner = (slice(margin, size - margin),) * 2
        values.append(roc_auc_score(mask[inner].ravel(), energy[inner].ravel()))
    # Energy may rise or fall in the pasted region: what matters is that it differs.
    return float(np.mean([max(v, 1 - v) for v in values]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "detector" / "trufor_tiny.yaml")
    parser.add_argument("--chains", nargs="*", default=list(DEFAULT_CHAINS))
    parser.add_argument("--splice-chain", default="jpeg60")
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--patch", type=int, default=16)
    parser.add_argument("--pool", type=int, default=8)
    parser.add_argument("--images", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    records = [r for r in read_manifest(args.manifest) if r.label == 0 and r.split == "test"][: args.images]
    if len(records) < 2:
        parser.error(f"{args.manifest}: fewer than two genuine test-split photos")
    photos = [read_image(r.path) for r in records]
    images, chains = chain_batch(photos, args.chains, args.size)
    candidates = {"random": extractor_from(args.config, None)}
    if args.checkpoint:
        candidates["trained"] = extractor_from(args.config, args.checkpoint)
    report = {"photos": len(photos), "chains": args.chains, "size": args.size}
    for name, extractor in candidates.items():
        with torch.no_grad():
            fingerprints = extractor(images)
        report[name] = {
            "chain_auroc": chain_separation_auroc(fingerprints, chains, args.patch, args.pool, extractor.depth),
            "splice_auroc": splice_auroc(extractor, photos, args.size, args.splice_chain,
                                         np.random.default_rng(args.seed)),
        }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
