"""Duplication forgeries as panel pairs with their operation set (THEMIS App. A.3.5).

Duplication is judged on a pair of panels, and the label is the set of operations linking them
(multi-label, THEMIS CMO-I). Global duplication reuses the whole panel; local duplication takes two
overlapping crops of one panel and transforms one (crop-then-transform, scaling via reverse
cropping). Every pair also carries `mask_a`/`mask_b`: where the shared content lies in each panel.

Operation names (the fine-grained ones of THEMIS Table 6): `direct_reuse`, `rotate180`, `hflip`,
`vflip`, `scaling` (local only) and the parameter changes `brightness`, `contrast`, `saturation`,
`hue`, `color_temperature`. `direct_reuse` is recorded only when nothing else was applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import cv2
import numpy as np

from synthesis.common import as_rgb_uint8

__all__ = [
    "GEOMETRIC",
    "PARAMETERS",
    "LOCAL_GEOMETRIC",
    "CMO_CATEGORIES",
    "DuplicationPair",
    "apply_geometric",
    "apply_parameter",
    "cmo_categories",
    "global_duplication",
    "local_duplication",
]

GEOMETRIC = ("direct_reuse", "rotate180", "hflip", "vflip")
LOCAL_GEOMETRIC = ("direct_reuse", "rotate180", "hflip", "vflip", "scaling")
PARAMETERS = ("brightness", "contrast", "saturation", "hue", "color_temperature")
CMO_CATEGORIES = {
    "direct_reuse": "direct",
    "scaling": "scaling",
    "rotate180": "rotation",
    "hflip": "flip",
    "vflip": "flip",
    **{p: "parameter" for p in PARAMETERS},
}
MIN_LOCAL_SIDE = 350


@dataclass
class DuplicationPair:
    panel_a: np.ndarray  # reference panel, uint8 H x W x 3
    panel_b: np.ndarray  # duplicated panel, same size as panel_a for local pairs
    operations: tuple[str, ...]  # sorted operation names
    scope: str  # "global" | "local"
    mask_a: np.ndarray  # bool: shared content in panel A
    mask_b: np.ndarray  # bool: the same content in panel B
    meta: dict[str, Any] = field(default_factory=dict)


def cmo_categories(operations: Sequence[str]) -> set[str]:
    """Map operations to THEMIS CMO-I answers: direct, scaling, rotation, flip, parameter."""
    return {CMO_CATEGORIES[op] for op in operations}


def apply_geometric(image: np.ndarray, op: str) -> np.ndarray:
    """Size-preserving geometry; each is its own inverse."""
    if op == "direct_reuse":
        return image.copy()
    if op == "rotate180":
        return cv2.rotate(image, cv2.ROTATE_180)
    if op == "hflip":
        return cv2.flip(image, 1)
    if op == "vflip":
        return cv2.flip(image, 0)
    raise ValueError(f"unknown geometric operation {op!r}; expected one of {GEOMETRIC}")


def _signed(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi) * (1 if rng.random() < 0.5 else -1))


def apply_parameter(
    image: np.ndarray, op: str, rng: np.random.Generator, value: float | None = None
) -> tuple[np.ndarray, float]:
    """Apply one parameter change with a visible but plausible magnitude; returns (image, value).

    brightness: added offset (+-20..45); contrast: gain about the mean (0.6..0.8 or 1.25..1.5);
    saturation: HSV S gain (0.45..0.7 or 1.4..1.8); hue: OpenCV hue shift (+-6..15 of 180);
    color_temperature: red/blue gains 1 +- t, t = +-0.08..0.18 (warm > 0), applied with a LUT.
    """
    img = image
    if op == "brightness":
        v = _signed(rng, 20, 45) if value is None else value
        out = cv2.convertScaleAbs(img, alpha=1.0, beta=v)
    elif op == "contrast":
        v = (
            (float(rng.uniform(0.6, 0.8)) if rng.random() < 0.5 else float(rng.uniform(1.25, 1.5)))
            if value is None
            else value
        )
        mean = float(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).mean())
        out = np.clip((img.astype(np.float32) - mean) * v + mean, 0, 255).round().astype(np.uint8)
    elif op == "saturation":
        v = (
            (float(rng.uniform(0.45, 0.7)) if rng.random() < 0.5 else float(rng.uniform(1.4, 1.8)))
            if value is None
            else value
        )
        hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV).astype(np.float32)
        hsv[..., 1] = np.clip(hsv[..., 1] * v, 0, 255)
        out = cv2.cvtColor(hsv.round().astype(np.uint8), cv2.COLOR_HSV2RGB)
    elif op == "hue":
        v = _signed(rng, 6, 15) if value is None else value
        hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV)
        hsv[..., 0] = ((hsv[..., 0].astype(np.int16) + int(round(v))) % 180).astype(np.uint8)
        out = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    elif op == "color_temperature":
        v = _signed(rng, 0.08, 0.18) if value is None else value
        ramp = np.arange(256, dtype=np.float32)
        lut_r = np.clip(ramp * (1 + v), 0, 255).astype(np.uint8)
        lut_b = np.clip(ramp * (1 - v), 0, 255).astype(np.uint8)
        r, g, b = cv2.split(img)
        out = cv2.merge([cv2.LUT(r, lut_r), g, cv2.LUT(b, lut_b)])
    else:
        raise ValueError(f"unknown parameter operation {op!r}; expected one of {PARAMETERS}")
    return out, round(float(v), 4)


def _choose_parameters(rng: np.random.Generator, parameters: Sequence[str] | None, max_parameters: int) -> list[str]:
    if parameters is not None:
        bad = [p for p in parameters if p not in PARAMETERS]
        if bad:
            raise ValueError(f"unknown parameter operations {bad}; expected among {PARAMETERS}")
        return list(parameters)
    count = int(rng.integers(0, max_parameters + 1))
    return [PARAMETERS[i] for i in sorted(rng.choice(len(PARAMETERS), size=count, replace=False))]


def _apply_parameters(
    image: np.ndarray, names: Sequence[str], rng: np.random.Generator
) -> tuple[np.ndarray, dict[str, float]]:
    values = {}
    for name in names:
        image, values[name] = apply_parameter(image, name, rng)
    return image, values


def _label(geometric: Sequence[str], parameters: Sequence[str]) -> tuple[str, ...]:
    ops = {g for g in geometric if g != "direct_reuse"} | set(parameters)
    return tuple(sorted(ops or {"direct_reuse"}))


def global_duplication(
    image: np.ndarray,
    rng: np.random.Generator,
    *,
    geometric: str | None = None,
    parameters: Sequence[str] | None = None,
    max_parameters: int = 2,
) -> DuplicationPair:
    """Reuse the whole panel: direct, 180 degree rotation or a flip, plus up to two parameter changes.

    `geometric` and `parameters` force the operations; otherwise `rng` picks one geometry and 0 to
    `max_parameters` distinct parameter changes.
    """
    panel = as_rgb_uint8(image)
    geo = geometric if geometric is not None else GEOMETRIC[int(rng.integers(len(GEOMETRIC)))]
    names = _choose_parameters(rng, parameters, max_parameters)
    dup, values = _apply_parameters(apply_geometric(panel, geo), names, rng)
    full = np.ones(panel.shape[:2], dtype=bool)
    meta = {"geometric": geo, "parameters": values, "duplication_ratio": 1.0}
    return DuplicationPair(panel.copy(), dup, _label([geo], names), "global", full, full.copy(), meta)


def _rect_mask(shape: tuple[int, int], rect: tuple[int, int, int, int], origin: tuple[int, int]) -> np.ndarray:
    """Boolean mask of `rect` (x0, y0, x1, y1 in image coords) inside a panel at `origin`."""
    m = np.zeros(shape, dtype=bool)
    x0, y0, x1, y1 = rect
    ox, oy = origin
    m[max(0, y0 - oy) : max(0, y1 - oy), max(0, x0 - ox) : max(0, x1 - ox)] = True
    return m


def _intersect(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    return (x0, y0, max(x0, x1), max(y0, y1))


def _area(r: tuple[int, int, int, int]) -> int:
    return (r[2] - r[0]) * (r[3] - r[1])


def local_duplication(
    image: np.ndarray,
    rng: np.random.Generator,
    *,
    mode: str | None = None,
    geometric: Sequence[str] | None = None,
    parameters: Sequence[str] | None = None,
    scale: float | None = None,
    max_parameters: int = 2,
    min_side: int = MIN_LOCAL_SIDE,
) -> DuplicationPair:
    """Two overlapping crops of one panel; panel B is transformed (crop-then-transform).

    `mode` (diagonal | vertical | horizontal window) sets how the crops overlap. `geometric` may hold
    `scaling` and/or one of rotate180/hflip/vflip (random when None). Scaling uses reverse cropping:
    for a zoom factor s, B is cut at (size / s) and resized back, so both panels keep one size.
    Panels smaller than `min_side` on either side are refused, as in the seed.

    Kept in one piece: crop placement, transform and the two masks depend on each other's coordinates,
    and splitting them would pass half a dozen values between functions.
    """
    panel = as_rgb_uint8(image)
    H, W = panel.shape[:2]
    if min(H, W) < min_side:
        raise ValueError(f"local duplication needs panels of at least {min_side} x {min_side}, got {W} x {H}")
    mode = mode or ("diagonal", "vertical", "horizontal")[int(rng.integers(3))]
    if mode not in ("diagonal", "vertical", "horizontal"):
        raise ValueError(f"mode must be diagonal, vertical or horizontal, got {mode!r}")
    if geometric is None:
        first = LOCAL_GEOMETRIC[int(rng.integers(len(LOCAL_GEOMETRIC)))]
        geo = [first]
        if first in ("rotate180", "hflip", "vflip") and rng.random() < 0.3:
            geo.append("scaling")
    else:
        geo = list(geometric)
        bad = [g for g in geo if g not in LOCAL_GEOMETRIC]
        if bad or sum(g in ("rotate180", "hflip", "vflip") for g in geo) > 1:
            raise ValueError(f"geometric must be 'scaling' and/or one of rotate180/hflip/vflip, got {geo}")
    names = _choose_parameters(rng, parameters, max_parameters)

    r = float(rng.uniform(0.55, 0.75))
    cw = int(round(r * W)) if mode in ("diagonal", "horizontal") else int(round(rng.uniform(0.8, 1.0) * W))
    ch = int(round(r * H)) if mode in ("diagonal", "vertical") else int(round(rng.uniform(0.8, 1.0) * H))
    ax = 0 if mode != "vertical" else int(rng.integers(0, W - cw + 1))
    ay = 0 if mode != "horizontal" else int(rng.integers(0, H - ch + 1))
    bx = W - cw if mode != "vertical" else ax
    by = H - ch if mode != "horizontal" else ay
    rect_a, rect_b = (ax, ay, ax + cw, ay + ch), (bx, by, bx + cw, by + ch)
    if rng.random() < 0.5:  # which crop is the reference is arbitrary
        rect_a, rect_b = rect_b, rect_a

    s = 1.0
    src_b = rect_b
    if "scaling" in geo:
        s_min = max(ch / H, cw / W)  # zooming out needs a larger cut, which must fit in the frame
        if scale is not None:
            s = float(scale)
        elif rng.random() < 0.5 and s_min < 0.9:
            s = float(rng.uniform(max(0.75, s_min), 0.9))
        else:
            s = float(rng.uniform(1.15, 1.5))
        if s < s_min - 1e-9:
            raise ValueError(f"scale {s:.3f} needs a cut larger than the panel (minimum {s_min:.3f})")
        nw, nh = min(W, int(round(cw / s))), min(H, int(round(ch / s)))
        ov = _intersect(rect_a, rect_b)
        cx = ((rect_b[0] + rect_b[2]) / 2 + (ov[0] + ov[2]) / 2) / 2
        cy = ((rect_b[1] + rect_b[3]) / 2 + (ov[1] + ov[3]) / 2) / 2
        x0 = int(np.clip(round(cx - nw / 2), 0, W - nw))
        y0 = int(np.clip(round(cy - nh / 2), 0, H - nh))
        src_b = (x0, y0, x0 + nw, y0 + nh)

    overlap = _intersect(rect_a, src_b)
    if _area(overlap) == 0:
        raise ValueError("crops do not overlap")
    panel_a = panel[rect_a[1] : rect_a[3], rect_a[0] : rect_a[2]].copy()
    cut = panel[src_b[1] : src_b[3], src_b[0] : src_b[2]]
    mask_b = _rect_mask(cut.shape[:2], overlap, (src_b[0], src_b[1]))
    if cut.shape[:2] != (ch, cw):
        interp = cv2.INTER_AREA if cut.shape[1] > cw else cv2.INTER_CUBIC
        cut = cv2.resize(cut, (cw, ch), interpolation=interp)
        mask_b = cv2.resize(mask_b.astype(np.uint8), (cw, ch), interpolation=cv2.INTER_NEAREST) > 0
    flips = [g for g in geo if g in ("rotate180", "hflip", "vflip")]
    for g in flips:
        cut = apply_geometric(cut, g)
        mask_b = apply_geometric(mask_b.astype(np.uint8), g).astype(bool)
    panel_b, values = _apply_parameters(np.ascontiguousarray(cut), names, rng)
    mask_a = _rect_mask((ch, cw), overlap, (rect_a[0], rect_a[1]))
    meta = {
        "mode": mode,
        "rect_a": list(rect_a),
        "rect_b": list(src_b),
        "scale": round(s, 4),
        "geometric": geo,
        "parameters": values,
        "duplication_ratio": round(float(mask_a.mean()), 6),
    }
    return DuplicationPair(panel_a, panel_b, _label(geo, names), "local", mask_a, mask_b, meta)
