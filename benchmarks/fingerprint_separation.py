"""Did phase 1 work? Chain separation and splice visibility of a trufor fingerprint (a script).

    python -m benchmarks.fingerprint_separation --manifest data/photos/manifest.csv \
        [--checkpoint outputs/phase1/checkpoints/last.ckpt] [--detector trufor_tiny]
        [--size 128] [--patch 32] [--crops 4] [--splice-chains jpeg60 blur1.0]

On the *test* split's genuine photos (held out from phase-1 training; `data/photos` is written by
the first `python train.py experiment=trufor_fingerprint`), `--crops` crops of every photo go
through every processing chain; `detectors.blocks.noiseprint.chain_separation_auroc` reports how
well the similarity of the fingerprint's tiles (their spectra, as in training) tells same-chain
from different-chain pairs of tiles of *different photos* (0.5 = chance). Then every crop, at
`--splice-size`, gets a square of itself through each of `--splice-chains` pasted in (no visible
seam): `splice_anomaly_map` scored against the pasted square gives a pixel AUROC per crop,
averaged per chain ("does the spliced region stand out"; 0.5 = no, below 0.5 = it looks *more*
typical of the image than the rest). Rows: `highpass` (a fixed 3 x 3
high-pass residual, the reference any extractor should beat), `random` (the `--detector`
architecture with random weights) and, with `--checkpoint`, `trained`, all in the same run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from datamodules.chains import DEFAULT_CHAINS, apply_chain, crop
from datamodules.io import read_image
from datamodules.records import read_manifest
from detectors.blocks.noiseprint import NoiseFingerprint, chain_separation_auroc, splice_anomaly_map
from detectors.registry import net_config

ROOT = Path(__file__).resolve().parents[1]


def extractor_from(detector: str, checkpoint: Path | None) -> NoiseFingerprint:
    settings = {**{"depth": 17, "width": 64}, **net_config(detector).get("fingerprint", {})}
    extractor = NoiseFingerprint(depth=int(settings["depth"]), width=int(settings["width"]))
    if checkpoint is not None:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
        extractor.load_state_dict(
            {k[len("net.fingerprint.") :]: v for k, v in state.items() if k.startswith("net.fingerprint.")}
        )
    return extractor.eval()


class HighPass(torch.nn.Module):
    """The reference residual: grey level minus its 3 x 3 mean (no learning)."""

    depth = 1

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        grey = image.mean(dim=1, keepdim=True)
        return grey - F.avg_pool2d(grey, 3, 1, 1, count_include_pad=False)


def crop_positions(crops: int) -> list[tuple[float, float]]:
    """`crops` relative positions spread over the photo (a centred grid)."""
    side = int(np.ceil(np.sqrt(crops)))
    grid = [((r + 0.5) / side, (c + 0.5) / side) for r in range(side) for c in range(side)]
    return grid[:crops]


def to_batch(images: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255


def chain_batch(
    photos: list[np.ndarray], chains: list[str], size: int, positions: list[tuple[float, float]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every crop of every photo through every chain (2*size crop, chain, size crop, as in
    training): images, chain index and photo index of each."""
    images, labels, photo_ids = [], [], []
    for photo_id, photo in enumerate(photos):
        for position in positions:
            source = crop(photo, 2 * size, position)
            for index, chain in enumerate(chains):
                images.append(crop(apply_chain(source, chain), size, position))
                labels.append(index)
                photo_ids.append(photo_id)
    return to_batch(images), torch.tensor(labels), torch.tensor(photo_ids)


def splice_batch(
    photos: list[np.ndarray],
    size: int,
    chain: str,
    positions: list[tuple[float, float]],
    margin: int,
    rng: np.random.Generator,
) -> tuple[torch.Tensor, np.ndarray]:
    """Crops with a square (a third of the side) of themselves through `chain` pasted back in."""
    images, masks = [], []
    side = size // 3
    for photo in photos:
        for position in positions:
            base = crop(photo, size, position).copy()
            processed = apply_chain(base, chain)
            if processed.shape != base.shape:
                raise ValueError(f"--splice-chains: {chain} changes the image size; pick one that keeps it")
            top, left = (int(v) for v in rng.integers(margin, size - side - margin, 2))
            base[top : top + side, left : left + side] = processed[top : top + side, left : left + side]
            mask = np.zeros((size, size), bool)
            mask[top : top + side, left : left + side] = True
            images.append(base)
            masks.append(mask)
    return to_batch(images), np.stack(masks)


def splice_auroc(extractor: torch.nn.Module, images: torch.Tensor, masks: np.ndarray, patch: int) -> float:
    """Mean per-image pixel AUROC of `splice_anomaly_map` against the pasted square."""
    from sklearn.metrics import roc_auc_score

    with torch.no_grad():
        anomaly = splice_anomaly_map(extractor(images), patch, stride=max(1, patch // 4), margin=extractor.depth)
    values = []
    for score, mask in zip(anomaly.numpy(), masks):
        valid = ~np.isnan(score)
        values.append(roc_auc_score(mask[valid], score[valid]))
    return float(np.mean(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--detector", default="trufor_tiny", help="the detector config the extractor comes from")
    parser.add_argument("--chains", nargs="*", default=list(DEFAULT_CHAINS))
    parser.add_argument("--splice-chains", nargs="*", default=["jpeg60", "blur1.0"])
    parser.add_argument("--size", type=int, default=128, help="crop side for chain separation")
    parser.add_argument("--splice-size", type=int, default=192)
    parser.add_argument("--patch", type=int, default=32)
    parser.add_argument("--crops", type=int, default=4, help="crops per photo")
    parser.add_argument("--split", default="test")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    records = [r for r in read_manifest(args.manifest) if r.label == 0 and r.split == args.split]
    if len(records) < 2:
        parser.error(f"{args.manifest}: fewer than two genuine {args.split}-split photos")
    photos = [read_image(r.path) for r in records]
    positions = crop_positions(args.crops)
    images, chains, photo_ids = chain_batch(photos, args.chains, args.size, positions)
    candidates = {"highpass": HighPass(), "random": extractor_from(args.detector, None)}
    if args.checkpoint:
        candidates["trained"] = extractor_from(args.detector, args.checkpoint)
    report = {
        "photos": [Path(r.path).name for r in records],
        "chains": args.chains,
        "size": args.size,
        "crops_per_photo": len(positions),
    }
    for name, extractor in candidates.items():
        with torch.no_grad():
            fingerprints = extractor(images)
        splice = {}
        for chain in args.splice_chains:
            spliced, masks = splice_batch(
                photos, args.splice_size, chain, positions, extractor.depth, np.random.default_rng(args.seed)
            )
            splice[chain] = splice_auroc(extractor, spliced, masks, args.patch)
        report[name] = {
            "chain_auroc": chain_separation_auroc(fingerprints, chains, photo_ids, args.patch, extractor.depth),
            "splice_auroc": splice,
        }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
