"""Time the training-free localizers on one image against a plain OpenCV filter (a script).

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python -m benchmarks.bench_training_free [--size 1024]
        [--repeats 3] [--detectors noise_level splicebuster jpeg_ghost jpeg_grid] [--image PATH] [--output bench.json]

Each detector scores a `size` x `size` photo-like image (a smooth scene with sensor-like noise and
a region of another noise level; `--image`: that image resized to `size` x `size` instead, e.g. a
bundled photo, whose textures give self-matching more to do) with its full config through
`forward`; the reference is OpenCV's 5 x 5 median blur plus a 3 x 3 Laplacian over the same image,
timed in the same run, so the ratio says how the detector compares with a cheap filter on this
machine whatever its load. The median of `repeats` timings is reported, after one warm-up call.
The toolkit's target is <= 2 s per 1024 x 1024 image on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import torch

from detectors.registry import create_detector, detector_class, list_detectors

DEFAULT_DETECTORS = ("noise_level", "splicebuster", "jpeg_ghost", "jpeg_grid")
TARGET_SECONDS = 2.0


def sample_image(size: int, seed: int = 0) -> np.ndarray:
    """(size, size, 3) uint8: gradients, noise sigma 2, and sigma 6 in a central square."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:size, 0:size] / size
    scene = 60 + 120 * rows * cols + 30 * np.sin(6 * cols)
    pixels = np.repeat(scene[..., None], 3, axis=2) + rng.normal(0, 2, size=(size, size, 3))
    inner = slice(size // 3, 2 * size // 3)
    pixels[inner, inner] += rng.normal(0, 4, size=pixels[inner, inner].shape)
    return np.clip(np.round(pixels), 0, 255).astype(np.uint8)


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    run()  # warm-up: first-call allocation and imports are not the steady state
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--detectors", nargs="+", default=list(DEFAULT_DETECTORS))
    parser.add_argument("--image", type=Path, help="score this image (resized) instead of the synthetic scene")
    parser.add_argument("--output", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    if args.size < 32 or args.repeats < 1:
        parser.error(f"--size must be at least 32 and --repeats at least 1 (got {args.size}, {args.repeats})")
    timed = [n for n in list_detectors(gradients=False) if not getattr(detector_class(n), "is_pair_detector", False)]
    unknown = sorted(set(args.detectors) - set(timed))
    if unknown:  # a pair detector scores two panels (it ended in a TypeError), a learned one needs training
        parser.error(f"{', '.join(unknown)}: not a training-free single-image detector; these are: {', '.join(timed)}")
    if args.output and args.output.parent.is_file():
        parser.error(f"--output {args.output}: {args.output.parent} is a file, not a folder")

    pixels = sample_image(args.size)
    if args.image:
        from datamodules.io import ImageReadError, read_image

        try:
            pixels = cv2.resize(read_image(args.image), (args.size, args.size), interpolation=cv2.INTER_CUBIC)
        except ImageReadError as error:
            parser.error(str(error))
    image = torch.from_numpy(pixels).permute(2, 0, 1).unsqueeze(0).float() / 255

    def opencv_reference() -> np.ndarray:
        gray = cv2.cvtColor(pixels, cv2.COLOR_RGB2GRAY)
        return cv2.Laplacian(cv2.medianBlur(gray, 5), cv2.CV_32F)

    reference = median_seconds(opencv_reference, args.repeats)
    results = {
        "size": args.size,
        "image": str(args.image) if args.image else "synthetic scene",
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "opencv_reference_s": reference,
        "detectors": {},
    }
    print(f"{args.size} x {args.size} image, torch threads {torch.get_num_threads()}, median of {args.repeats}")
    print(f"{'detector':<16}{'seconds':>10}{'x reference':>14}{'<= 2 s':>8}")
    print(f"{'opencv filter':<16}{reference:>10.3f}{1.0:>14.1f}")
    for name in args.detectors:
        net = create_detector(name).eval()
        with torch.inference_mode():
            seconds = median_seconds(functools.partial(net, image), args.repeats)
        results["detectors"][name] = {
            "seconds": seconds,
            "ratio_to_reference": seconds / reference,
            "within_target": seconds <= TARGET_SECONDS,
        }
        print(
            f"{name:<16}{seconds:>10.3f}{seconds / reference:>14.1f}{'yes' if seconds <= TARGET_SECONDS else 'NO':>8}"
        )
    if args.output:  # its folder made: a missing one failed after every timing was done
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
