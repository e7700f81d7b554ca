"""FraudBench-style localized damage edits followed by a whole-frame re-render.

FraudBench's fakes are genuine product photos with damage (scratches, cracks, stains, tears) added by
an image editor, which then re-renders the whole frame. This module imitates both steps with
procedural drawing, so the true extent of the edit is known exactly: `damage_edit` returns the
re-rendered image and the drawn mask, which is what lets tests check that the pair-derived masks of
`synthesis.masks` recover it.

Damage follows the lighting: every effect is blended towards a colour scaled by the local shading
(low-pass luminance), so a stain in shadow is darker than the same stain in light.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

import imageops
from synthesis.common import as_rgb_uint8

__all__ = ["DAMAGE_KINDS", "DamageResult", "damage_edit", "draw_damage", "rerender", "local_shading"]

DAMAGE_KINDS = ("scratch", "crack", "stain", "tear")
MASK_ALPHA = 0.1  # damage weights below this are dropped rather than left as invisible tails


@dataclass
class DamageResult:
    image: np.ndarray  # uint8 H x W x 3: damaged, then re-rendered
    mask: np.ndarray  # bool H x W: the drawn damage
    kind: str
    drawn: np.ndarray  # uint8 H x W x 3: damaged, before the re-render
    meta: dict[str, Any] = field(default_factory=dict)


def local_shading(image: np.ndarray, sigma_fraction: float = 0.03) -> np.ndarray:
    """Low-pass luminance relative to the frame mean (about 1), in [0.3, 2]."""
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32) / 255.0
    sigma = max(2.0, sigma_fraction * max(image.shape[:2]))
    low = cv2.GaussianBlur(grey, (0, 0), sigma)
    return np.clip(low / max(float(low.mean()), 1e-3), 0.3, 2.0)


def _smooth_noise(shape: tuple[int, int], sigma: float, rng: np.random.Generator) -> np.ndarray:
    field_ = cv2.GaussianBlur(rng.standard_normal(shape).astype(np.float32), (0, 0), max(sigma, 0.5))
    return field_ / max(float(field_.std()), 1e-6)


def _contrasting(image: np.ndarray, dark: tuple, light: tuple) -> np.ndarray:
    """Per-pixel damage colour: the dark variant on light surfaces, the light one on dark surfaces.

    Real damage shows as contrast (grime on a pale case, pale scuffs on a black one); the switch
    follows the low-pass luminance and is softened so it draws no seam of its own.
    """
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
    sigma = max(2.0, 0.02 * max(image.shape[:2]))
    light_surface = cv2.GaussianBlur((cv2.GaussianBlur(grey, (0, 0), sigma) > 110).astype(np.float32), (0, 0), 2.0)[
        ..., None
    ]
    return light_surface * np.array(dark, np.float32) + (1 - light_surface) * np.array(light, np.float32)


def _centre(shape: tuple[int, int], margin: float, rng: np.random.Generator) -> tuple[float, float]:
    h, w = shape
    return float(rng.uniform(margin * w, (1 - margin) * w)), float(rng.uniform(margin * h, (1 - margin) * h))


def _walk(
    start: tuple[float, float], angle: float, length: float, step: float, wiggle: float, rng: np.random.Generator
) -> np.ndarray:
    pts = [np.array(start, np.float64)]
    for _ in range(max(2, int(length / step))):
        angle += float(rng.normal(0, wiggle))
        pts.append(pts[-1] + step * np.array([np.cos(angle), np.sin(angle)]))
    return np.array(pts)


def _polyline(canvas: np.ndarray, pts: np.ndarray, thickness: int, value: float = 1.0) -> None:
    cv2.polylines(canvas, [np.round(pts * 4).astype(np.int32)], False, value, thickness, cv2.LINE_AA, shift=2)


def _zone(paths: np.ndarray, shape: tuple[int, int], width: float, rng: np.random.Generator) -> np.ndarray:
    """Jagged band of about `width` px around a drawn path (distance + smooth noise on the edge)."""
    dist = cv2.distanceTransform((paths < 0.5).astype(np.uint8), cv2.DIST_L2, 5)
    edge = width * (1.0 + 0.25 * _smooth_noise(shape, max(2.0, width), rng))
    return (dist < edge).astype(np.float32)


def _stain(image, rng):
    h, w = image.shape[:2]
    frac = float(rng.uniform(0.05, 0.12))
    r = np.sqrt(frac * h * w / np.pi)
    cx, cy = _centre((h, w), 0.25, rng)
    ratio, theta = float(rng.uniform(0.6, 1.0)), float(rng.uniform(0, np.pi))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    u = ((xx - cx) * np.cos(theta) + (yy - cy) * np.sin(theta)) / r
    v = (-(xx - cx) * np.sin(theta) + (yy - cy) * np.cos(theta)) / (r * ratio)
    d = np.sqrt(u**2 + v**2) + 0.18 * _smooth_noise((h, w), r / 4, rng)
    inside = (d < 1.0).astype(np.float32)
    ring = np.exp(-(((1.0 - d) / 0.12) ** 2)) * inside  # coffee-ring: pigment gathers at the rim
    alpha = cv2.GaussianBlur(inside * (0.55 + 0.35 * ring), (0, 0), 0.7)
    colour = _contrasting(image, (95, 62, 30), (200, 170, 120))
    return alpha * float(rng.uniform(0.8, 1.0)), colour, {"radius": round(float(r), 2)}


def _scratch(image, rng):
    h, w = image.shape[:2]
    side = min(h, w)
    length, width = float(rng.uniform(0.45, 0.7)) * side, float(rng.uniform(0.14, 0.22)) * side
    cx, cy = _centre((h, w), 0.3, rng)
    angle = float(rng.uniform(0, np.pi))
    band = np.zeros((h, w), np.float32)
    box = cv2.boxPoints(((cx, cy), (length, width), np.degrees(angle)))
    cv2.fillPoly(band, [np.round(box * 4).astype(np.int32)], 1.0, cv2.LINE_AA, shift=2)
    lines = np.zeros((h, w), np.float32)
    direction = np.array([np.cos(angle), np.sin(angle)])
    normal = np.array([-direction[1], direction[0]])
    thick = max(1, int(round(0.006 * side)))
    for _ in range(int(rng.integers(10, 20))):
        offset = float(rng.uniform(-0.42, 0.42)) * width
        seg = float(rng.uniform(0.4, 0.95)) * length
        along = float(rng.uniform(-(length - seg) / 2, (length - seg) / 2))
        start = np.array([cx, cy]) + normal * offset + direction * (along - seg / 2)
        pts = _walk(tuple(start), angle + float(rng.normal(0, 0.04)), seg, 4.0, 0.01, rng)
        _polyline(lines, pts, thick + int(rng.integers(0, 2)))
    # a scuffed band (abraded finish) with deeper scratch lines inside it
    alpha = np.maximum(0.5 * band, np.minimum(lines, band))
    colour = _contrasting(image, (70, 66, 62), (235, 232, 228))
    return alpha, colour, {"length": round(length, 2), "width": round(width, 2)}


def _crack(image, rng):
    h, w = image.shape[:2]
    side = min(h, w)
    cx, cy = _centre((h, w), 0.3, rng)
    angle = float(rng.uniform(0, 2 * np.pi))
    lines = np.zeros((h, w), np.float32)
    thick = max(2, int(round(0.012 * side)))
    main = _walk((cx, cy), angle, float(rng.uniform(0.45, 0.65)) * side, 3.0, 0.15, rng)
    main = main - (main.mean(axis=0) - np.array([cx, cy]))  # centre the crack on (cx, cy)
    _polyline(lines, main, thick)
    for _ in range(int(rng.integers(2, 5))):
        at = main[int(rng.integers(len(main) // 5, len(main)))]
        branch = _walk(
            tuple(at),
            angle + float(rng.choice([-1, 1]) * rng.uniform(0.5, 1.1)),
            float(rng.uniform(0.12, 0.25)) * side,
            3.0,
            0.2,
            rng,
        )
        _polyline(lines, branch, max(2, thick - 1))
    # the surface around a fracture is chipped and crazed: a dulled zone with the crack inside
    zone = _zone(lines, (h, w), float(rng.uniform(0.05, 0.07)) * side, rng)
    alpha = np.maximum(0.95 * lines, 0.45 * zone)
    colour = _contrasting(image, (25, 22, 20), (240, 238, 235))
    return alpha, colour, {"thickness": thick}


def _tear(image, rng):
    """A torn patch: the top layer ripped off along a jagged outline, exposing a fibrous substrate."""
    h, w = image.shape[:2]
    frac = float(rng.uniform(0.04, 0.10))
    cx, cy = _centre((h, w), 0.25, rng)
    n = 64
    theta = np.linspace(0, 2 * np.pi, n, endpoint=False)
    elong, rot = float(rng.uniform(1.3, 2.2)), float(rng.uniform(0, np.pi))
    jag = np.exp(0.18 * np.cumsum(rng.normal(0, 1, n)) / np.sqrt(n))  # ragged, torn outline
    jag *= rng.uniform(0.94, 1.06, n)
    rx, ry = jag * elong, jag / elong
    r0 = np.sqrt(frac * h * w / (np.pi * float(np.mean(rx * ry))))
    x, y = r0 * rx * np.cos(theta), r0 * ry * np.sin(theta)
    pts = np.stack([cx + x * np.cos(rot) - y * np.sin(rot), cy + x * np.sin(rot) + y * np.cos(rot)], 1)
    patch = np.zeros((h, w), np.float32)
    cv2.fillPoly(patch, [np.round(pts * 4).astype(np.int32)], 1.0, cv2.LINE_AA, shift=2)
    fibres = 0.12 * _smooth_noise((h, w), 1.0, rng)  # paper/cardboard fibre texture
    # the lifted edge casts a shadow along one side of the hole
    shift = np.float32([[1, 0, 3 * np.cos(rot + 1.2)], [0, 1, 3 * np.sin(rot + 1.2)]])
    shadow = patch - cv2.warpAffine(patch, shift, (w, h))
    alpha = np.clip(patch * (0.8 + fibres) + 0.2 * np.clip(shadow, 0, 1), 0, 1) * patch
    colour = _contrasting(image, (150, 135, 110), (232, 225, 210))
    return alpha, colour, {"area_fraction": round(float((patch > 0.5).mean()), 6)}


_DRAWERS = {"stain": _stain, "scratch": _scratch, "crack": _crack, "tear": _tear}


def draw_damage(
    image: np.ndarray, kind: str, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Draw one damage of `kind`; returns (damaged image, drawn mask, parameters).

    The damage is a weight map `alpha` and a colour; each pixel moves towards colour x local shading
    by `alpha`; weights under MASK_ALPHA are dropped, so the mask (alpha > 0) holds every changed
    pixel and nothing imperceptible.
    """
    if kind not in _DRAWERS:
        raise ValueError(f"unknown damage kind {kind!r}; expected one of {DAMAGE_KINDS}")
    rgb = as_rgb_uint8(image)
    alpha, colour, params = _DRAWERS[kind](rgb, rng)
    alpha = np.clip(alpha, 0.0, 1.0).astype(np.float32)
    alpha[alpha < MASK_ALPHA] = 0.0  # no faint tails: every changed pixel is in the mask
    target = colour * local_shading(rgb)[..., None]
    a = alpha[..., None]
    out = np.clip(np.rint(rgb * (1 - a) + np.clip(target, 0, 255) * a), 0, 255).astype(np.uint8)
    return out, alpha > 0, params


def rerender(
    image: np.ndarray,
    rng: np.random.Generator,
    *,
    scale: tuple[float, float] = (0.88, 0.97),
    gain: tuple[float, float] = (0.95, 0.99),
    jpeg_quality: tuple[int, int] = (88, 95),
) -> tuple[np.ndarray, dict[str, Any]]:
    """A mild whole-frame re-render, as editors do: resample, per-channel gain/offset, JPEG.

    The frame is resized by a random factor and back, every channel gets its own gain and an offset
    that never clips (out = gain x in + offset <= 255, a slight fade and colour cast), and the result
    is JPEG-compressed (`imageops`, the encoder of the robustness curves); the size is unchanged.
    Returns (image, parameters).
    """
    rgb = as_rgb_uint8(image)
    h, w = rgb.shape[:2]
    s = float(rng.uniform(*scale))
    small = imageops.resize(rgb, (max(1, round(w * s)), max(1, round(h * s))), "area")
    out = imageops.resize(small, (w, h), "bilinear").astype(np.float32)
    g = rng.uniform(*gain, size=3).astype(np.float32)
    o = (rng.uniform(0.0, 1.0, size=3) * 255.0 * (1.0 - g)).astype(np.float32)
    out = np.clip(np.rint(out * g + o), 0, 255).astype(np.uint8)
    q = int(rng.integers(jpeg_quality[0], jpeg_quality[1] + 1))
    out = imageops.jpeg(out, q)
    params = {
        "scale": round(s, 4),
        "gain": [round(float(x), 4) for x in g],
        "offset": [round(float(x), 3) for x in o],
        "jpeg_quality": q,
    }
    return out, params


def damage_edit(
    image: np.ndarray,
    rng: np.random.Generator,
    *,
    kind: str | None = None,
    rerender_frame: bool = True,
    rerender_options: dict[str, Any] | None = None,
) -> DamageResult:
    """Add one localized damage (random `kind` when None), then re-render the whole frame.

    The returned mask is the drawn damage; outside it the image differs from the source only by the
    re-render, which is what the C.4 derivation (`region_masks_from_pair`) has to see through.
    """
    rgb = as_rgb_uint8(image)
    kind = kind or DAMAGE_KINDS[int(rng.integers(len(DAMAGE_KINDS)))]
    drawn, mask, params = draw_damage(rgb, kind, rng)
    meta: dict[str, Any] = {"operation": "damage", "kind": kind, "damage": params}
    out = drawn
    if rerender_frame:
        out, meta["rerender"] = rerender(drawn, rng, **(rerender_options or {}))
    return DamageResult(out, mask, kind, drawn, meta)
