"""Splices from JPEG donors pasted off the grid, and genuine JPEGs: where the JPEG localizers find them.

    python -m benchmarks.jpeg_splicing [--detectors jpeg_grid jpeg_ghost] [--split val|test]
        [--override jpeg_grid:peak=0.2 ...] [--side 384] [--per-photo 12] [--seed 0] [--output results.json]

The bundled photographs are split in two by name (`val` to choose settings on, `test` to report);
every image is a native-resolution crop of one of them (no resampling, so a crop of a photograph
that was once a JPEG keeps that grid, at the crop's offset). Forgeries: an object of another photo
of the same split, first saved as JPEG at quality 60-90, pasted with a random shift and a feathered
seam (`synthesis.splicing.splice`), then kept as PNG or saved again as JPEG 95 or 90. Genuine images:
crops kept as PNG, saved as JPEG at 75, 90 or 95, and saved as JPEG 90, cropped off its grid and
saved again (PNG or JPEG 95). Reported per final format: pixel F1 at probability 0.5 (mean over
forgeries), the share of genuine pixels marked, and image AUROC (forgeries against the genuine images
of every format).
"""

from __future__ import annotations

import argparse
import json
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

import imageops
from detectors.registry import create_detector, list_detectors
from evaluation import PixelMetricAccumulator
from synthesis.pair_set import load_photos
from synthesis.photos import scene_of
from synthesis.splicing import splice

FINAL_FORMATS = {"png": None, "jpeg95": 95, "jpeg90": 90}
GENUINE_FORMATS = ("png", "jpeg75", "jpeg90", "jpeg95", "jpeg90_offgrid_png", "jpeg90_offgrid_jpeg95")


def photo_split(name: str) -> str:
    """`val` or `test`, fixed by the photo's scene (not by the order or number of photos): both
    halves of a stereo pair (`motorcycle_left` / `_right`) show one scene and share a split."""
    scene = scene_of(Path(name).stem) + Path(name).suffix  # other photos keep the split they had
    return "val" if zlib.crc32(scene.encode()) % 2 == 0 else "test"


def random_crop(photo: np.ndarray, side: int, rng: np.random.Generator) -> np.ndarray:
    height, width = photo.shape[:2]
    h, w = min(side, height), min(side, width)
    y, x = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
    return np.ascontiguousarray(photo[y : y + h, x : x + w])


def genuine_variant(crop: np.ndarray, variant: str, rng: np.random.Generator) -> np.ndarray:
    if variant == "png":
        return crop
    if variant.startswith("jpeg90_offgrid"):
        dy, dx = (int(v) for v in rng.integers(1, 8, size=2))
        shifted = np.ascontiguousarray(imageops.jpeg(crop, 90)[dy:, dx:])
        return shifted if variant.endswith("png") else imageops.jpeg(shifted, 95)
    return imageops.jpeg(crop, int(variant.removeprefix("jpeg")))


def make_images(split: str, side: int, per_photo: int, seed: int = 0) -> list[dict]:
    """Forgeries (one per final format of each splice) and genuine images of the photos of `split`."""
    photos = {name: image for name, image in load_photos(max_side=100_000).items() if photo_split(name) == split}
    names = sorted(n for n, p in photos.items() if min(p.shape[:2]) >= side // 2)
    rng = np.random.default_rng(seed)
    images = []
    for name in names:
        for index in range(per_photo):
            host = random_crop(photos[name], side, rng)
            variant = GENUINE_FORMATS[index % len(GENUINE_FORMATS)]
            images.append(
                {"photo": name, "format": variant, "image": genuine_variant(host, variant, rng), "mask": None}
            )
            donor_name = names[int(rng.integers(len(names) - 1))]
            donor_name = donor_name if donor_name != name else names[-1]
            donor = random_crop(photos[donor_name], side, rng)
            if donor.shape != host.shape:
                continue
            quality = int(rng.choice([60, 70, 80, 90]))
            try:
                result = splice(donor, host, rng, donor_chains=[f"jpeg{quality}"])
            except ValueError:  # the donor's object too small or too large for the frame
                continue
            for final, final_quality in FINAL_FORMATS.items():
                image = result.image if final_quality is None else imageops.jpeg(result.image, final_quality)
                images.append({"photo": name, "format": final, "image": image, "mask": result.mask})
    return images


def score(detector_name: str, overrides: Sequence[str], images: list[dict]) -> list[dict]:
    net = create_detector(detector_name, list(overrides)).eval()
    pixels = PixelMetricAccumulator(per_image_curves=False)  # per image: F1 at 0.5, or genuine pixels marked
    rows = []
    for item in images:
        x = torch.from_numpy(item["image"]).permute(2, 0, 1)[None].float() / 255.0
        with torch.no_grad():
            out = net(x)
        pixels.add(item["mask"], torch.sigmoid(out["mask_logit"][0, 0]))
        row = {"format": item["format"], "forged": item["mask"] is not None, "image_logit": float(out["logit"][0])}
        row.update({"f1": pixels.f1[-1]} if row["forged"] else {"marked": pixels.fpr_genuine[-1]})
        rows.append(row)
    return rows


def summarize(rows: list[dict]) -> dict:
    genuine = [r for r in rows if not r["forged"]]
    summary = {"genuine_marked": {f: float(np.mean([r["marked"] for r in genuine if r["format"] == f]))
                                  for f in GENUINE_FORMATS}}  # fmt: skip
    for final in FINAL_FORMATS:
        forged = [r for r in rows if r["forged"] and r["format"] == final]
        labels = [1] * len(forged) + [0] * len(genuine)
        logits = [r["image_logit"] for r in forged + genuine]
        summary[final] = {
            "forgeries": len(forged),
            "pixel_f1": float(np.mean([r["f1"] for r in forged])),
            "image_auroc": float(roc_auc_score(labels, logits)),
        }
    summary["genuine_images"] = len(genuine)
    return summary


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refused in one line before any image is made: an override of a detector not run, or not of
    the form DETECTOR:key=value, was ignored; a setting the detector lacks or a size too small
    ended in tracebacks."""
    unknown = sorted(set(args.detectors) - set(list_detectors()))
    if unknown:
        parser.error(f"unknown detector(s) {', '.join(unknown)}")
    for given in args.override:
        name, _, setting = given.partition(":")
        if name not in args.detectors or "=" not in setting:
            parser.error(f"--override {given}: give DETECTOR:key=value, DETECTOR one of {' '.join(args.detectors)}")
    if args.side < 64 or args.per_photo < 1:
        parser.error(f"--side must be at least 64 and --per-photo at least 1 (got {args.side}, {args.per_photo})")
    for name in args.detectors:
        try:
            create_detector(name, [f"net.{o.split(':', 1)[1]}" for o in args.override if o.startswith(f"{name}:")])
        except Exception as error:  # a key the detector lacks, a value it refuses
            parser.error(f"--override for {name}: {error}")


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--detectors", nargs="+", default=["jpeg_grid", "jpeg_ghost"])
    parser.add_argument("--override", nargs="*", default=[], help="DETECTOR:key=value, e.g. jpeg_grid:peak=0.2")
    parser.add_argument("--split", choices=["val", "test"], default="val")
    parser.add_argument("--side", type=int, default=384)
    parser.add_argument("--per-photo", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0, help="draws the crops, donors, qualities and shifts")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    torch.set_num_threads(1)
    images = make_images(args.split, args.side, args.per_photo, args.seed)
    results = {}
    for name in args.detectors:
        overrides = [f"net.{o.split(':', 1)[1]}" for o in args.override if o.split(":", 1)[0] == name]
        results[name] = {"overrides": overrides, **summarize(score(name, overrides, images))}
        print(name, overrides, json.dumps({k: v for k, v in results[name].items() if k != "overrides"}))
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(
                {
                    "split": args.split,
                    "seed": args.seed,
                    "side": args.side,
                    "per_photo": args.per_photo,
                    "results": results,
                },
                handle,
                indent=1,
            )
    return results


if __name__ == "__main__":
    main()
