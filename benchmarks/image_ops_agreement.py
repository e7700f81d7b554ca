"""How far other libraries' JPEG and blur are from `imageops`' (the toolkit's one implementation).

    python -m benchmarks.image_ops_agreement [--qualities 95 70 30] [--sigmas 0.5 1 3]

On the photographs bundled with scikit-image (astronaut, chelsea, coffee) it prints, per setting,
the mean and largest absolute difference in grey levels between `imageops` and: Pillow's JPEG
(its defaults), albumentations' `ImageCompression` (what training used before: it hands the RGB
array to OpenCV, which reads it as BGR, so the chroma planes are computed from swapped channels)
and albumentations' `GaussianBlur` (a kernel of radius 3.5 sigma; OpenCV's is 3 sigma).
"""

from __future__ import annotations

import argparse
import io

import albumentations as A
import numpy as np
from PIL import Image
from skimage import data

import imageops


def pillow_jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    buffer.seek(0)
    with Image.open(buffer) as decoded:
        return np.asarray(decoded.convert("RGB"))


def albumentations_step(transform: A.BasicTransform, image: np.ndarray) -> np.ndarray:
    return A.Compose([transform], seed=0)(image=image)["image"]


def difference(images: list[np.ndarray], ours, theirs) -> str:
    gaps = [np.abs(ours(im).astype(int) - theirs(im)) for im in images]
    return f"{np.mean([g.mean() for g in gaps]):.3f} / {max(int(g.max()) for g in gaps)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qualities", type=int, nargs="+", default=[95, 70, 30])
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.5, 1.0, 3.0])
    args = parser.parse_args(argv)
    images = [data.astronaut(), data.chelsea(), data.coffee()]
    rows = []
    for q in args.qualities:
        ours = lambda im, q=q: imageops.jpeg(im, q)  # noqa: E731 (bound per quality)
        rows.append((f"JPEG q{q}", "Pillow", difference(images, ours, lambda im, q=q: pillow_jpeg(im, q))))
        step = A.ImageCompression(quality_range=(q, q), p=1.0)
        rows.append(
            (
                f"JPEG q{q}",
                "albumentations ImageCompression",
                difference(images, ours, lambda im, s=step: albumentations_step(s, im)),
            )
        )
    for sigma in args.sigmas:
        step = A.GaussianBlur(blur_limit=0, sigma_limit=(sigma, sigma), p=1.0)
        rows.append(
            (
                f"blur sigma {sigma:g}",
                "albumentations GaussianBlur",
                difference(
                    images,
                    lambda im, s=sigma: imageops.gaussian_blur(im, s),
                    lambda im, s=step: albumentations_step(s, im),
                ),
            )
        )
    print(f"imageops JPEG encoder: {imageops.jpeg_codec()}\n")
    print("| operation | compared with | mean / largest abs. difference (grey levels) |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
