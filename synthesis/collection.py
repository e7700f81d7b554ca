"""A synthetic collection for collection search: distractor panels and planted copies.

Distractors are non-overlapping grid crops of the bundled photographs (one scale, so no two share
content), figure panels (charts, blots, micrographs: the furniture they share is no reuse) and
generated textures (octaves of value noise, oriented waves, random shapes, a random palette: each
seed a different image). Planted copies take a source panel through THEMIS operations (direct
reuse, rotate180, hflip, vflip, scaling), a partial crop down to `min_area` of the panel, parameter
changes (brightness, contrast, saturation, hue, colour temperature) and a JPEG round trip.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

from synthesis.duplication import PARAMETERS, apply_geometric, apply_parameter
from synthesis.embedded import grid_crops
from synthesis.figure_panels import KINDS, figure_panel

COPY_OPERATIONS = ("direct_reuse", "rotate180", "hflip", "vflip", "scaling")


def texture_panel(rng: np.random.Generator, side: int) -> np.ndarray:
    """A generated texture of `side` x about `side` px, different for every draw."""
    height, width = side, int(side * rng.uniform(0.75, 1.33))
    field_ = np.zeros((height, width), np.float32)
    for octave in range(int(rng.integers(2, 6))):
        cells = int(rng.integers(2, 6)) * 2**octave
        noise = rng.random((cells, cells)).astype(np.float32)
        field_ += cv2.resize(noise, (width, height), interpolation=cv2.INTER_CUBIC) / 1.6**octave
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    for _ in range(int(rng.integers(0, 4))):
        angle, period = rng.uniform(0, np.pi), rng.uniform(4, side / 2)
        field_ += 0.4 * np.sin((xs * np.cos(angle) + ys * np.sin(angle)) * 2 * np.pi / period + rng.uniform(0, 6))
    field_ = (field_ - field_.min()) / max(float(np.ptp(field_)), 1e-6)
    palette = np.sort(rng.integers(0, 256, (4, 3)), axis=0).astype(np.float32)
    positions = np.linspace(0, 1, 4)
    image = np.stack([np.interp(field_, positions, palette[:, c]) for c in range(3)], axis=2).astype(np.uint8)
    for _ in range(int(rng.integers(3, 25))):
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        centre = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        if rng.random() < 0.5:
            cv2.circle(image, centre, int(rng.integers(2, side // 6)), colour, -1 if rng.random() < 0.6 else 2)
        else:
            end = (int(rng.integers(0, width)), int(rng.integers(0, height)))
            cv2.line(image, centre, end, colour, int(rng.integers(1, 4)))
    return image


def photo_tiles(photos: dict[str, np.ndarray], side: int) -> list[tuple[str, np.ndarray]]:
    """Non-overlapping `side` px grid crops of every photo, named `photo@y,x`."""
    return [
        (f"{name}@{y},{x}", crop.copy())
        for name, photo in photos.items()
        for y, x, crop in grid_crops(photo, side, 10_000)
    ]


def distractor(rng: np.random.Generator, side: int, figure_share: float = 0.1) -> np.ndarray:
    """A generated texture, or (`figure_share` of draws) a figure panel shrunk to about `side` px."""
    if rng.random() < figure_share:
        panel = figure_panel(KINDS[int(rng.integers(len(KINDS)))], rng)
        factor = side / max(panel.shape[:2])
        return cv2.resize(
            panel, (round(panel.shape[1] * factor), round(panel.shape[0] * factor)), interpolation=cv2.INTER_AREA
        )
    return texture_panel(rng, side)


@dataclass
class PlantedCopy:
    image: np.ndarray
    operations: list[str] = field(default_factory=list)
    area: float = 1.0  # fraction of the source panel the copy shows


def jpeg(image: np.ndarray, quality: int = 75) -> np.ndarray:
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    return cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def planted_copy(
    source: np.ndarray, rng: np.random.Generator, geometric: str, min_area: float = 0.3, quality: int = 75
) -> PlantedCopy:
    """`source` cropped (half the time, to `min_area`..1 of its area), transformed by `geometric`,
    with 0-2 parameter changes, through JPEG at `quality`."""
    height, width = source.shape[:2]
    area = float(rng.uniform(min_area, 1.0)) if rng.random() < 0.5 else 1.0
    side = np.sqrt(area)
    ch, cw = max(16, int(height * side)), max(16, int(width * side))
    y, x = int(rng.integers(0, height - ch + 1)), int(rng.integers(0, width - cw + 1))
    image = source[y : y + ch, x : x + cw]
    operations = ["crop"] if area < 1.0 else []
    if geometric == "scaling":
        factor = float(rng.choice([rng.uniform(0.6, 0.85), rng.uniform(1.2, 1.5)]))
        image = cv2.resize(image, (round(cw * factor), round(ch * factor)), interpolation=cv2.INTER_LINEAR)
        operations.append("scaling")
    else:
        image = apply_geometric(image, geometric)
        operations.append(geometric)
    for name in rng.choice(PARAMETERS, size=int(rng.integers(0, 3)), replace=False):
        image, _ = apply_parameter(np.ascontiguousarray(image), str(name), rng)
        operations.append(str(name))
    return PlantedCopy(jpeg(np.ascontiguousarray(image), quality), operations + [f"jpeg{quality}"], area)
