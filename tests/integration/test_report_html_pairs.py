"""report=html for a pair detector: a reviewer sees A and B side by side, the shared regions
outlined, the matched points joined and the transform in words."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from datamodules.io import read_image, write_image
from detectors.training_free import save_checkpoint
from infer import infer
from inference.writer import read_results
from synthesis.duplication import local_duplication
from tests.duplication_helpers import hand_set_pair_module
from tests.helpers import compose_config
from tests.unit.inference.test_html_report import HOSTILE, open_page, picture_pixels

PAIR_HEIGHT, GAP = 240, 8  # how `inference.html_evidence.draw_pair` lays out A and B


@pytest.fixture(scope="module")
def pair_run(tmp_path_factory) -> Path:
    """A pair manifest: a region of A reused in B rotated 180 degrees and darkened (B named with
    markup), A against an unrelated photo, and A against a missing file; scored with report=html."""
    from synthesis.embedded import bundled_photo_paths

    folder = tmp_path_factory.mktemp("pairs")
    photos = {p.name: read_image(p) for p in bundled_photo_paths() if p.name in ("coffee.png", "astronaut.png")}
    local = local_duplication(
        photos["astronaut.png"], np.random.default_rng(0), geometric=["rotate180"], parameters=["brightness"]
    )
    write_image(folder / "a.png", local.panel_a)
    write_image(folder / HOSTILE, local.panel_b)
    write_image(folder / "other.png", photos["coffee.png"][:240, :320])
    (folder / "pairs.csv").write_text(f"path_a,path_b\na.png,{HOSTILE}\na.png,other.png\na.png,missing.png\n")
    model = save_checkpoint(hand_set_pair_module(), folder / "best.ckpt", None)
    output = folder / "out" / "pairs.csv"
    overrides = [f"model={model}", f"input={folder / 'pairs.csv'}", f"output={output}", "progress=false"]
    infer(compose_config("infer", [*overrides, "report=html"]))
    return output


def test_the_pair_rows_carry_the_matched_points_and_the_brightness_change(pair_run):
    rows = read_results(pair_run)
    transform = json.loads(rows[0]["transform"])
    assert rows[0]["label"] == 1 and abs(abs(transform["rotation"]) - 180) < 2
    assert 8 <= len(transform["points"]) <= 40 and all(len(point) == 4 for point in transform["points"])
    matrix = np.asarray(transform["matrix"])
    xa, ya, xb, yb = transform["points"][0]
    assert np.allclose(matrix @ [xa, ya, 1], [xb, yb], atol=0.2)  # B's point is A's through the fitted map
    assert transform["brightness"] < -0.03  # the copy was darkened


def test_a_pair_row_shows_both_panels_and_the_transform_in_words(pair_run, browser):
    context, page, seen = open_page(browser, pair_run.with_name("pairs_report.html"))
    rows = page.locator("#pairs .pair-row")
    assert rows.count() == 2  # the two scored pairs; the third is listed as a failure
    first = rows.nth(0)
    assert HOSTILE in first.locator("p.name").inner_text() and seen["dialogs"] == []
    assert first.locator("span.decision").inner_text() == "flagged"
    sentence = first.locator("p.transform").inner_text()
    assert sentence.startswith("B is A rotated 180 degrees") and "brightness -" in sentence
    picture = first.locator("img.pair")
    picture.evaluate("image => image.decode()")
    width, height = picture.evaluate("image => [image.naturalWidth, image.naturalHeight]")
    panel_a, panel_b = read_image(pair_run.parent.parent / "a.png"), read_image(pair_run.parent.parent / HOSTILE)
    width_a, width_b = (round(p.shape[1] * PAIR_HEIGHT / p.shape[0]) for p in (panel_a, panel_b))
    assert (width, height) == (width_a + GAP + width_b, PAIR_HEIGHT)  # A and B side by side
    drawn = picture_pixels(picture.get_attribute("src"), pair_run.with_name("pairs_report.html")).astype(int)
    outline = (drawn[..., 0] < 80) & (drawn[..., 1] > 200) & (drawn[..., 2] > 200)  # cyan contours
    lines = (drawn[..., 0] < 80) & (drawn[..., 1] > 150) & (drawn[..., 2] < 80)  # green match lines
    assert outline.sum() > 100 and lines[:, width_a + 2 : width_a + GAP - 2].sum() > 5  # lines cross the gap
    assert "not found" in page.locator("#pairs table").inner_text()
    assert all(url.startswith(pair_run.parent.as_uri()) for url in seen["requests"]) and seen["errors"] == []
    context.close()
