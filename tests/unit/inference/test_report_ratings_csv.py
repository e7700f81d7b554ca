"""The blinded report's "download ratings (CSV)", as a rater gets it in a real browser (headless
Chromium): a name a spreadsheet would run as a formula is kept text by a leading `'`, exactly as the
toolkit's own CSV files write it, so the toolkit's readers give the names back as they were."""

from __future__ import annotations

import csv
import io
from urllib.parse import unquote

import numpy as np

from datamodules.io import write_image
from inference.csv_cells import escape_cell, unescape_cell
from inference.html_report import write_html_report
from tests.unit.inference.test_html_report import header, open_page

NAMES = ["=1+1.png", "-x.png", "+cmd.png", "@SUM(1).png", "'q.png", '=HYPERLINK("x","y").png', "a.png"]
UNREAD = ["-0.5", "+1", "\tx", "\rx", "''"]  # files no decoder reads: error rows, named all the same

SAVE_RATINGS = """() => {
  const link = Array.from(document.querySelectorAll("a")).find(a => a.textContent === "download ratings (CSV)");
  link.addEventListener("click", event => event.preventDefault());  // the file, not a download
  link.click();
  return link.href;
}"""


def test_downloaded_ratings_keep_names_a_spreadsheet_would_run_as_text(tmp_path, browser, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    rows = []
    for name in NAMES:
        write_image(tmp_path / name, rng.integers(0, 256, (30, 40, 3), dtype=np.uint8))
        rows.append({"path": name, "score": 0.5, "label": 1, "status": "ok", "error": ""})
    for name in UNREAD:
        (tmp_path / name).write_bytes(b"not an image")
        rows.append({"path": name, "score": None, "label": None, "status": "error", "error": "cannot decode"})
    report = write_html_report(tmp_path / "blind_report.html", rows, header(), blinded=True)
    context, page, seen = open_page(browser, report)
    page.locator("tr", has=page.locator("td.name", has_text="=1+1.png")).locator("select").select_option("unsure")
    href = page.evaluate(SAVE_RATINGS)
    assert href.startswith("data:text/csv;charset=utf-8,")
    table = list(csv.reader(io.StringIO(unquote(href.split(",", 1)[1]), newline="")))
    assert table[0] == ["path", "rating"]
    cells = {cell: rating for cell, rating in table[1:]}
    assert sorted(cells) == sorted(escape_cell(name) for name in NAMES + UNREAD)  # as the toolkit's CSVs
    assert sorted(unescape_cell(cell) for cell in cells) == sorted(NAMES + UNREAD)
    assert cells["'=1+1.png"] == "unsure" and cells["a.png"] == "" and cells["-0.5"] == ""
    assert seen["errors"] == [] and seen["dialogs"] == []
    context.close()
