"""The report page's pictures drawn while a run scores, packed into strips.

The decoding threads shrink each image to its thumbnail as they decode it (a file small enough
to be its own thumbnail is left as it is: the page shows the file); the run's map writer
(`inference.masks.MapWriter`, a background thread) hands it here with the map, if any. Pictures
are kept in strips of `STRIP` side by side, one JPEG (PNG for masks) per strip: creating a file
costs more than encoding a thumbnail, so one file per strip instead of one per image is most of
what keeps the report cheap. The page shows each picture as its box of the strip (`RowEvidence`
`*_box`: x, width, height).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import cv2
import numpy as np

from inference.batches import Thumbnailer
from inference.html_evidence import (
    RowEvidence,
    colour_lut,
    encode_picture,
    map_pictures,
    relative,
    shown_as_itself,
    thumbnail,
)

STRIP = 64  # pictures per strip file
KIND_FIELDS = {"thumbs": "thumb", "overlays": "overlay", "masks": "mask"}  # RowEvidence field of each kind


PAGE_FOLDER_PARTS = {"thumbs", "overlays", "masks", "pages", "plots", "pairs", "rows.js"}


def check_page_folder(files: Path) -> None:
    """A report empties its `<page>_files/` folder before writing it again; one that holds anything a
    report does not write is the user's, and is refused instead."""
    if not files.exists():
        return
    foreign = sorted(p.name for p in files.iterdir() if p.name not in PAGE_FOLDER_PARTS) if files.is_dir() else [files]
    if foreign:
        raise ValueError(
            f"{files} holds files no report writes ({', '.join(map(str, foreign[:3]))}): move them, or choose "
            "another output (the report's folder is named after it)"
        )


class PictureStrip:
    """Pictures of one kind (`thumbs`, `overlays` or `masks`) waiting for their strip file."""

    def __init__(self, folder: Path, kind: str, suffix: str, size: int) -> None:
        self.folder, self.kind, self.suffix, self.size = folder / kind, kind, suffix, size
        self.folder.mkdir(parents=True, exist_ok=True)
        self.waiting: list[tuple[RowEvidence, np.ndarray]] = []
        self.written = 0

    def add(self, evidence: RowEvidence, picture: np.ndarray) -> None:
        self.waiting.append((evidence, picture))
        if len(self.waiting) >= self.size:
            self.flush()

    def flush(self) -> None:
        """Write the waiting pictures as one strip (left to right, top-aligned) and tell each row where."""
        if not self.waiting:
            return
        height = max(p.shape[0] for _, p in self.waiting)
        width = sum(p.shape[1] for _, p in self.waiting)
        colour = self.waiting[0][1].ndim == 3
        strip = np.empty((height, width, 3) if colour else (height, width), np.uint8)
        target = self.folder / f"strip-{self.written:06d}{self.suffix}"
        link = relative(target, self.folder.parent.parent)
        field, box_field = self.kind_field, f"{self.kind_field}_box"
        x = 0
        for evidence, picture in self.waiting:
            rows, columns = picture.shape[:2]
            place = strip[:rows, x : x + columns]
            if colour:  # RGB to the encoder's BGR while copying: one pass over the pixels, not two
                cv2.cvtColor(picture, cv2.COLOR_RGB2BGR, dst=place)
            else:
                place[...] = picture
            if rows < height:  # below a shorter picture
                strip[rows:, x : x + columns] = 0
            setattr(evidence, field, link)
            setattr(evidence, box_field, (x, columns, rows))
            x += columns
        write_strip_file(target, encode_picture(strip, self.suffix))
        self.written += 1
        self.waiting = []

    @property
    def kind_field(self) -> str:
        return KIND_FIELDS[self.kind]


def write_strip_file(target: Path, encoded: bytes) -> None:
    """One write makes the file (the page that names it is written after it). A function of its own
    so that `benchmarks/bench_report_overhead.py --parts` can time file creation apart from encoding."""
    target.write_bytes(encoded)


class EvidenceDrawer:
    """Draws each scored row's thumbnail and, for localizers, its map overlay and mask at the
    threshold (with the share of pixels above it), as the run scores; the page reuses `drawn`.

    Files go under `files` (the page's `<stem>_report_files/`, emptied first); `drawn` maps each
    input path to its pictures, relative to `files`' parent (the page's folder), complete once
    `finish` has written the last strips. `maps=False` (blinded pages) draws thumbnails only.
    `per_strip`: pictures per file (default `STRIP`); 1 for a page that may embed them (each
    picture then appears once on the page, not once per row that shows a box of its strip).
    `link_sources`: a scored file small enough to be its own thumbnail (`shown_as_itself`) is shown
    as it is instead of drawn (not for a page that embeds its pictures, which must hold them all).
    `threshold_of`: each input's own threshold (its category's), where the model has them: its mask
    is drawn at the threshold that decided it.
    """

    def __init__(
        self,
        files: Path,
        threshold: float,
        maps: bool = True,
        per_strip: int | None = None,
        link_sources: bool = False,
        threshold_of: Callable[[str], float] | None = None,
    ) -> None:
        if files.exists():
            check_page_folder(files)
            shutil.rmtree(files)
        self.files, self.threshold, self.maps, self.link_sources = files, float(threshold), maps, link_sources
        self.threshold_of = threshold_of or (lambda path: self.threshold)
        self.lut = colour_lut()
        self.drawn: dict[str, RowEvidence] = {}
        self.strips = {
            "thumbs": PictureStrip(files, "thumbs", ".jpg", per_strip or STRIP),
            "overlays": PictureStrip(files, "overlays", ".jpg", per_strip or STRIP),
            "masks": PictureStrip(files, "masks", ".png", per_strip or STRIP),
        }

    def thumbnailer(self, localizer: bool) -> Thumbnailer:
        """What the decoding threads make of each decoded image: its thumbnail, or None where the
        page shows the scored file itself (never for a localizer's maps: they are drawn over the thumbnail)."""
        linked = self.link_sources and not (localizer and self.maps)

        def picture(path: str, image: np.ndarray) -> np.ndarray | None:
            return None if linked and shown_as_itself(path, image.shape) else thumbnail(image)

        return picture

    def draw(self, index: int, path: str, small: np.ndarray | None, map_u8: np.ndarray | None = None) -> None:
        """The row at input position `index`: its thumbnail `small` (None: the page shows the scored
        file), and its 8-bit map (original size)."""
        evidence = RowEvidence()
        self.drawn[path] = evidence
        if small is None:
            evidence.thumb_is_source = True
            return
        self.strips["thumbs"].add(evidence, small)
        if map_u8 is not None and self.maps:
            overlay, mask, evidence.pixel_share = map_pictures(small, map_u8, self.threshold_of(path), self.lut)
            self.strips["overlays"].add(evidence, overlay)
            self.strips["masks"].add(evidence, mask)

    def finish(self) -> dict[str, RowEvidence]:
        """Write the strips still waiting (call once the map writer is done); returns `drawn`."""
        for strip in self.strips.values():
            strip.flush()
        return self.drawn
