"""The report page's pictures are drawn while the run scores, in strips, and the page reuses them."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest

from datamodules.io import read_image, write_image
from inference import html_evidence, report_pictures
from inference.html_evidence import THUMBNAIL_SIDE, colour_lut, map_overlay, thumbnail
from inference.report_pictures import EvidenceDrawer
from tests.browser_helpers import decode_all_images
from tests.unit.inference.test_html_report import HOSTILE, open_page

STRIP = 8  # pictures per strip here: two strips are then a few rows (a page's pictures load as they scroll into view)


@pytest.fixture(autouse=True)
def strips_of_a_few_pictures(monkeypatch):
    monkeypatch.setattr(report_pictures, "STRIP", STRIP)


def test_a_thumbnail_of_a_photograph_of_any_size_is_close_to_its_area_average():
    """Fast is not allowed to mean aliased: against OpenCV's exact area averaging to the same size."""
    import cv2
    from skimage import data

    photograph = data.astronaut()
    for longest in (384, 640, 800, 1024, 2000, 4000):
        image = cv2.resize(photograph, (longest, longest * 3 // 4), interpolation=cv2.INTER_CUBIC)
        small = thumbnail(image)
        reference = cv2.resize(image, small.shape[1::-1], interpolation=cv2.INTER_AREA)
        error = np.mean((small.astype(float) - reference) ** 2)
        assert 10 * np.log10(255**2 / error) > 28, longest  # PSNR in dB; taking every n-th pixel gives 24-26


def test_a_scored_file_is_its_own_thumbnail_only_when_small_and_in_a_format_browsers_show(tmp_path, monkeypatch):
    monkeypatch.setattr(html_evidence, "SOURCE_AS_THUMBNAIL_BYTES", 5_000)
    side = html_evidence.SOURCE_AS_THUMBNAIL_SIDE
    small, large = tmp_path / "small.png", tmp_path / "large.png"
    small.write_bytes(b"x" * 5_000)
    large.write_bytes(b"x" * 5_001)
    assert html_evidence.shown_as_itself(str(small), (side, side // 2, 3))
    assert not html_evidence.shown_as_itself(str(small), (side + 1, side // 2, 3))  # too many pixels
    assert not html_evidence.shown_as_itself(str(large), (10, 10, 3))  # too many bytes
    tiff = tmp_path / "small.tif"
    tiff.write_bytes(b"x")
    assert not html_evidence.shown_as_itself(str(tiff), (10, 10, 3))  # browsers do not show TIFF
    assert not html_evidence.shown_as_itself(str(tmp_path / "gone.png"), (10, 10, 3))


def test_only_a_page_of_files_shows_scored_files_themselves_and_never_under_a_map(tmp_path):
    image = np.zeros((40, 56, 3), np.uint8)
    path = tmp_path / "a.png"
    write_image(path, image)
    linking = EvidenceDrawer(tmp_path / "files", threshold=0.5, link_sources=True)
    assert linking.thumbnailer(localizer=False)(str(path), image) is None
    assert linking.thumbnailer(localizer=True)(str(path), image).shape == image.shape  # the overlay needs it
    blinded = EvidenceDrawer(tmp_path / "blind", threshold=0.5, maps=False, link_sources=True)
    assert blinded.thumbnailer(localizer=True)(str(path), image) is None  # no map is drawn
    embedding = EvidenceDrawer(tmp_path / "one", threshold=0.5)
    assert embedding.thumbnailer(localizer=False)(str(path), image).shape == image.shape
    linking.draw(0, str(path), None)
    evidence = linking.finish()[str(path)]
    assert evidence.thumb_is_source and evidence.thumb is None
    assert list((tmp_path / "files" / "thumbs").iterdir()) == []


def smooth_picture(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A colour gradient (JPEG keeps it close; noise it would not)."""
    ys, xs = np.mgrid[0:height, 0:width]
    start = rng.integers(0, 100, 3)
    return np.stack([start[c] + xs + (c + 1) * ys // 2 for c in range(3)], axis=2).clip(0, 255).astype(np.uint8)


def test_a_thumbnail_keeps_the_shape_and_its_longest_side_is_at_most_the_thumbnail_side():
    rng = np.random.default_rng(0)
    for height, width in [(900, 500), (192, 256), (768, 1024), (3000, 4000), (170, 100), (1080, 1920)]:
        small = thumbnail(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        assert abs(small.shape[1] / small.shape[0] - width / height) < 0.02 * width / height + 1 / small.shape[0]
    for longest in range(THUMBNAIL_SIDE + 1, 2600, 23):
        small = thumbnail(np.zeros((longest * 3 // 4, longest, 3), np.uint8))
        assert 3 * THUMBNAIL_SIDE / 4 <= small.shape[1] <= THUMBNAIL_SIDE, (longest, small.shape)
    flat = np.full((700, 300, 3), 77, np.uint8)
    assert np.all(thumbnail(flat) == 77)  # averaging, not ringing
    halves = np.zeros((600, 800, 3), np.uint8)
    halves[:, 400:] = 200
    assert np.abs(thumbnail(halves).mean() - 100) < 2  # both halves kept, in proportion
    tiny = np.zeros((20, 30, 3), np.uint8)
    assert thumbnail(tiny).shape == tiny.shape and thumbnail(tiny) is not tiny  # never enlarged, never shared


def columns_above(index: int) -> int:
    """Columns of a 400-wide map above the threshold for row `index` of `STRIP + 3`."""
    return 400 * index // (STRIP + 3)


def test_the_drawer_packs_pictures_into_strips_and_each_row_knows_its_box(tmp_path):
    files = tmp_path / "scores_report_files"
    (files / "thumbs").mkdir(parents=True)
    (files / "thumbs" / "stale.jpg").write_bytes(b"from an earlier run")
    drawer = EvidenceDrawer(files, threshold=0.5)
    rng = np.random.default_rng(0)
    smalls, maps = {}, {}
    for index in range(STRIP + 3):
        small = smooth_picture(90 + index, 120, rng)
        map_u8 = np.zeros((300, 400), np.uint8)
        map_u8[:, : columns_above(index)] = 255  # the share above the threshold grows with the index
        smalls[f"img{index}.png"], maps[f"img{index}.png"] = small, map_u8
        drawer.draw(index, f"img{index}.png", small, map_u8)
    drawn = drawer.finish()
    assert not (files / "thumbs" / "stale.jpg").exists()
    assert sorted(p.name for p in (files / "thumbs").iterdir()) == ["strip-000000.jpg", "strip-000001.jpg"]
    assert sorted(p.name for p in (files / "masks").iterdir()) == ["strip-000000.png", "strip-000001.png"]
    lut = colour_lut()
    for index in (0, STRIP - 1, STRIP + 2):
        evidence = drawn[f"img{index}.png"]
        assert evidence.pixel_share == columns_above(index) / 400
        x, width, height = evidence.thumb_box
        strip = read_image(tmp_path / evidence.thumb)
        assert np.abs(strip[:height, x : x + width].astype(int) - smalls[f"img{index}.png"]).mean() < 12  # JPEG
        x, width, height = evidence.overlay_box
        overlay = read_image(tmp_path / evidence.overlay)[:height, x : x + width]
        expected = map_overlay(smalls[f"img{index}.png"], maps[f"img{index}.png"], lut)
        assert np.abs(overlay.astype(int) - expected).mean() < 12
        x, width, height = evidence.mask_box
        mask = read_image(tmp_path / evidence.mask)[:height, x : x + width, 0] > 127
        assert abs(mask.mean() - evidence.pixel_share) < 0.02


def test_a_strip_is_black_below_its_shorter_pictures(tmp_path):
    drawer = EvidenceDrawer(tmp_path / "files", threshold=0.5)
    rng = np.random.default_rng(1)
    for index in range(STRIP):
        drawer.draw(index, f"img{index}.png", np.full((40 + 6 * index, 80, 3), rng.integers(200, 256), np.uint8))
    drawn = drawer.finish()
    strip = read_image(tmp_path / drawn["img0.png"].thumb)
    for index in range(STRIP - 2):  # at least 12 px shorter than the last, the tallest
        x, width, height = drawn[f"img{index}.png"].thumb_box
        assert strip[height + 8 :, x : x + width].mean() < 4  # past the JPEG block it shares with the picture


def test_a_blinded_drawer_draws_no_maps(tmp_path):
    drawer = EvidenceDrawer(tmp_path / "files", threshold=0.5, maps=False)
    drawer.draw(0, "a.png", np.zeros((10, 10, 3), np.uint8), np.full((10, 10), 255, np.uint8))
    evidence = drawer.finish()["a.png"]
    assert evidence.thumb and evidence.overlay is None and evidence.pixel_share is None
    assert list((tmp_path / "files" / "overlays").iterdir()) == []


def scored_folder(tmp_path: Path) -> tuple[Path, list[str]]:
    """A tiny model and a folder of `STRIP + 5` images (one with a hostile name) and a broken file."""
    from tests.helpers import write_tiny_model

    model = write_tiny_model(tmp_path / "model", onnx=False)["ckpt"]
    folder = tmp_path / "uploads"
    rng = np.random.default_rng(0)
    names = [f"{i:02d}.png" for i in range(STRIP + 4)] + [HOSTILE]
    for i, name in enumerate(names):
        write_image(folder / name, rng.integers(0, 256, (40 + i, 56, 3), dtype=np.uint8))
    (folder / "broken.png").write_bytes(b"no image")
    return model, names


def infer_with_page(tmp_path: Path, model: Path, *options: str) -> Path:
    from infer import infer
    from tests.helpers import compose_config

    output = tmp_path / "out" / "scores.csv"
    overrides = [f"model={model}", f"input={tmp_path / 'uploads'}", f"output={output}", "report=html", "progress=false"]
    infer(compose_config("infer", [*overrides, "batch_size=4", "num_workers=2", *options]))
    return output


def test_infer_draws_the_thumbnails_while_scoring_and_the_page_shows_them(tmp_path, browser, monkeypatch):
    import inference.html_report as page_module

    monkeypatch.setattr(html_evidence, "SOURCE_AS_THUMBNAIL_SIDE", 0)  # no scored file is its own thumbnail
    model, names = scored_folder(tmp_path)
    drawn_by_page: list[str] = []
    original = page_module.draw_row
    monkeypatch.setattr(
        page_module,
        "draw_row",
        lambda name, row, *a, **k: drawn_by_page.append(row["path"]) or original(name, row, *a, **k),
    )
    monkeypatch.setattr(page_module, "PAGE_SIZE", STRIP)  # more rows than a page: strips, in the folder
    output = infer_with_page(tmp_path, model)
    assert [Path(p).name for p in drawn_by_page] == ["broken.png"]  # only the row the run could not decode
    thumbs = sorted(p.name for p in (tmp_path / "out" / "scores_report_files" / "thumbs").iterdir())
    assert thumbs == ["strip-000000.jpg", "strip-000001.jpg"]  # STRIP + 5 thumbnails
    context, page, seen = open_page(browser, output.with_name("scores_report.html"))
    thumbnails = page.locator("#rows-body img.thumb")
    assert thumbnails.count() == len(names)
    decode_all_images(page)
    boxes = thumbnails.evaluate_all(
        "images => images.map(i => [i.naturalWidth, i.getBoundingClientRect().width, i.getBoundingClientRect().height])"
    )
    assert all(natural > 56 and shown == 56 and 40 <= high <= 40 + len(names) for natural, shown, high in boxes)
    folder_uri = output.parent.as_uri()
    assert all(url.startswith(folder_uri) for url in seen["requests"]) and seen["errors"] == []
    context.close()


@pytest.mark.parametrize("javascript", [True, False])
def test_a_run_of_several_pages_shows_small_scored_files_as_they_are(tmp_path, browser, monkeypatch, javascript):
    """Files as small as a thumbnail, in a format browsers show, are not drawn again: every page
    (scripts on, or each static page with scripts off) shows the scored file itself, the hostile
    name's too, decoded, and loads nothing from anywhere else."""
    import inference.html_report as page_module

    monkeypatch.setattr(page_module, "PAGE_SIZE", STRIP)  # more rows than a page: the pictures are files
    model, names = scored_folder(tmp_path)
    output = infer_with_page(tmp_path, model)
    assert list((tmp_path / "out" / "scores_report_files" / "thumbs").iterdir()) == []
    context, page, seen = open_page(browser, output.with_name("scores_report.html"), javascript=javascript)
    pages = [page.url] + ([] if javascript else page.locator("nav.pager a").evaluate_all("a => a.map(x => x.href)"))
    shown = []
    for address in dict.fromkeys(pages):
        page.goto(address)
        decode_all_images(page)
        shown += page.locator("#rows-body img.thumb").evaluate_all(
            "images => images.map(i => [i.src, i.naturalWidth, i.naturalHeight])"
        )
    uploads = (tmp_path / "uploads").as_uri() + "/"
    assert sorted(unquote(src.removeprefix(uploads)) for src, _, _ in shown) == sorted(names)
    assert sorted(height for _, width, height in shown if width == 56) == list(range(40, 40 + len(names)))
    assert seen["dialogs"] == [] and seen["errors"] == []
    assert all(url.startswith(tmp_path.as_uri()) for url in seen["requests"])
    context.close()


def test_a_small_run_is_one_page_with_its_pictures_embedded(tmp_path, browser):
    model, names = scored_folder(tmp_path)
    output = infer_with_page(tmp_path, model)
    page_file = output.with_name("scores_report.html")
    assert sorted(p.name for p in output.parent.iterdir()) == ["scores.csv", "scores.run.json", "scores_report.html"]
    context, page, seen = open_page(browser, page_file)
    thumbnails = page.locator("#rows-body img.thumb")
    assert thumbnails.count() == len(names)
    assert all(src.startswith("data:image/jpeg;base64,") for src in thumbnails.evaluate_all("i => i.map(x => x.src)"))
    decode_all_images(page)
    sizes = thumbnails.evaluate_all("images => images.map(i => [i.naturalWidth, i.naturalHeight])")
    assert sorted(height for _, height in sizes) == list(range(40, 40 + len(names)))  # one picture each, own size
    assert [url for url in seen["requests"] if not url.startswith("data:")] == [page_file.as_uri()]
    assert seen["errors"] == []
    context.close()


def test_only_a_run_in_one_process_draws_the_pictures_while_scoring(tmp_path, monkeypatch):
    """Shards (and several processes) score parts of the input into part files; a drawer of theirs
    would empty and fill the one page folder from each of them at once. They draw nothing while
    scoring: the merge's page draws every row."""
    import inference.html_report as page_module
    import inference.report_pictures as pictures_module

    model, names = scored_folder(tmp_path)
    drawers: list[object] = []
    original = pictures_module.EvidenceDrawer.__init__
    monkeypatch.setattr(
        pictures_module.EvidenceDrawer,
        "__init__",
        lambda self, *a, **k: drawers.append(self) or original(self, *a, **k),
    )
    drawn_by_page: list[str] = []
    draw_row = page_module.draw_row
    monkeypatch.setattr(
        page_module,
        "draw_row",
        lambda name, row, *a, **k: drawn_by_page.append(row["path"]) or draw_row(name, row, *a, **k),
    )
    for shard in ("0/2", "1/2"):
        infer_with_page(tmp_path, model, f"shard={shard}")
    assert drawers == [] and not (tmp_path / "out" / "scores_report_files").exists()
    output = infer_with_page(tmp_path, model, "merge=true")
    assert drawers == [] and len(drawn_by_page) == len(names) + 1  # every row, the broken one too
    assert output.with_name("scores_report.html").read_text(encoding="utf-8").count('class="thumb"') >= len(names)
    infer_with_page(tmp_path, model)  # the same run in one process: drawn while scoring
    assert len(drawers) == 1 and len(drawn_by_page) == len(names) + 2


def test_a_localizers_row_whose_map_the_page_cannot_draw_says_why(caplog):
    from inference.run_report import NO_MAP, noted_without_map

    rows = [
        {"path": "drawn.png", "status": "ok"},  # drawn while scoring
        {"path": "saved.png", "status": "ok", "mask": "maps/saved.png"},  # save_masks=true
        {"path": "earlier.png", "status": "ok"},  # scored by an earlier run or another process
        {"path": "broken.png", "status": "error", "error": "cannot decode"},
    ]
    with caplog.at_level(logging.WARNING, logger="infer"):
        noted = noted_without_map(rows, {"drawn.png": object()})
    assert [row.get("note") for row in noted] == [None, None, NO_MAP, None]
    assert "no map for 1 image(s)" in caplog.text and "save_masks=true" in caplog.text


def test_each_mask_is_drawn_at_the_threshold_that_decided_its_image(tmp_path):
    """A model with per-category thresholds decides each image at its category's: the mask and the
    share of pixels above it shown beside that decision use the same threshold."""
    ramp = np.tile(np.linspace(0, 255, 400).astype(np.uint8), (300, 1))  # map values rise left to right
    small = smooth_picture(90, 120, np.random.default_rng(0))
    own = {"strict.png": 0.9, "lenient.png": 0.2}
    drawer = EvidenceDrawer(tmp_path / "files", threshold=0.5, threshold_of=lambda path: own.get(path, 0.5))
    for index, name in enumerate(["strict.png", "lenient.png", "other.png"]):
        drawer.draw(index, name, small, ramp)
    shares = {name: evidence.pixel_share for name, evidence in drawer.finish().items()}
    assert shares == pytest.approx({"strict.png": 0.1, "lenient.png": 0.8, "other.png": 0.5}, abs=0.01)


def test_pictures_drawn_for_the_page_use_each_rows_own_threshold(tmp_path):
    from inference.html_report import evidence_of_rows

    write_image(tmp_path / "a.png", smooth_picture(90, 120, np.random.default_rng(0)))
    write_image(tmp_path / "a_map.png", np.tile(np.linspace(0, 255, 120).astype(np.uint8), (90, 1)))
    row = {"path": str(tmp_path / "a.png"), "status": "ok", "score": 0.7, "mask": str(tmp_path / "a_map.png")}
    files = tmp_path / "files"
    for sub in ("thumbs", "overlays", "masks"):
        (files / sub).mkdir(parents=True, exist_ok=True)
    drawn = evidence_of_rows([row, {**row, "threshold": 0.9}], {}, files, 0.5, colour_lut(), tmp_path, 1, False)
    assert [e.pixel_share for e in drawn] == pytest.approx([0.5, 0.1], abs=0.02)
