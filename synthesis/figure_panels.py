"""Figure panels of a kind: line / bar charts, western-blot-like lanes and micrograph-like textures.

Two panels of one kind share furniture (axes, tick labels, legends and their font; lane layout and
labels; scale bar and lettering) without sharing content. They are the hard negatives a duplication
detector must not flag, and their copies are the low-texture positives it must still find.
"""

from __future__ import annotations

import cv2
import numpy as np

__all__ = ["KINDS", "chart_panel", "blot_panel", "micrograph_panel", "figure_panel"]

KINDS = ("chart", "blot", "micrograph")
FONT = cv2.FONT_HERSHEY_SIMPLEX


def chart_panel(rng: np.random.Generator, size: tuple[int, int] = (320, 400)) -> np.ndarray:
    """A white chart with the same axes, ticks, labels and legend layout every time; only the
    plotted data (two or three curves or a set of bars) is drawn at random."""
    height, width = size
    image = np.full((height, width, 3), 255, np.uint8)
    left, bottom, top, right = 48, height - 36, 24, width - 16
    cv2.line(image, (left, bottom), (right, bottom), (0, 0, 0), 2)
    cv2.line(image, (left, bottom), (left, top), (0, 0, 0), 2)
    for i in range(6):
        x = left + i * (right - left) // 5
        y = bottom - i * (bottom - top) // 5
        cv2.line(image, (x, bottom), (x, bottom + 5), (0, 0, 0), 1)
        cv2.line(image, (left - 5, y), (left, y), (0, 0, 0), 1)
        cv2.putText(image, str(i * 20), (x - 8, bottom + 20), FONT, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.putText(image, f"{i * 0.2:.1f}", (left - 36, y + 4), FONT, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
    colours = [(31, 119, 180), (255, 127, 14), (44, 160, 44)]
    xs = np.linspace(left + 4, right - 4, 40)
    if rng.random() < 0.5:
        for colour in colours[: int(rng.integers(2, 4))]:
            walk = np.cumsum(rng.normal(0, 1, xs.size))
            walk = (walk - walk.min()) / max(np.ptp(walk), 1e-6)
            ys = bottom - 8 - walk * (bottom - top - 40) * rng.uniform(0.5, 1.0)
            points = np.stack([xs, ys], 1).round().astype(np.int32)
            cv2.polylines(image, [points], False, colour, 2, cv2.LINE_AA)
    else:
        count = int(rng.integers(4, 9))
        step = (right - left) / count
        for i in range(count):
            bar = int((bottom - top - 30) * rng.uniform(0.1, 1.0))
            x0 = int(left + i * step + step * 0.2)
            cv2.rectangle(image, (x0, bottom - bar), (int(x0 + step * 0.6), bottom - 1), colours[i % 2], -1)
    cv2.rectangle(image, (right - 96, top), (right - 4, top + 36), (0, 0, 0), 1)
    for i, label in enumerate(("control", "treated")):
        cv2.line(image, (right - 90, top + 12 + 14 * i), (right - 72, top + 12 + 14 * i), colours[i], 2)
        cv2.putText(image, label, (right - 68, top + 16 + 14 * i), FONT, 0.35, (0, 0, 0), 1, cv2.LINE_AA)
    return image


def blot_panel(rng: np.random.Generator, size: tuple[int, int] = (160, 400), lanes: int = 6) -> np.ndarray:
    """Dark bands in fixed lanes on a light membrane with lane labels; band strength, shape and
    position vary, the layout does not."""
    height, width = size
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    membrane = 225 + rng.normal(0, 3, (height, width)).astype(np.float32)
    membrane = cv2.GaussianBlur(membrane, (0, 0), 2)
    lane_width = width / lanes
    darkness = np.zeros((height, width), np.float32)
    for lane in range(lanes):
        cx = (lane + 0.5) * lane_width
        for _ in range(int(rng.integers(1, 4))):
            cy = rng.uniform(0.3, 0.9) * height
            sx, sy = lane_width * rng.uniform(0.28, 0.4), rng.uniform(3, 8)
            darkness += rng.uniform(60, 190) * np.exp(-((np.abs(xs - cx) / sx) ** 4) - ((ys - cy) / sy) ** 2)
    image = np.clip(membrane - darkness + rng.normal(0, 2, (height, width)), 0, 255).astype(np.uint8)
    image = np.repeat(image[..., None], 3, axis=2)
    for lane in range(lanes):
        cv2.putText(image, str(lane + 1), (int((lane + 0.4) * lane_width), 18), FONT, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    return image


def micrograph_panel(rng: np.random.Generator, size: tuple[int, int] = (320, 320)) -> np.ndarray:
    """Fluorescence-like cells on a dark, noisy background, with a white scale bar and a panel letter
    at the same places every time."""
    height, width = size
    noise = cv2.GaussianBlur(rng.normal(0, 1, (height, width)).astype(np.float32), (0, 0), 6)
    base = 20 + 8 * noise / max(noise.std(), 1e-6)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    hue = rng.integers(0, 3)
    cells = np.zeros((height, width), np.float32)
    for _ in range(int(rng.integers(8, 20))):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(6, 18)
        cells += rng.uniform(80, 200) * np.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * r * r))
    texture = cv2.GaussianBlur(rng.normal(0, 1, (height, width)).astype(np.float32), (0, 0), 1.2)
    cells *= 1 + 0.25 * texture
    image = np.zeros((height, width, 3), np.float32)
    image[..., hue] = base + cells
    image[..., (hue + 1) % 3] = base * 0.6 + cells * 0.3
    image[..., (hue + 2) % 3] = base * 0.5
    image = np.clip(image, 0, 255).astype(np.uint8)
    cv2.rectangle(image, (width - 70, height - 18), (width - 20, height - 13), (255, 255, 255), -1)
    cv2.putText(image, "10 um", (width - 70, height - 24), FONT, 0.35, (255, 255, 255), 1, cv2.LINE_AA)
    cv2.putText(image, "A", (8, 24), FONT, 0.7, (255, 255, 255), 2, cv2.LINE_AA)
    return image


def figure_panel(kind: str, rng: np.random.Generator) -> np.ndarray:
    """One panel of `kind` (chart | blot | micrograph)."""
    if kind == "chart":
        return chart_panel(rng)
    if kind == "blot":
        return blot_panel(rng)
    if kind == "micrograph":
        return micrograph_panel(rng)
    raise ValueError(f"unknown figure panel kind {kind!r}; expected one of {KINDS}")
