"""The HTML report as a reviewer sees it, in a real browser (headless Chromium)."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest

from datamodules.io import write_image
from evaluation.calibration import calibration_check
from inference.html_evidence import mask_at_threshold, transform_in_words
from inference.html_parts import mapping_table, metrics_html, pager_html
from inference.html_report import ReportHeader, decision_of, ordered, threshold_note, write_html_report
from tests.browser_helpers import decode_all_images

HOSTILE = "<img src=x onerror=alert(1)>.png"


def make_rows(folder: Path, n: int = 7, localizer: bool = False) -> list[dict]:
    """n images of odd, non-square sizes with distinct scores, one hostile name, one unreadable file."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        name = HOSTILE if i == 2 else f"image_{i}.png"
        path = folder / "images" / name
        write_image(path, rng.integers(0, 256, (37 + 5 * i, 61, 3), dtype=np.uint8))
        row = {
            "path": str(path),
            "score": round(0.1 + 0.12 * i, 3),
            "label": i % 2,
            "status": "ok",
            "error": "",
            "group": f"review-{i % 3}",
        }
        if localizer:
            probability = np.zeros((37 + 5 * i, 61), np.uint8)
            probability[:, : 6 * i] = 255
            mask_path = folder / "maps" / f"{i}.png"
            write_image(mask_path, np.repeat(probability[..., None], 3, axis=2))
            row["mask"] = str(mask_path)
        rows.append(row)
    broken = folder / "images" / "broken.png"
    broken.write_bytes(b"not an image")
    rows.append({"path": str(broken), "score": None, "label": None, "status": "error", "error": "cannot decode"})
    return rows


def header(threshold: float = 0.5) -> ReportHeader:
    return ReportHeader(
        title="seg_tiny on images/",
        model="model.ckpt",
        detector="seg_tiny",
        threshold=threshold,
        threshold_note="0.5, calibrated",
        model_sha256="ab" * 32,
        version="0.1.0",
    )


def open_page(browser, page_path: Path, javascript: bool = True):
    context = browser.new_context(java_script_enabled=javascript)
    page = context.new_page()
    seen = {"requests": [], "errors": [], "dialogs": []}
    page.on("request", lambda request: seen["requests"].append(request.url))
    page.on("console", lambda message: message.type == "error" and seen["errors"].append(message.text))
    page.on("pageerror", lambda error: seen["errors"].append(str(error)))
    page.on("dialog", lambda dialog: (seen["dialogs"].append(dialog.message), dialog.dismiss()))
    page.goto(page_path.as_uri())
    page.wait_for_load_state("load")
    return context, page, seen


def picture_pixels(src: str, page: Path) -> np.ndarray:
    """The RGB pixels of a picture the page shows: an embedded data: URI or a file beside the page."""
    import cv2

    if src.startswith("data:"):
        data = base64.b64decode(src.split(",", 1)[1])
    else:
        data = (page.parent / unquote(html.unescape(src))).read_bytes()
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[..., ::-1]


def test_rows_are_sorted_most_suspicious_first_with_errors_last():
    rows = [
        {"path": "a", "score": 0.2, "status": "ok"},
        {"path": "b", "score": None, "status": "error"},
        {"path": "c", "score": 0.9, "status": "ok"},
        {"path": "d", "score": 0.5, "status": "ok"},
    ]
    assert [r["path"] for r in ordered(rows, blinded=False)] == ["c", "d", "a", "b"]
    assert ordered(rows, blinded=True)[-1]["path"] == "b"


def test_a_score_at_the_threshold_is_flagged_and_a_map_value_at_it_counts():
    assert decision_of({"score": 0.5, "status": "ok"}, 0.5) == "flagged"
    assert decision_of({"score": 0.4999, "status": "ok"}, 0.5) == "not flagged"
    assert decision_of({"score": None, "status": "error"}, 0.5) == "error"
    map_u8 = np.array([[127, 128, 255]], np.uint8)
    assert mask_at_threshold(map_u8, 128 / 255).tolist() == [[False, True, True]]


def test_the_threshold_line_says_the_interval_once_and_that_the_sample_is_too_small():
    calibration = calibration_check(np.linspace(0, 0.9, 100), threshold=0.85, target_fpr=0.01)
    note = threshold_note(0.85, {**calibration, "input": "val"}, chosen_by_user=False)
    assert note.count("Clopper-Pearson") == 1 and note.count("[0.") == 1
    assert "100 genuine images are too few for a target of 0.01 (at least 299 are needed)" in note
    assert "rule bound" not in note
    bounded = threshold_note(0.85, {**calibration, "rule": "bound"}, chosen_by_user=False)
    assert "(rule bound, whose 95% promise needs more of them than this" in bounded  # 100 < 299: not made
    assert "at or under the target with 95% confidence" not in bounded


def test_a_pair_detectors_threshold_line_speaks_of_pairs_not_genuine_images():
    from evaluation.calibration import NON_DUPLICATE_PAIRS

    check = calibration_check(np.linspace(0, 0.9, 69), threshold=0.95, target_fpr=0.01, negatives=NON_DUPLICATE_PAIRS)
    note = threshold_note(0.95, check, chosen_by_user=False)
    assert "calibrated to flag at most 0.01 of 69 pairs without duplication (validation pairs)" in note
    assert "69 pairs without duplication are too few" in note and "genuine" not in note


def test_the_transform_reads_as_a_sentence():
    words = transform_in_words({"rotation": 180, "scale": 0.5, "flip": "horizontal", "gain": [1.12, 1.12, 1.12]})
    assert words == "B is A rotated 180 degrees, scaled x0.50, mirrored left-right, brightness +12 %"
    assert transform_in_words({"rotation": 0, "scale": 1.0}) == "B is A reused as it is"


def test_a_change_of_colours_the_transform_has_no_words_for_is_said_from_the_operations():
    grey = {"rotation": 0, "scale": 1.0, "brightness": 0.0}  # a copy turned grey keeps its level
    assert transform_in_words(grey, "parameter") == "B is A with colours or levels changed"
    brighter = {**grey, "brightness": 0.2}
    assert transform_in_words(brighter, "flip;parameter") == "B is A brightness +20 %"


@pytest.mark.parametrize("embed_limit", [None, 0], ids=["embedded", "folder"])
def test_the_reviewer_sees_rows_in_order_every_image_decodes_and_nothing_leaves_the_folder(
    tmp_path, browser, embed_limit
):
    rows = make_rows(tmp_path, localizer=True)
    report = write_html_report(
        tmp_path / "out" / "scores_report.html",
        rows,
        header(),
        is_localizer=True,
        metrics={"auroc": 0.75, "by_group": {"review-0": {"auroc": 0.5, "n_pos": 1}}},
        embed_limit=embed_limit,
    )
    embedded = embed_limit is None  # a small report is one file by default; a limit of 0 keeps the folder
    assert (tmp_path / "out" / "scores_report_files").exists() is not embedded
    assert sorted(p.name for p in (tmp_path / "out").iterdir())[0] == "scores_report.html"
    context, page, seen = open_page(browser, report)
    names = page.locator("#rows-body td.name").all_inner_texts()
    scores = [float(s) for s in page.locator("#rows-body td.score").all_inner_texts() if s]
    assert scores == sorted(scores, reverse=True) and len(scores) == 7
    assert names[-1].endswith("broken.png")
    assert HOSTILE in [Path(n).name for n in names]  # the hostile name is shown as text...
    assert seen["dialogs"] == [] and page.locator("img[src='x']").count() == 0  # ...and never runs
    images = page.locator("img")
    assert images.count() >= 7 * 3  # thumbnail, overlay and mask per readable image
    sources = page.evaluate("Array.from(document.images).map(i => i.src)")
    assert all(src.startswith("data:image/") for src in sources) is embedded
    decode_all_images(page)
    widths = page.evaluate("Array.from(document.images).map(i => i.naturalWidth)")
    assert all(w > 0 for w in widths), widths
    folder = (tmp_path / "out").as_uri()
    assert seen["requests"] and all(url.startswith(folder) or url.startswith("data:") for url in seen["requests"])
    if embedded:  # nothing but the page itself is read from disk
        assert [url for url in seen["requests"] if not url.startswith("data:")] == [report.as_uri()]
    assert seen["errors"] == []
    assert "flags for a person to check" in page.inner_text("header")
    context.close()


def test_a_report_too_large_to_embed_keeps_its_pictures_in_the_folder(tmp_path):
    rows = make_rows(tmp_path, localizer=True)
    target = tmp_path / "scores_report.html"
    write_html_report(target, rows, header(), is_localizer=True)
    embedded = target.read_text(encoding="utf-8")
    pictures = embedded.count('src="data:image/')
    assert pictures >= 7 * 3 and not (tmp_path / "scores_report_files").exists()
    # the same rows over a limit just below what they take: every picture a file beside the page
    limit = sum(len(m) * 3 // 4 for m in re.findall(r'src="data:image/[a-z]+;base64,([^"]*)"', embedded))
    write_html_report(target, rows, header(), is_localizer=True, embed_limit=limit // 2)
    linked = target.read_text(encoding="utf-8")
    assert "data:image/" not in linked
    assert len(re.findall(r'<img [^>]*src="scores_report_files/', linked)) == pictures
    assert (tmp_path / "scores_report_files" / "rows.js").is_file()
    # more rows than one page: the folder, whatever the pictures weigh
    write_html_report(target, rows, header(), is_localizer=True, page_size=3)
    assert "data:image/" not in target.read_text(encoding="utf-8")
    assert len(list((tmp_path / "scores_report_files" / "pages").glob("*.html"))) == 2


def test_a_name_that_closes_a_script_element_stays_data_in_an_embedded_page(tmp_path, browser):
    path = tmp_path / "images" / "</script><script>alert(1)</script>.png"
    write_image(path, np.zeros((30, 40, 3), np.uint8))
    report = write_html_report(
        tmp_path / "scores_report.html", [{"path": str(path), "score": 0.9, "status": "ok", "error": ""}], header()
    )
    assert "<script>alert" not in report.read_text(encoding="utf-8")
    context, page, seen = open_page(browser, report)
    assert page.locator("#rows-body td.name").all_inner_texts() == [str(path)]
    assert seen["dialogs"] == [] and seen["errors"] == []
    context.close()


def test_filters_and_search_change_the_visible_rows(tmp_path, browser):
    report = write_html_report(tmp_path / "scores_report.html", make_rows(tmp_path), header())
    context, page, seen = open_page(browser, report)

    def visible() -> int:
        return page.locator("#rows-body tr").count()

    assert visible() == 8
    page.select_option("#f-decision", "flagged")
    flagged = page.locator("#rows-body td.decision").all_inner_texts()
    assert flagged and set(flagged) == {"flagged"} and visible() == 3
    page.select_option("#f-decision", "")
    page.fill("#f-search", "image_5")
    assert page.locator("#rows-body td.name").all_inner_texts() == [str(tmp_path / "images" / "image_5.png")]
    page.fill("#f-search", "")
    page.fill("#f-min", "0.3")
    page.fill("#f-max", "0.6")
    assert sorted(float(s) for s in page.locator("#rows-body td.score").all_inner_texts()) == [0.34, 0.46, 0.58]
    page.fill("#f-min", "")
    page.fill("#f-max", "")
    page.select_option("#f-group", "review-1")
    assert set(page.locator("#rows-body td.group").all_inner_texts()) == {"review-1"}
    assert seen["errors"] == []
    context.close()


def test_rows_without_groups_have_no_group_column_or_filter_and_the_scripted_rows_fit_the_header(tmp_path, browser):
    rows = [{k: v for k, v in row.items() if k != "group"} for row in make_rows(tmp_path)]
    report = write_html_report(tmp_path / "scores_report.html", rows, header())
    context, page, seen = open_page(browser, report)
    head = page.locator("#rows-table thead th").all_inner_texts()
    assert "group" not in head and page.locator("#f-group").count() == 0
    assert {page.locator("#rows-body tr").nth(i).locator("td").count() for i in range(8)} == {len(head)}
    page.fill("#f-search", "image_5")  # the filters still work without a group filter
    assert page.locator("#rows-body td.name").all_inner_texts() == [str(tmp_path / "images" / "image_5.png")]
    assert seen["errors"] == []
    context.close()
    named = write_html_report(tmp_path / "named_report.html", make_rows(tmp_path), header(), group_column="review")
    text = named.read_text(encoding="utf-8")
    assert "<th>review</th>" in text and "<label>review <select" in text and "<th>group</th>" not in text


def test_with_scripts_off_every_row_is_reachable_through_the_static_pages(tmp_path, browser):
    rows = make_rows(tmp_path, n=7)
    report = write_html_report(tmp_path / "scores_report.html", rows, header(), page_size=3)
    context, page, _ = open_page(browser, report, javascript=False)
    seen_names = page.locator("#rows-body td.name").all_inner_texts()
    links = page.locator("nav.pager a").evaluate_all("links => links.map(a => a.href)")
    for link in dict.fromkeys(links):
        page.goto(link)
        seen_names += page.locator("#rows-body td.name").all_inner_texts()
    assert sorted(seen_names) == sorted(r["path"] for r in rows)
    assert not page.locator("#filters").is_visible()
    context.close()


def test_a_static_page_links_its_neighbours_and_both_ends_and_every_page_is_reachable():
    links = [f'<a href="p{n}.html">{n}</a>' for n in range(1, 501)]

    def linked(current: int) -> set[int]:
        return {int(n) for n in re.findall(r'href="p(\d+)\.html"', pager_html(current, links))}

    assert linked(250) == {1, *range(245, 256), 500} - {250} and "<strong>250</strong>" in pager_html(250, links)
    assert linked(1) == set(range(2, 7)) | {500}
    reached, frontier = {1}, [1]
    while frontier:
        new = linked(frontier.pop()) - reached
        reached |= new
        frontier += new
    assert reached == set(range(1, 501))


def test_paging_keeps_a_large_report_usable_and_the_page_small(tmp_path, browser):
    image = tmp_path / "one.png"
    write_image(image, np.zeros((20, 30, 3), np.uint8))
    rows = [{"path": str(image), "score": i / 1000, "status": "ok", "error": ""} for i in range(1000)]
    report = write_html_report(tmp_path / "big_report.html", rows, header())
    assert report.stat().st_size < 200_000
    context, page, seen = open_page(browser, report)
    assert page.locator("#rows-body tr").count() == 100
    page.click("nav.pager >> text=next")
    assert page.locator("#rows-body td.score").first.inner_text() == f"{899 / 1000:.4f}"
    assert seen["errors"] == []
    context.close()


def test_blinded_mode_hides_scores_decisions_and_maps(tmp_path, browser):
    rows = make_rows(tmp_path, localizer=True)
    report = write_html_report(
        tmp_path / "blind_report.html", rows, header(), is_localizer=True, blinded=True, metrics={"auroc": 0.75}
    )
    context, page, seen = open_page(browser, report)
    text = page.inner_text("body")
    assert "score" not in page.inner_text("thead") and "decision" not in page.inner_text("thead")
    assert "0.7" not in text and "flagged" not in text.replace("not flagged", "")
    assert page.locator("td.rating select").count() == 8
    alts = page.evaluate("Array.from(document.images).map(i => i.alt)")
    assert alts.count("thumbnail") == 7 and set(alts) == {"thumbnail"}  # no overlay, no mask
    source = report.read_text(encoding="utf-8")
    assert "0.7" not in source.replace("0.75", "")  # nor in the rows' data
    assert re.findall(r'<tr data-decision="([^"]*)"', source) == [""] * 7 + ["error"]
    context.close()


def test_names_that_a_url_or_a_text_would_misread_still_show_their_pictures_rows_and_groups(tmp_path, browser):
    """A page named with "#" and "?" (fragment and query in a URL) loads every picture of its folder,
    with scripts and without; a group of repeated and edge spaces still filters; a name holding a
    direction control shows its code point, not the reversed name it would read as."""
    folder = tmp_path / "case #7?"
    rows = make_rows(folder)
    spoofed = folder / "images" / "0_\u202egnp.exe"
    spoofed.write_bytes(Path(rows[0]["path"]).read_bytes())
    rows[0] = {**rows[0], "path": str(spoofed)}
    for row in rows[:3]:
        row["group"] = " Fig 1  a\t"
    report = write_html_report(folder / "case #7?_report.html", rows, header(), embed_limit=0)
    for javascript in (True, False):
        context, page, seen = open_page(browser, report, javascript=javascript)
        decode_all_images(page)
        widths = page.evaluate("Array.from(document.images).map(i => i.naturalWidth)")
        assert len(widths) == 7 and min(widths) > 0
        assert f"{folder}/images/0_<U+202E>gnp.exe" in page.locator("#rows-body td.name").all_inner_texts()
        if javascript:
            page.select_option("#f-group", " Fig 1  a\t")
            assert page.locator("#rows-body tr").count() == 3
        assert seen["errors"] == [] and seen["dialogs"] == []
        context.close()


def test_a_metrics_table_reads_a_flat_mapping_cell_as_words_and_leaves_deeper_ones_out():
    flagged = {"flower": {"flagged": 5, "genuine": 34, "categories": {"phone_photo": 3, "photo": 2}}}
    page = mapping_table("Flagged genuine images by source", flagged)
    assert "<th>categories</th>" in page and "<td>phone_photo 3, photo 2</td>" in page
    nested = mapping_table("Robustness", {"jpeg": {"n": 2, "curves": {"a": {"levels": [1]}}}})
    assert "curves" not in nested and "<td>2</td>" in nested


def test_metrics_tables_are_headed_in_words_as_in_report_md_not_by_their_keys():
    metrics = {
        "auroc": 0.9,
        "by_category": {"chart": {"n": 4, "genuine_tnr": 1.0}},
        "flagged_genuine_by_source": {"flower": {"flagged": 1, "genuine": 3, "categories": {"photo": 1}}},
    }
    page = metrics_html(metrics, [])
    assert "<h3>By category</h3>" in page and "<h3>Flagged genuine images by source</h3>" in page
    assert "by_category" not in page and "flagged_genuine_by_source" not in page


def test_a_set_of_figures_of_its_own_is_shown_not_left_out():
    """A pair run's THEMIS set-F1 / EM / SPC sit under `operations`: a mapping of figures."""
    from inference.html_parts import metrics_html

    page = metrics_html({"pair_f1": 0.5, "operations": {"set_f1": 0.5, "exact_match": 0.25, "spc": 0.4}}, [])
    assert "<h3>Operations</h3>" in page and "<th>set_f1</th><td>0.5000</td>" in page
    assert "<th>exact_match</th><td>0.2500</td>" in page and "<th>spc</th><td>0.4000</td>" in page


def test_a_pair_not_flagged_is_not_said_to_be_a_reused_copy(tmp_path):
    from inference.html_pairs import pairs_html

    write_image(tmp_path / "a.png", np.full((40, 40, 3), 90, np.uint8))
    write_image(tmp_path / "b.png", np.full((40, 40, 3), 120, np.uint8))
    nearest = {"rotation": 0, "scale": 1.0, "matrix": [[1, 0, 0], [0, 1, 0]], "points": []}
    row = {"path_a": str(tmp_path / "a.png"), "path_b": str(tmp_path / "b.png"), "status": "ok"}
    row.update({"score": 0.2, "operations": "", "transform": json.dumps(nearest)})
    below = pairs_html([row], tmp_path, tmp_path / "page.html", threshold=0.5, blinded=False)
    assert "not flagged" in below and 'class="transform"' not in below
    above = pairs_html([row], tmp_path, tmp_path / "page.html", threshold=0.1, blinded=False)
    assert "B is A reused as it is" in above
