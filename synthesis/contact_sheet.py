"""A contact sheet of a generated dataset: one example per operation with its source and mask.

Seeing the data is the quickest check that it is what a detector should learn from (plausible
forgeries, masks on the right pixels). `generate_dataset` writes `contact_sheet.png` beside the
manifest; the README's picture is one of these.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import cv2
import numpy as np

from datamodules.io import read_image, read_mask, write_image

__all__ = ["contact_sheet"]

COLUMNS = ("source", "manipulated", "mask (red)", "|difference| x4")


def _tile(image: np.ndarray, size: int) -> np.ndarray:
    """Fit `image` into a size x size grey tile, keeping its aspect ratio."""
    h, w = image.shape[:2]
    scale = size / max(h, w)
    small = cv2.resize(image, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
    tile = np.full((size, size, 3), 40, np.uint8)
    y, x = (size - small.shape[0]) // 2, (size - small.shape[1]) // 2
    tile[y : y + small.shape[0], x : x + small.shape[1]] = small
    return tile


def _label(width: int, text: str, height: int = 22) -> np.ndarray:
    strip = np.full((height, width, 3), 255, np.uint8)
    cv2.putText(strip, text, (6, height - 7), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    return strip


def _example(output: Path, row: dict[str, Any]) -> list[np.ndarray]:
    fake = read_image(output / row["path"])
    info = json.loads((output / row["mask"]).with_suffix(".json").read_text())
    source_path = info["source_panel"]
    if row["group"].startswith("duplication"):  # show the pair: panel A as the source of panel B
        source_path = row["path"].replace("_b.png", "_a.png")
    source = read_image(output / source_path)
    mask = read_mask(output / row["mask"]).astype(bool)
    overlay = fake.copy()
    overlay[mask] = (0.5 * overlay[mask] + 0.5 * np.array([255, 0, 0])).astype(np.uint8)
    if source.shape != fake.shape:
        source_for_diff = cv2.resize(source, fake.shape[1::-1], interpolation=cv2.INTER_AREA)
    else:
        source_for_diff = source
    diff = np.clip(np.abs(fake.astype(np.int16) - source_for_diff.astype(np.int16)) * 4, 0, 255).astype(np.uint8)
    return [source, fake, overlay, diff]


def contact_sheet(
    output: str | Path, rows: Sequence[dict[str, Any]], path: str | Path | None = None, tile: int = 160
) -> Path | None:
    """One row per operation (its first example in manifest order): source, manipulated, mask, difference.

    `rows` are manifest rows with paths relative to `output`. Returns the PNG written, or None when
    there is no manipulated image with a mask.
    """
    output = Path(output)
    chosen: dict[str, dict[str, Any]] = {}
    for row in rows:
        operation = Path(row["path"]).parent.name  # fake/<operation>/<name>.png
        if row.get("label") == 1 and row.get("mask") and operation not in chosen:
            if row["group"].startswith("duplication") and not row["path"].endswith("_b.png"):
                continue
            chosen[operation] = row
    if not chosen:
        return None
    width = tile * len(COLUMNS)
    header = np.concatenate([_label(tile, name) for name in COLUMNS], axis=1)
    parts = [header]
    for row in chosen.values():
        parts.append(_label(width, f"{row['group']}: {row['path']}"))
        parts.append(np.concatenate([_tile(im, tile) for im in _example(output, row)], axis=1))
    target = Path(path) if path else output / "contact_sheet.png"
    write_image(target, np.concatenate(parts, axis=0))
    return target
