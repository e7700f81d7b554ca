"""What every figure panel of a kind shares: rulings (axes) and glyphs (tick labels, legends,
lettering, scale bars). `detectors.matching` masks them before matching (and re-exports
`furniture_mask`), since two different charts or micrographs share them without sharing content."""

from __future__ import annotations

import cv2
import numpy as np

__all__ = ["furniture_mask"]


def furniture_mask(gray: np.ndarray) -> np.ndarray:
    """Rulings (long thin horizontal / vertical strokes) and glyphs (small components of ink on a
    flat surround: tick labels, legends, lettering, scale bars), dilated by 6 px.

    They are what two different charts or micrographs of one kind share, so they are not evidence.
    """
    gray = gray.astype(np.uint8)
    height, width = gray.shape
    window = min(21, (min(height, width) // 2) * 2 - 1)
    if window < 3:
        return np.zeros_like(gray, dtype=bool)
    background = cv2.medianBlur(gray, window)
    ink = (cv2.absdiff(gray, background) > 60).astype(np.uint8)
    rulings = cv2.morphologyEx(ink, cv2.MORPH_OPEN, np.ones((1, max(15, width // 5)), np.uint8)) | cv2.morphologyEx(
        ink, cv2.MORPH_OPEN, np.ones((max(15, height // 5), 1), np.uint8)
    )
    count, labels, stats, _ = cv2.connectedComponentsWithStats(ink & (1 - rulings), connectivity=8)
    # A glyph sits on a flat surround: with its ink replaced by the background, the image is smooth.
    surround = np.where(ink > 0, background, gray).astype(np.float32)
    roughness = np.sqrt(np.maximum(cv2.blur(surround**2, (15, 15)) - cv2.blur(surround, (15, 15)) ** 2, 0))
    flat = labels.ravel()
    area = np.bincount(flat, minlength=count).astype(np.float64)
    rough = np.bincount(flat, roughness.ravel().astype(np.float64), minlength=count) / np.maximum(area, 1)
    glyph = (
        (stats[:, cv2.CC_STAT_HEIGHT] <= max(6, 0.12 * height))
        & (stats[:, cv2.CC_STAT_WIDTH] <= max(6, 0.35 * width))
        & (area >= 3)
        & (rough <= 8)
    )
    glyph[0] = False
    mask = (rulings > 0) | glyph[labels]
    return cv2.dilate(mask.astype(np.uint8), np.ones((13, 13), np.uint8)) > 0
