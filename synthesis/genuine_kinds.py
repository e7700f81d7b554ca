"""Genuine images of the kinds the toolkit's users check, made here without downloads.

Journal integrity offices check figures (charts and plots, fluorescence and brightfield
micrographs, histology, electron micrographs, western blots and gels); refund reviewers check
phone photos of products, parcels and receipts. A detector calibrated only on general photographs
meets these kinds for the first time in production, and grainy ones (micrographs, scanned blots)
are exactly what a detector that learned "grain means generated" flags. Each kind here is a
`category` of the generated manifest, so every report breaks down by it.

Every maker takes a seeded `numpy.random.Generator` and returns an 8-bit RGB image plus how to
save it (PNG, or JPEG at a quality), so a dataset is the same for the same seed.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import cv2
import numpy as np

from datamodules.io import write_image


@dataclass(frozen=True)
class GenuineImage:
    pixels: np.ndarray  # H x W x 3 uint8
    codec: str = "png"  # png | jpeg
    quality: int = 95  # JPEG quality when codec == "jpeg"


def _smooth_noise(rng: np.random.Generator, shape: tuple[int, int], sigma: float) -> np.ndarray:
    """Zero-mean, unit-variance smooth random field (the texture of tissue, gels, paper)."""
    field = cv2.GaussianBlur(rng.standard_normal(shape).astype(np.float32), (0, 0), sigma)
    return (field - field.mean()) / (field.std() + 1e-6)


def _blobs(rng: np.random.Generator, shape: tuple[int, int], count: int, radius: tuple[float, float]) -> np.ndarray:
    """Soft elliptical blobs at random places (cells, nuclei), values in [0, 1]."""
    canvas = np.zeros(shape, np.float32)
    for _ in range(count):
        centre = (int(rng.integers(0, shape[1])), int(rng.integers(0, shape[0])))
        axes = (int(rng.uniform(*radius)), int(rng.uniform(*radius) * rng.uniform(0.5, 1.0)))
        cv2.ellipse(canvas, centre, axes, float(rng.uniform(0, 180)), 0, 360, float(rng.uniform(0.5, 1.0)), -1)
    return cv2.GaussianBlur(canvas, (0, 0), max(1.0, radius[0] / 4))


def _to_uint8(image: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def _scale_bar(image: np.ndarray, rng: np.random.Generator, colour: tuple[int, int, int]) -> np.ndarray:
    """A scale bar with its length written beside it, as micrographs in figures carry."""
    height, width = image.shape[:2]
    if rng.random() < 0.3:
        return image
    length = int(width * rng.uniform(0.12, 0.25))
    x, y = int(width * 0.95) - length, int(height * 0.92)
    cv2.rectangle(image, (x, y), (x + length, y + max(2, height // 80)), colour, -1)
    label = f"{int(rng.choice([5, 10, 20, 50, 100, 200]))} {rng.choice(['um', 'nm'])}"
    cv2.putText(image, label, (x, y - 4), cv2.FONT_HERSHEY_SIMPLEX, max(0.3, width / 900), colour, 1, cv2.LINE_AA)
    return image


def chart(rng: np.random.Generator) -> GenuineImage:
    """A rendered plot: line, bar, scatter, error bars or heat map, with axes, labels and a legend,
    in one of matplotlib's styles, at a figure DPI; saved as PNG or JPEG like figures in papers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style = str(
        rng.choice(
            [
                "default",
                "ggplot",
                "bmh",
                "classic",
                "grayscale",
                "seaborn-v0_8-whitegrid",
                "seaborn-v0_8-paper",
                "fivethirtyeight",
                "tableau-colorblind10",
            ]
        )
    )
    dpi = int(rng.choice([72, 100, 150]))
    kind = str(rng.choice(["line", "bar", "scatter", "errorbar", "heatmap"]))
    with plt.style.context(style):
        figure, axes = plt.subplots(figsize=(rng.uniform(2.6, 4.2), rng.uniform(2.0, 3.2)), dpi=dpi)
        x = np.arange(int(rng.integers(5, 30)))
        series = int(rng.integers(1, 4))
        if kind == "heatmap":
            image = axes.imshow(
                _smooth_noise(rng, (12, 16), 1.5), cmap=str(rng.choice(["viridis", "magma", "coolwarm"]))
            )
            figure.colorbar(image, ax=axes)
        for s in range(series if kind != "heatmap" else 0):
            y = np.cumsum(rng.normal(0, 1, x.size)) + 3 * s
            label = f"condition {chr(65 + s)}"
            if kind == "line":
                axes.plot(x, y, marker=str(rng.choice(["", "o", "s"])), label=label)
            elif kind == "bar":
                axes.bar(x[:8] + s * 0.8 / series, np.abs(y[:8]) + 1, width=0.8 / series, label=label)
            elif kind == "scatter":
                axes.scatter(rng.normal(s, 1, 40), rng.normal(0, 1, 40), s=8, label=label)
            else:
                axes.errorbar(x[:10], y[:10], yerr=rng.uniform(0.2, 1.0, x[:10].size), capsize=2, label=label)
        axes.set_xlabel(str(rng.choice(["time (h)", "dose (uM)", "day", "concentration"])))
        axes.set_ylabel(str(rng.choice(["intensity (a.u.)", "fold change", "viability (%)", "count"])))
        axes.set_title(str(rng.choice(["", "Figure 2B", "Expression", "Response"])))
        if kind != "heatmap" and rng.random() < 0.8:
            axes.legend(fontsize="small")
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=dpi)
        plt.close(figure)
    pixels = cv2.imdecode(np.frombuffer(buffer.getvalue(), np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
    return _saved(rng, np.ascontiguousarray(pixels), jpeg_share=0.5)


def fluorescence(rng: np.random.Generator) -> GenuineImage:
    """Fluorescence micrograph: stained cells and nuclei on black, with photon (shot) noise from a
    low photon count and Gaussian read noise, as a camera on a microscope records them."""
    shape = (int(rng.integers(192, 384)), int(rng.integers(192, 384)))
    photons = float(rng.uniform(8, 60))  # photons at full brightness: fewer means grainier
    channels = []
    for weight in rng.permutation([1.0, rng.uniform(0, 1), rng.uniform(0, 0.6)]):
        structure = _blobs(rng, shape, int(rng.integers(6, 30)), (6, 26)) * weight
        structure += 0.4 * np.clip(_smooth_noise(rng, shape, 2.0), 0, None) * structure
        counts = rng.poisson(np.clip(structure, 0, None) * photons + 0.5)
        channels.append(counts / photons * 220 + rng.normal(0, rng.uniform(1, 6), shape) + rng.uniform(2, 12))
    image = _to_uint8(np.stack(channels, axis=-1))
    return _saved(rng, _scale_bar(image, rng, (255, 255, 255)), jpeg_share=0.3)


def histology(rng: np.random.Generator) -> GenuineImage:
    """Brightfield histology (H&E-like): pink eosin stroma with texture, purple hematoxylin nuclei,
    uneven illumination; mostly saved as JPEG by slide scanners."""
    shape = (int(rng.integers(192, 384)), int(rng.integers(192, 384)))
    eosin = np.clip(0.5 + 0.25 * _smooth_noise(rng, shape, rng.uniform(2, 6)), 0, 1)
    nuclei = _blobs(rng, shape, int(rng.integers(30, 120)), (3, 8))
    background = np.array([245, 235, 240], np.float32)
    pink, purple = np.array([225, 120, 170], np.float32), np.array([90, 50, 140], np.float32)
    image = background * (1 - eosin[..., None]) + pink * eosin[..., None]
    image = image * (1 - nuclei[..., None]) + purple * nuclei[..., None]
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]] / max(shape)
    image *= (1 - 0.15 * ((xx - 0.5) ** 2 + (yy - 0.5) ** 2))[..., None]
    image += rng.normal(0, rng.uniform(1, 4), image.shape)
    return _saved(rng, _scale_bar(_to_uint8(image), rng, (0, 0, 0)), jpeg_share=0.8)


def electron_micrograph(rng: np.random.Generator) -> GenuineImage:
    """Electron micrograph: grey membranes and organelles under heavy grain (the detector's
    shortcut risk: genuine and grainy)."""
    shape = (int(rng.integers(192, 384)), int(rng.integers(192, 384)))
    field = _smooth_noise(rng, shape, rng.uniform(4, 10))
    membranes = np.exp(-((field / 0.15) ** 2))  # thin walls along the field's zero crossings
    organelles = _blobs(rng, shape, int(rng.integers(4, 16)), (10, 30))
    image = 150 - 70 * membranes - 50 * organelles + 10 * _smooth_noise(rng, shape, 1.0)
    image += rng.normal(0, rng.uniform(8, 22), shape)  # the grain
    grey = _to_uint8(image)
    return _saved(rng, _scale_bar(np.repeat(grey[..., None], 3, axis=2), rng, (0, 0, 0)), jpeg_share=0.4)


def blot(rng: np.random.Generator) -> GenuineImage:
    """Western blot: dark bands in lanes on a light membrane with a background gradient, smears,
    and scanner noise."""
    lanes, height = int(rng.integers(4, 12)), int(rng.integers(80, 200))
    lane_width = int(rng.integers(18, 36))
    width = lanes * (lane_width + 8) + 16
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    ink = np.zeros((height, width), np.float32)
    rows = rng.uniform(0.2, 0.8, int(rng.integers(1, 4))) * height
    for lane in range(lanes):
        centre_x = 12 + lane * (lane_width + 8) + lane_width / 2
        for row in rows:
            strength, thickness = rng.uniform(0.1, 1.0), rng.uniform(2, 6)
            y0 = row + rng.normal(0, 1.5)
            band = np.exp(-(((yy - y0) / thickness) ** 2) - ((xx - centre_x) / (lane_width * 0.55)) ** 6)
            smear = np.exp(-np.clip(yy - y0, 0, None) / rng.uniform(5, 25)) * (yy > y0) * 0.25
            ink += strength * (band + smear * np.exp(-(((xx - centre_x) / (lane_width * 0.5)) ** 6)))
    gradient = 235 - 20 * (xx / width) * rng.uniform(-1, 1) - 15 * (yy / height) * rng.uniform(-1, 1)
    image = (
        gradient - 200 * np.clip(ink, 0, 1) + 6 * _smooth_noise(rng, (height, width), 2) + rng.normal(0, 3, ink.shape)
    )
    grey = _to_uint8(image)
    return _saved(rng, np.repeat(grey[..., None], 3, axis=2), jpeg_share=0.5)


def gel(rng: np.random.Generator) -> GenuineImage:
    """DNA gel under UV: bright bands on black (a blot inverted), with a ladder lane."""
    image = blot(rng)
    return GenuineImage(255 - image.pixels, image.codec, image.quality)


def document_fonts() -> list[Path]:
    """The fonts receipts are set in: matplotlib's DejaVu faces and, where the system has them,
    two Liberation faces (Debian's fonts-liberation)."""
    import matplotlib

    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    names = ["DejaVuSans.ttf", "DejaVuSansMono.ttf", "DejaVuSerif.ttf", "DejaVuSans-Bold.ttf"]
    system = ["LiberationSans-Regular.ttf", "LiberationMono-Regular.ttf"]
    return [folder / n for n in names] + [Path("/usr/share/fonts/truetype/liberation") / n for n in system]


def missing_document_fonts() -> list[str]:
    """The names of `document_fonts` this machine lacks: documents drawn without them differ (a
    dataset's fingerprint records them, so that it is not resumed on a machine with other fonts)."""
    return [path.name for path in document_fonts() if not path.is_file()]


def _font(rng: np.random.Generator, size: int):
    from PIL import ImageFont

    candidates = [path for path in document_fonts() if path.is_file()]
    return ImageFont.truetype(str(rng.choice(candidates)), size)


def document(rng: np.random.Generator) -> GenuineImage:
    """A receipt photographed by a phone: rendered text on paper, warped by the camera's
    perspective onto a table, lit unevenly, blurred a little and saved as a phone JPEG."""
    from PIL import Image, ImageDraw

    width, lines = int(rng.integers(220, 320)), int(rng.integers(10, 22))
    size = int(rng.integers(12, 18))
    paper = Image.new("RGB", (width, (lines + 4) * (size + 6)), tuple(int(v) for v in rng.integers(235, 256, 3)))
    draw, font = ImageDraw.Draw(paper), _font(rng, size)
    items = ["Coffee", "Bread", "Milk 1L", "Parcel fee", "Shipping", "Apples", "Batteries", "Charger", "Tax"]
    draw.text(
        (10, 6), str(rng.choice(["STORE #0412", "Corner Market", "RECEIPT", "Order 58213"])), fill=(0, 0, 0), font=font
    )
    for line in range(lines):
        text = f"{rng.choice(items):<14}{rng.uniform(0.5, 60):>8.2f}"
        draw.text((10, (line + 2) * (size + 6)), text, fill=(20, 20, 20), font=font)
    sheet = np.asarray(paper).astype(np.float32)
    canvas_side = int(max(sheet.shape[:2]) * rng.uniform(1.15, 1.4))
    table = np.full((canvas_side, canvas_side, 3), rng.integers(60, 180, 3), np.float32)
    table += 12 * _smooth_noise(rng, (canvas_side, canvas_side), 8)[..., None]
    h, w = sheet.shape[:2]
    source = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    margin = canvas_side * 0.08
    left = (canvas_side - w) / 2
    target = np.float32(
        [
            [left + rng.uniform(-margin, margin), margin + rng.uniform(-margin, margin) / 2],
            [left + w + rng.uniform(-margin, margin), margin + rng.uniform(-margin, margin) / 2],
            [left + w + rng.uniform(-margin, margin), margin + h + rng.uniform(-margin, margin) / 2],
            [left + rng.uniform(-margin, margin), margin + h + rng.uniform(-margin, margin) / 2],
        ]
    )
    matrix = cv2.getPerspectiveTransform(source, target)
    warped = cv2.warpPerspective(
        sheet, matrix, (canvas_side, canvas_side), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0
    )
    inside = cv2.warpPerspective(np.ones((h, w), np.float32), matrix, (canvas_side, canvas_side))[..., None]
    image = table * (1 - inside) + warped * inside
    yy, xx = np.mgrid[0:canvas_side, 0:canvas_side] / canvas_side
    image *= (0.75 + 0.35 * (1 - np.hypot(xx - rng.uniform(0, 1), yy - rng.uniform(0, 1))))[..., None]
    image = cv2.GaussianBlur(image, (0, 0), rng.uniform(0.4, 1.0)) + rng.normal(0, 2.5, image.shape)
    return GenuineImage(_to_uint8(image), "jpeg", int(rng.integers(80, 94)))


def phone_photo(rng: np.random.Generator, photo: np.ndarray | None = None) -> GenuineImage:
    """A bundled photograph processed as a phone camera does: Bayer mosaic and demosaicing, sensor
    noise, denoising, sharpening, JPEG."""
    if photo is None:
        from datamodules.io import read_image
        from synthesis.embedded import bundled_photo_paths

        paths = bundled_photo_paths()
        photo = read_image(paths[int(rng.integers(len(paths)))])
    height, width = photo.shape[:2]
    side = int(min(height, width) * rng.uniform(0.5, 1.0))
    y, x = int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1))
    crop = photo[y : y + side, x : x + side].astype(np.float32)
    crop = cv2.resize(crop, (min(side, 384), min(side, 384)), interpolation=cv2.INTER_AREA)
    crop += rng.normal(0, rng.uniform(1, 5), crop.shape)
    rgb = _to_uint8(crop)
    mosaic = np.zeros(rgb.shape[:2], np.uint8)  # RGGB: R at (0,0), G at (0,1) and (1,0), B at (1,1)
    mosaic[0::2, 0::2], mosaic[0::2, 1::2] = rgb[0::2, 0::2, 0], rgb[0::2, 1::2, 1]
    mosaic[1::2, 0::2], mosaic[1::2, 1::2] = rgb[1::2, 0::2, 1], rgb[1::2, 1::2, 2]
    demosaiced = cv2.cvtColor(mosaic, cv2.COLOR_BayerBG2RGB)
    denoised = cv2.bilateralFilter(demosaiced, 5, rng.uniform(10, 30), 3)
    blurred = cv2.GaussianBlur(denoised.astype(np.float32), (0, 0), 1.0)
    sharpened = denoised + rng.uniform(0.3, 1.0) * (denoised - blurred)
    return GenuineImage(_to_uint8(sharpened), "jpeg", int(rng.integers(82, 96)))


def _saved(rng: np.random.Generator, pixels: np.ndarray, jpeg_share: float) -> GenuineImage:
    if rng.random() < jpeg_share:
        return GenuineImage(pixels, "jpeg", int(rng.integers(75, 96)))
    return GenuineImage(pixels, "png")


GENUINE_KINDS: Mapping[str, Callable[[np.random.Generator], GenuineImage]] = {
    "chart": chart,
    "fluorescence": fluorescence,
    "histology": histology,
    "electron_micrograph": electron_micrograph,
    "blot": blot,
    "gel": gel,
    "document": document,
    "phone_photo": phone_photo,
}
GRAINY_KINDS = ("fluorescence", "electron_micrograph", "blot", "gel")  # grain is their nature


def write_genuine_sources(
    folder: str | os.PathLike, counts: Mapping[str, int], seed: int = 0, photos: Mapping[str, str] | None = None
) -> list[dict[str, str]]:
    """`counts[kind]` images of each kind under `folder/<kind>/`, as PNG or JPEG (the codec is part
    of the kind: figures are pasted as both); existing files are kept, so a stopped run resumes.

    Returns photo-table entries (`photo`, `key`, `source`, `category`). A phone-processed photo
    keeps its photograph's `source` (`photos`: source key -> path, the bundled photographs by
    default), so it lands in the split of the photo it was made from.
    """
    unknown = sorted(set(counts) - set(GENUINE_KINDS))
    if unknown:
        raise ValueError(f"unknown genuine kinds {unknown}; known: {sorted(GENUINE_KINDS)}")
    if "phone_photo" in counts and photos is None:
        from synthesis.embedded import bundled_photo_paths

        photos = {p.stem: str(p) for p in bundled_photo_paths()}
    decoded: dict[str, np.ndarray] = {}
    entries = []
    for kind, count in counts.items():
        for index in range(int(count)):
            item_seed = [seed, sorted(GENUINE_KINDS).index(kind), index]
            source = f"{kind}_{index:05d}"
            if kind == "phone_photo":
                from datamodules.io import read_image

                keys = sorted(photos)
                source = keys[index % len(keys)]
                if source not in decoded:
                    decoded[source] = read_image(photos[source])
                image = phone_photo(np.random.default_rng(item_seed), decoded[source])
            else:
                image = GENUINE_KINDS[kind](np.random.default_rng(item_seed))
            key = f"{kind}_{index:05d}"
            path = Path(folder) / kind / f"{key}.{'jpg' if image.codec == 'jpeg' else 'png'}"
            if not path.is_file():
                write_image(path, image.pixels, quality=image.quality)
            entries.append({"photo": str(path), "key": key, "source": source, "category": kind})
    return entries
