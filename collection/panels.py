"""Cutting a figure into panels at its white gutters (recursive XY-cut).

A gutter is a run of at least `min_gutter` rows (or columns) whose pixels are all near white
(>= `white`). The figure is cut at its gutters across its whole width, each piece across its whole
height, and so on until no piece has a gutter; pieces smaller than `min_side` (labels, stray
lines) are dropped and a figure without gutters is one panel. Panels that touch, or sit on a
coloured background, stay together: pass them cut, or give a layout with boxes.
"""

from __future__ import annotations

import numpy as np

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 in pixels


def runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of True."""
    padded = np.concatenate([[False], flags, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[::2], edges[1::2]))


def split_figure(image: np.ndarray, white: int = 245, min_gutter: int = 4, min_side: int = 32) -> list[Box]:
    """Panel boxes of a figure (RGB uint8), in reading order (top to bottom, left to right)."""
    ink = (image[..., :3] < white).any(axis=2) if image.ndim == 3 else image < white
    boxes: list[Box] = []

    def cut(x0: int, y0: int, x1: int, y1: int, axis: int, tried_other: bool) -> None:
        part = ink[y0:y1, x0:x1]
        filled = part.any(axis=1 - axis)  # axis 0: which rows hold ink; 1: which columns
        pieces = [(s, e) for s, e in runs(filled)]
        gaps = [(e, s) for (_, e), (s, _) in zip(pieces, pieces[1:]) if s - e >= min_gutter]
        if not pieces:
            return
        # merge pieces separated by gaps narrower than a gutter
        merged, start = [], pieces[0][0]
        for (_, end), (next_start, _) in zip(pieces, pieces[1:]):
            if (end, next_start) in gaps:
                merged.append((start, end))
                start = next_start
        merged.append((start, pieces[-1][1]))
        if len(merged) == 1 and tried_other:
            s, e = merged[0]
            box = (x0, y0 + s, x1, y0 + e) if axis == 0 else (x0 + s, y0, x0 + e, y1)
            if box[2] - box[0] >= min_side and box[3] - box[1] >= min_side:
                boxes.append(tuple(int(v) for v in box))
            return
        for s, e in merged:
            if axis == 0:
                cut(x0, y0 + s, x1, y0 + e, 1, len(merged) == 1)
            else:
                cut(x0 + s, y0, x0 + e, y1, 0, len(merged) == 1)

    cut(0, 0, ink.shape[1], ink.shape[0], 0, False)
    return boxes or [(0, 0, image.shape[1], image.shape[0])]
