"""The embedded default dataset: the sample photographs that ship inside installed packages.

scikit-image and scikit-learn bundle a few dozen real photographs, so the toolkit can generate a
labelled training set offline on a fresh machine: crops of the genuine photos at several scales,
and for each crop a fake made by re-rendering the frame.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import cv2
import numpy as np

from datamodules.io import ImageReadError, read_image, split_keys, write_image, write_manifest
from synthesis.photos import GENERATED_NAMES, photos_digest, scene_of

log = logging.getLogger(__name__)

# Natural photographs only: synthetic test patterns (chessboard, logo, phantom, ...) would teach
# the detector nothing about camera images.
SKIMAGE_PHOTOS = (
    "astronaut.png",
    "brick.png",
    "camera.png",
    "cell.png",
    "chelsea.png",
    "clock_motion.png",
    "coffee.png",
    "coins.png",
    "grass.png",
    "gravel.png",
    "hubble_deep_field.jpg",
    "ihc.png",
    "microaneurysms.png",
    "moon.png",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "page.png",
    "retina.jpg",
    "rocket.jpg",
    "text.png",
)
SKLEARN_PHOTOS = ("china.jpg", "flower.jpg")

UPSAMPLERS = {
    "nearest": cv2.INTER_NEAREST,
    "bilinear": cv2.INTER_LINEAR,
    "bicubic": cv2.INTER_CUBIC,
    "lanczos": cv2.INTER_LANCZOS4,
}
DOWNSAMPLERS = {"area": cv2.INTER_AREA, "bilinear": cv2.INTER_LINEAR, "bicubic": cv2.INTER_CUBIC}


def bundled_photo_paths() -> list[Path]:
    """Paths of the bundled photographs that exist in this installation."""
    import skimage
    import sklearn

    folders = [
        (Path(skimage.__file__).parent / "data", SKIMAGE_PHOTOS),
        (Path(sklearn.__file__).parent / "datasets" / "images", SKLEARN_PHOTOS),
    ]
    paths = [folder / name for folder, names in folders for name in names if (folder / name).is_file()]
    if not paths:
        raise FileNotFoundError("no bundled sample photographs found: is scikit-image installed?")
    return paths


def rerender(image: np.ndarray, rng: np.random.Generator, factor: float = 2.0) -> tuple[np.ndarray, str]:
    """Re-render the frame by down- then up-sampling: the up-sampling trace of a generator's decoder.

    A stand-in for a real generator (the data issue's autoencoder replaces it); the interpolation
    pair varies so a detector cannot key on one kernel.
    """
    height, width = image.shape[:2]
    down_name = str(rng.choice(sorted(DOWNSAMPLERS)))
    up_name = str(rng.choice(sorted(UPSAMPLERS)))
    small = cv2.resize(
        image, (max(1, round(width / factor)), max(1, round(height / factor))), interpolation=DOWNSAMPLERS[down_name]
    )
    return cv2.resize(small, (width, height), interpolation=UPSAMPLERS[up_name]), f"rerender_{up_name}"


def grid_crops(image: np.ndarray, size: int, limit: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """Non-overlapping `size` x `size` crops on a centred grid, at most `limit` of them."""
    height, width = image.shape[:2]
    rows, cols = height // size, width // size
    top0, left0 = (height - rows * size) // 2, (width - cols * size) // 2
    count = 0
    for r in range(rows):
        for c in range(cols):
            if count >= limit:
                return
            y, x = top0 + r * size, left0 + c * size
            yield y, x, image[y : y + size, x : x + size]
            count += 1


@dataclass(frozen=True)
class EmbeddedSpec:
    crop_size: int = 96
    scales: Sequence[float] = (1.0, 0.75, 0.5)
    max_crops_per_scale: int = 16
    seed: int = 0


def distinctly_named(sources: list[Path]) -> list[Path]:
    """`sources`, refused where two share a name: the dataset names its files by the photo's name."""
    stems = Counter(path.stem for path in sources)
    if clashing := sorted(str(path) for path in sources if stems[path.stem] > 1):
        raise ValueError(
            f"source photos sharing a name ({', '.join(clashing[:4])}): the dataset names its files by the photo's "
            "name, so one would replace the other; rename them"
        )
    return sources


def build_embedded_dataset(
    output: str | os.PathLike,
    spec: EmbeddedSpec = EmbeddedSpec(),
    photos: Sequence[str | os.PathLike] | None = None,
    progress: Callable[[Iterable], Iterable] = lambda it: it,
) -> list[dict]:
    """Write genuine crops and their re-rendered fakes under `output`; return manifest rows.

    `photos` defaults to the bundled photographs; any list of authentic images works the same way.
    Deterministic per `spec.seed`: every crop draws from its own generator seeded by
    (seed, photo, scale, position), so the result does not depend on order. Files that already
    exist are kept, so an interrupted run resumes.
    """
    output = Path(output)
    sources = distinctly_named([Path(p) for p in photos or bundled_photo_paths()])
    rows: list[dict] = []
    for photo_index, photo in enumerate(progress(sources)):
        try:
            image = read_image(photo)
        except ImageReadError as error:  # one unreadable source is skipped, as every tool skips bad input
            log.warning("skipped a source image: %s", error)
            continue
        for scale_index, scale in enumerate(spec.scales):
            scaled = (
                image
                if scale == 1.0
                else cv2.resize(
                    image,
                    (max(1, round(image.shape[1] * scale)), max(1, round(image.shape[0] * scale))),
                    interpolation=cv2.INTER_AREA,
                )
            )
            for y, x, crop in grid_crops(scaled, spec.crop_size, spec.max_crops_per_scale):
                name = f"{photo.stem}_s{scale_index}_{y}_{x}"
                rng = np.random.default_rng([spec.seed, photo_index, scale_index, y, x])
                fake, method = rerender(crop, rng)
                real_path = output / "real" / f"{name}.png"
                fake_path = output / "fake" / f"{name}.png"
                for path, pixels in ((real_path, crop), (fake_path, fake)):
                    if not path.exists():
                        write_image(path, pixels)
                # every crop of a photo (at every scale) and its fake share the photo as source
                shared = {"category": photo.stem, "source": scene_of(photo.stem)}
                rows.append({"path": str(real_path), "label": 0, "group": "genuine", **shared})
                rows.append({"path": str(fake_path), "label": 1, "group": method, **shared})
    return rows


def make_embedded_manifest(
    output: str | os.PathLike,
    seed: int = 0,
    split_fractions: Sequence[float] = (0.7, 0.15, 0.15),
    photos: Sequence[str | os.PathLike] | None = None,
    progress: Callable[[Iterable], Iterable] | None = None,
    **spec: Any,
) -> Path:
    """Generate crops + re-rendered fakes under `output` (from `photos`, by default the bundled
    photographs) and write its `manifest.csv`, split by photo (`scene_of`); returns the manifest's path."""
    output = Path(output)
    embedded = EmbeddedSpec(seed=seed, **spec)
    distinctly_named([Path(p) for p in photos or bundled_photo_paths()])  # before the stamp: a refused run leaves none
    stamp_embedded_options(output, embedded, split_fractions, photos)
    rows = build_embedded_dataset(output, embedded, photos=photos, **({"progress": progress} if progress else {}))
    _write_split(rows, output / "manifest.csv", split_fractions, seed)
    return output / "manifest.csv"


def stamp_embedded_options(
    output: Path, spec: EmbeddedSpec, split_fractions: Sequence[float], photos: Sequence[str | os.PathLike] | None
) -> None:
    """Stamp the options and photos into `output` before a file is written, refusing a folder made
    with others: its files would be kept (a run resumes by keeping them) under the new manifest."""
    stamp = output / ".items" / "spec.json"
    options = {
        "quickstart": {**asdict(spec), "scales": [float(s) for s in spec.scales]},
        "split_fractions": [float(f) for f in split_fractions],
        "photo_digest": photos_digest(sorted(str(p) for p in photos or bundled_photo_paths())),
    }
    if stamp.is_file():
        if json.loads(stamp.read_text()) != options:
            raise ValueError(
                f"{output} holds a dataset made with other options or photos ({stamp}); "
                "choose a new output folder or delete the old one"
            )
        return
    if found := [name for name in GENERATED_NAMES if (output / name).exists()]:
        raise ValueError(
            f"{output} already holds {', '.join(found)}, which no generation with these options made there "
            f"(it has no {stamp}): choose a new or empty output folder"
        )
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(options, indent=1, sort_keys=True))


def ensure_embedded_manifest(
    output: str | os.PathLike, seed: int = 0, split_fractions: Sequence[float] = (0.7, 0.15, 0.15)
) -> Path:
    """The default training set's manifest under `output`: made when missing (`make_embedded_manifest`),
    otherwise used as it is, except a set that an earlier version split by crop (crops of one photo
    in train and test), which is split again by photo, its images unchanged.

    `train.py`'s default data config hands this function to the DataModule (a Hydra `_partial_`),
    which calls it before every run: the DataModule never imports `synthesis`.
    """
    manifest = Path(output) / "manifest.csv"
    if not manifest.is_file():
        return make_embedded_manifest(output, seed=seed, split_fractions=split_fractions)
    with manifest.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if rows and all(_split_by_crop(row) for row in rows):
        log.warning("%s was split by crop (an earlier version): splitting it again by photo", manifest)
        rows = [
            {**row, "path": str(manifest.parent / row["path"]), "source": scene_of(row["category"])} for row in rows
        ]
        _write_split(rows, manifest, split_fractions, seed)
    return manifest


def _split_by_crop(row: dict[str, str]) -> bool:
    """Whether a manifest row is one an earlier version wrote: a crop named after its photo, scale
    and place (`real/astronaut_s0_0_96.png`), and that name as its source."""
    path = Path(row.get("path") or "")
    return (
        path.parent.name in ("real", "fake")
        and row.get("source") == path.stem
        and re.fullmatch(rf"{re.escape(row.get('category') or '')}_s\d+_\d+_\d+", path.stem) is not None
    )


def _write_split(rows: list[dict], manifest: Path, split_fractions: Sequence[float], seed: int) -> None:
    splits = split_keys((row["source"] or row["path"] for row in rows), split_fractions, seed)
    write_manifest(({**row, "split": splits[row["source"] or row["path"]]} for row in rows), manifest)


def make_photo_manifest(
    output: str | os.PathLike,
    seed: int = 0,
    split_fractions: Sequence[float] = (0.7, 0.15, 0.15),
    photos: Sequence[str | os.PathLike] | None = None,
) -> Path:
    """Copy the photos (by default the bundled photographs) byte for byte under `output/real` and
    write `output/manifest.csv`, one genuine record per photo, split by photo; returns its path.

    The noise-fingerprint data (`data=chains`) wants whole photos as their authors saved them:
    its processing chains are the only processing a crop may carry, and every crop of a held-out
    photo must stay held out. Files already there are kept.
    """
    import shutil

    output = Path(output)
    (output / "real").mkdir(parents=True, exist_ok=True)
    rows = []
    for photo in [Path(p) for p in photos or bundled_photo_paths()]:
        target = output / "real" / photo.name
        if not target.exists():
            shutil.copyfile(photo, target)
        rows.append(
            {
                "path": str(target),
                "label": 0,
                "group": "genuine",
                "category": photo.stem,
                "source": scene_of(photo.stem),
            }
        )
    splits = split_keys((row["source"] for row in rows), split_fractions, seed)
    write_manifest(({**row, "split": splits[row["source"]]} for row in rows), output / "manifest.csv")
    return output / "manifest.csv"
