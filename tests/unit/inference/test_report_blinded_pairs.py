"""A blinded page of duplication pairs (for people rating them) shows A and B and nothing of what
the detector made of them: no score, decision, operations, transform, reason or outline."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from datamodules.io import write_image
from inference.html_report import write_html_report
from tests.unit.inference.test_html_report import HOSTILE, header, picture_pixels

OUTLINE_AND_LINES = [(0, 255, 255), (0, 200, 0)]  # what `draw_pair` draws: cyan regions, green matches


def pair_rows(folder: Path) -> list[dict]:
    """A flagged pair (with masks, matched points, operations and a reason), a pair with nothing
    shared and a pair that could not be scored; the images are greys, so no drawn colour hides in them."""
    ramp = np.broadcast_to(np.linspace(60, 190, 120, dtype=np.uint8)[None, :, None], (90, 120, 3))
    for name in ("a.png", HOSTILE, "c.png"):
        write_image(folder / name, np.ascontiguousarray(ramp))
    mask = np.zeros((90, 120, 3), np.uint8)
    mask[20:60, 30:80] = 255
    write_image(folder / "mask_a.png", mask)
    write_image(folder / "mask_b.png", mask)
    transform = {"rotation": 180, "brightness": -0.25, "points": [[10, 10, 100, 70], [40, 30, 70, 50]]}
    common = {"status": "ok", "error": "", "mask_a": "", "mask_b": "", "transform": "", "operations": ""}
    return [
        {
            **common,
            "path_a": str(folder / "a.png"),
            "path_b": str(folder / HOSTILE),
            "score": 0.9317,
            "label": 1,
            "operations": "rotate180;brightness",
            "transform": json.dumps(transform),
            "mask_a": str(folder / "mask_a.png"),
            "mask_b": str(folder / "mask_b.png"),
            "reason": "a region of A is in B",
        },
        {**common, "path_a": str(folder / "a.png"), "path_b": str(folder / "c.png"), "score": 0.1234, "label": 0},
        {
            **common,
            "path_a": str(folder / "a.png"),
            "path_b": str(folder / "gone.png"),
            "score": None,
            "status": "error",
            "error": "file not found",
        },
    ]


def drawn_colours(page: Path) -> int:
    """Pixels of the page's pair pictures in the colours of outlines and match lines."""
    text = page.read_text(encoding="utf-8")
    count = 0
    for src in re.findall(r'<img [^>]*class="pair"[^>]*src="([^"]*)"', text):
        pixels = picture_pixels(src, page).astype(int)
        for colour in OUTLINE_AND_LINES:
            count += int((np.abs(pixels - colour).max(axis=2) < 60).sum())
    return count


def test_a_blinded_pair_page_shows_the_pairs_and_nothing_the_detector_made_of_them(tmp_path):
    pairs = pair_rows(tmp_path)
    seen = write_html_report(tmp_path / "open_report.html", [], header(), pairs=pairs)
    blind = write_html_report(tmp_path / "blind_report.html", [], header(), pairs=pairs, blinded=True)
    what_the_detector_said = ["0.9317", "0.1234", "flagged", "rotate180", "brightness", "B is A", "a region of A"]
    open_text = seen.read_text(encoding="utf-8").split("<body", 1)[1]  # the head's styles name decisions
    assert all(said in open_text for said in what_the_detector_said)  # the open page says it all...
    assert drawn_colours(seen) > 100
    blind_text = blind.read_text(encoding="utf-8").split("<body", 1)[1]
    said_by_counts = ["shared content", "nothing shared"]
    leaked = [said for said in what_the_detector_said + said_by_counts if said.lower() in blind_text.lower()]
    assert leaked == []  # ...the blinded one none of it
    assert "threshold" not in blind_text
    assert drawn_colours(blind) == 0  # no outline, no matched points
    assert blind_text.count('class="pair-row"') == 2 and blind_text.count('<img loading="lazy" class="pair"') == 2
    assert "&lt;img src=x onerror=alert(1)&gt;.png" in blind_text and "file not found" in blind_text
    assert "2 pairs, 1 errors" in blind_text


def test_a_pair_of_a_grouped_input_names_its_group_as_text_open_or_blinded(tmp_path):
    pairs = [{**pair, "group": "claim <b>7</b> & co"} for pair in pair_rows(tmp_path)]
    for blinded in (False, True):
        page = write_html_report(tmp_path / f"{blinded}_report.html", [], header(), pairs=pairs, blinded=blinded)
        names = re.findall(r'<p class="name">(.*?)</p>', page.read_text(encoding="utf-8"))
        assert len(names) == 2 and all(
            name.startswith("in claim &lt;b&gt;7&lt;/b&gt; &amp; co<br>A: ") for name in names
        )
