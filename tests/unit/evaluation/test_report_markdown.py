"""Names from the data (categories, sources, titles, paths) in report.md and the calibration report
are Markdown-escaped: the raw file reads as the name was written (no HTML entities), and a Markdown
renderer shows the name as text, not as emphasis, a link, code or HTML."""

import html
import re
from pathlib import Path

import pytest

from evaluation.report import markdown_text
from evaluation.summary import report_records
from inference.calibration_report import calibration_report

NAMES = ["*bold* & x", "img_0001.png", "[link](http://x)", "<b>gen</b>", "gen A & B", "fig|panel", "_a_ `b`", "- 1. #x"]


def renderers():
    """Each installed Markdown renderer, tables enabled (report.md is mostly tables)."""
    found = []
    try:
        import markdown

        found.append(lambda text: markdown.markdown(text, extensions=["tables"]))
    except ImportError:
        pass
    try:
        from markdown_it import MarkdownIt

        found.append(MarkdownIt("commonmark").enable("table").render)
    except ImportError:
        pass
    if not found:
        pytest.skip("no Markdown renderer installed")
    return found


def read_back(raw: str) -> str:
    """The raw text with Markdown's backslash escapes taken away: what a person reads."""
    return re.sub(r"\\(.)", r"\1", raw)


def shown_as_text(text: str, name: str) -> None:
    for render in renderers():
        page = render(text)
        assert not re.search(r"<(em|strong|a|b|code|img)\b", page), page
        # the renderer's own escaping of the name as text; Python-Markdown keeps the backslash of "\<",
        # which is no escape there (it is in CommonMark: GitHub, editors), and still shows text
        assert html.escape(name, quote=False) in page.replace("\\&lt;", "&lt;")


@pytest.mark.parametrize("name", NAMES)
def test_a_name_is_plain_text_in_markdown(name):
    raw = markdown_text(name)
    assert "&amp;" not in raw and "&lt;" not in raw
    assert read_back(raw) == name
    shown_as_text(f"| category | n |\n| --- | --- |\n| {raw} | 3 |\n\nIn a sentence: {raw}.", name)
    for render in renderers():  # starting a line, it makes no list item or heading either
        assert re.fullmatch(r"<p>[^<]*</p>\s*", render(raw)), render(raw)


def test_report_md_shows_category_and_title_names_as_written(tmp_path):
    rows = [
        {"path": f"{i}.png", "label": i % 2, "score": (i % 7) / 7, "category": NAMES[i % len(NAMES)]} for i in range(64)
    ]
    report = report_records(tmp_path, rows, threshold=0.5, n_resamples=0, title="npr on <b>uploads</b> & *more*")
    text = report.files["report"].read_text()
    assert "&amp;" not in text and "&lt;" not in text
    cells = [line.split(" | ")[0][2:] for line in text.split("### by category", 1)[1].splitlines() if line[:2] == "| "]
    assert sorted(read_back(cell) for cell in cells[2:]) == sorted(NAMES)
    assert read_back(text.splitlines()[0]) == "# npr on <b>uploads</b> & *more*"
    for name in NAMES:
        shown_as_text(text.split("## Figures", 1)[0], name)  # the figures are the report's own images


def test_calibration_report_shows_category_names_as_written():
    own = {"threshold": 0.5, "n_genuine": 70, "tnr": 0.95, "tnr_interval": [0.9, 0.99]}
    summary = {**own, "previous_threshold": 0.5, "target_fpr": 0.05, "confidence": 0.95, "false_positives": 3}
    summary |= {"input": "in|put_*x*", "date": "today", "by_category": {name: own for name in NAMES}}
    text = calibration_report(summary, "[model](http://x).onnx", Path("out.onnx"))
    assert "&amp;" not in text and "&lt;" not in text
    assert "from in\\|put\\_\\*x\\*" in text
    for name in NAMES:
        assert f"| {markdown_text(name)} | 0.5 |" in text
        shown_as_text(text, name)


def test_figures_and_their_intervals_read_as_written_where_names_are_escaped(tmp_path):
    """Escaping is for names from the data: a table's figures ("0.5000", "[0.33, 0.65]") are the
    report's own text, and "0\\.5000" in the raw file would be noise."""
    rows = [{"label": i % 2, "score": (i % 7) / 7, "category": "1. first *kind*"} for i in range(40)]
    report = report_records(tmp_path, rows, threshold=0.5, n_resamples=50).files["report"].read_text()
    assert re.search(r"\| auroc \| \d\.\d{4} \| \[\d\.\d{4}, \d\.\d{4}\] \|", report)
    assert "| 1\\. first \\*kind\\* |" in report and "\\." not in report.replace("1\\. first", "")
