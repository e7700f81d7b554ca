"""The pieces of the reviewers' page as HTML text: header, caveat, rows, pager, metrics, groups,
pairs, legend and filters. Every value that came from the user goes through `escape`; nothing here
reads or draws images (that is `inference.html_evidence`)."""

from __future__ import annotations

import functools
import html
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import quote

import numpy as np

from evaluation.summary import breakdown_title
from inference.html_evidence import RowEvidence

ASSETS = Path(__file__).with_name("report_assets")
CAVEAT = (
    "These are flags for a person to check, not verdicts. A score says how much an image "
    "resembles what the detector was trained to flag; read the evidence before acting."
)


@dataclass
class ReportHeader:
    """What the reader needs to judge the run: which model, which threshold and how it was set."""

    title: str
    model: str
    detector: str
    threshold: float
    threshold_note: str
    input: str = ""
    model_sha256: str = ""
    version: str = ""
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def decision_of(row: Mapping[str, Any], threshold: float) -> str:
    """The row's decision at its own `threshold` where it has one (its category's), else at `threshold`."""
    if row.get("status", "ok") != "ok" or row.get("score") is None:
        return "error"
    return "flagged" if float(row["score"]) >= float(row.get("threshold", threshold)) else "not flagged"


def escape(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


# Characters that reorder the text around them: a name holding them is shown as another name
# ("x_<U+202E>gnp.exe" reads "x_exe.png"), so a page shows them as their code points instead.
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown_name(path: Any) -> str:
    """A file name as a page shows it: escaped, with its direction controls made visible."""
    return escape(BIDI_CONTROLS.sub(lambda found: f"<U+{ord(found.group()):04X}>", "" if path is None else str(path)))


@functools.lru_cache(maxsize=1024)
def escape_repeated(value: str) -> str:
    """`escape` of the values rows share (decisions, groups, picture names): once each."""
    return escape(value)


def score_text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{float(value):.4f}"


def score_against(value: Any, threshold: float, page_threshold: float) -> str:
    """A row's score as a reader can check its decision by: to 4 decimals, or as many more (up to
    9) as tell it from its threshold (0.594006 and 0.594007 both read 0.5940); with its threshold
    where the page's alone would not explain the decision (a category's own, or one that needed
    more decimals)."""
    if not score_text(value):
        return ""
    score, digits = float(value), 4
    while digits < 9 and f"{score:.{digits}f}" == f"{threshold:.{digits}f}":
        digits += 1
    text = f"{score:.{digits}f}"
    if digits > 4 or threshold != page_threshold:
        text += f" (threshold {threshold:.{digits}f})"
    return text


def picture_html(src: str | None, box: tuple[int, int, int] | None, alt: str, up: str = "") -> str:
    """An <img> of a picture file, or of its box in a strip file (shown at its own size, the strip
    shifted under it); `up`: the way back to the main page's folder from a page below it."""
    if not src:
        return ""
    where = ""
    if box is not None:
        x, width, height = box
        where = f' style="width:{int(width)}px;height:{int(height)}px;object-fit:none;object-position:-{int(x)}px 0"'
    return f'<img loading="lazy" class="thumb" alt="{escape_repeated(alt)}" src="{quoted(src, up)}"{where}>'


@functools.lru_cache(maxsize=4096)
def quoted(src: str, up: str = "") -> str:
    """A picture's path, seen from a page `up` below the main page, as an attribute value (cached:
    the rows of a strip share its file)."""
    return escape_repeated(quote(src if up in ("", ".") else f"{up}/{src}"))


RATING_CELL = (
    '<td class="rating"><select aria-label="rating"><option></option><option>genuine</option>'
    "<option>manipulated</option><option>unsure</option></select></td>"
)


def row_html(
    row: Mapping[str, Any],
    evidence: RowEvidence,
    decided: tuple[str, str],
    link: str,
    blinded: bool,
    is_localizer: bool,
    up: str = "",
    grouped: bool = True,
) -> str:
    """One image's table row; `link` leads to the scored image (relative to the page). `up`: the
    way back to the main page's folder, for a page below it (the pictures' paths are relative to
    the main page). `grouped`: the page has a group column (some row has a group). One string per
    row, put together once: the static pages hold every row."""
    if evidence.thumb_is_source:  # `link` is already a URL
        thumb = f'<img loading="lazy" class="thumb" alt="thumbnail" src="{escape(link)}">'
    else:
        thumb = picture_html(evidence.thumb, evidence.thumb_box, "thumbnail", up)
    if thumb:
        thumb = f'<a href="{escape(link)}">{thumb}</a>'
    decision, score = decided  # the decision, and the score as shown beside it (`score_against`)
    decision_text = escape_repeated(decision)
    # blinded: the decision is nowhere on the page (an error is no decision, and is listed as one)
    marked = decision_text if not blinded or decision == "error" else ""
    group = "" if row.get("group") is None else str(row["group"])
    group_cell = f'<td class="group">{escape_repeated(group)}</td>' if grouped else ""
    verdict = "" if blinded else f'<td class="score">{escape(score)}</td><td class="decision">{decision_text}</td>'
    maps = ""
    if is_localizer and not blinded:
        overlay = picture_html(evidence.overlay, evidence.overlay_box, "map overlay", up)
        mask = picture_html(evidence.mask, evidence.mask_box, "mask at threshold", up)
        share = "" if evidence.pixel_share is None else f"{100 * evidence.pixel_share:.1f} %"
        maps = f'<td>{overlay}</td><td>{mask}</td><td class="share">{share}</td>'
    note = row.get("error") or evidence.problem or row.get("note") or ""
    return (
        f'<tr data-decision="{marked}"><td>{thumb}</td><td class="name">{shown_name(row["path"])}</td>{verdict}'
        f"{group_cell}{maps}"
        f'{RATING_CELL if blinded else ""}<td class="note">{escape(note) if note else ""}</td></tr>'
    )


def table_head(blinded: bool, is_localizer: bool, group_column: str | None = "group") -> str:
    """The rows' header; `group_column`: the name of the group column, None for a page without one."""
    names = ["image", "file"] + ([] if blinded else ["score", "decision"]) + ([group_column] if group_column else [])
    if is_localizer and not blinded:
        names += ["map (0-1 scale)", "mask at threshold", "pixels above"]
    names += (["your rating"] if blinded else []) + ["note"]
    return "<thead><tr>" + "".join(f"<th>{escape(n)}</th>" for n in names) + "</tr></thead>"


PAGER_REACH = 5  # a static page links the pages this many before and after it, and the first and last


def pager_html(current: int, links: Sequence[str]) -> str:
    """Links to the static pages near the current one (in bold) and to the first and last (`links`:
    each page's `<a>`, made once for the pages that share a folder). Not every page on every page:
    100,000 rows are 500 pages, and 500 links on each would make the pages quadratic in size."""
    if len(links) <= 1:
        return ""
    near = range(max(1, current - PAGER_REACH), min(len(links), current + PAGER_REACH) + 1)
    numbers = sorted({1, len(links), *near})
    shown: list[str] = []
    for before, number in zip([0, *numbers], numbers):
        if number - before > 1 and before:
            shown.append("…")
        shown.append(f"<strong>{number}</strong>" if number == current else links[number - 1])
    return f'<nav class="pager" aria-label="pages">Page: {" ".join(shown)}</nav>'


def mapping_table(title: str, table: Mapping[str, Mapping[str, Any]]) -> str:
    """A table of one row per key; a cell holding a flat mapping (the categories of the flagged
    genuine images of a source) reads as "name value, ...", deeper ones are left out."""
    columns: list[str] = []
    for values in table.values():
        columns += [
            k for k, v in values.items() if k not in columns and (_flat(v) or not isinstance(v, (Mapping, list)))
        ]
    head = "".join(f"<th>{escape(c)}</th>" for c in [""] + columns)
    body = "".join(
        "<tr><th>"
        + escape(key)
        + "</th>"
        + "".join(f"<td>{escape(cell_text(values.get(c)))}</td>" for c in columns)
        + "</tr>"
        for key, values in table.items()
    )
    return f'<h3>{escape(title)}</h3><table class="metrics"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _flat(value: Any) -> bool:
    return isinstance(value, Mapping) and not any(isinstance(v, (Mapping, list)) for v in value.values())


def cell_text(value: Any) -> str:
    if _flat(value):
        return ", ".join(f"{k} {format_value(v)}" for k, v in value.items())
    return format_value(value)


def interval_text(interval: Sequence[float] | None) -> str:
    if not interval or any(v is None or not math.isfinite(float(v)) for v in interval):
        return ""
    return f" [{float(interval[0]):.4f}, {float(interval[1]):.4f}]"


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return "–" if not math.isfinite(value) else f"{value:.4f}"
    return "–" if value is None else str(value)


def metrics_html(metrics: Mapping[str, Any], plots: Sequence[str]) -> str:
    """The figures against the known truth, each with its bootstrap interval where one was drawn."""
    intervals = metrics.get("intervals") or {}
    confidence = metrics.get("interval_confidence")
    scalars = {k: v for k, v in metrics.items() if not isinstance(v, (Mapping, list)) and k != "interval_confidence"}
    heading = f" ({confidence:.0%} bootstrap intervals)" if intervals and confidence is not None else ""
    parts = [
        f'<section id="metrics"><h2>Against the known truth{escape(heading)}</h2>',
        '<table class="metrics"><tbody>',
    ]
    parts += [
        f"<tr><th>{escape(k)}</th><td>{escape(format_value(v))}{escape(interval_text(intervals.get(k)))}</td></tr>"
        for k, v in scalars.items()
    ]
    parts.append("</tbody></table>")
    for key, value in metrics.items():
        if isinstance(value, Mapping) and value and all(isinstance(v, Mapping) for v in value.values()):
            parts.append(mapping_table(breakdown_title(key).capitalize(), value))
        elif isinstance(value, Mapping) and value and not any(isinstance(v, (Mapping, list)) for v in value.values()):
            # a set of figures of its own (a pair run's THEMIS set-F1 / EM / SPC): one row each
            rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(format_value(v))}</td></tr>" for k, v in value.items())
            title = escape(breakdown_title(key).capitalize())
            parts.append(f'<h3>{title}</h3><table class="metrics"><tbody>{rows}</tbody></table>')
    parts += [
        f'<figure><img class="plot" alt="{escape(Path(p).stem)}" src="{escape(quote(p))}">'
        f"<figcaption>{escape(Path(p).stem)}</figcaption></figure>"
        for p in plots
    ]
    return "".join(parts) + "</section>"


def groups_html(groups: Sequence[Mapping[str, Any]], threshold: float, blinded: bool) -> str:
    if blinded or not groups:
        return ""
    rows = "".join(
        f"<tr><td>{escape(g.get('group'))}</td><td>{score_text(g.get('score'))}</td>"
        f"<td>{escape(decision_of(g, threshold))}</td><td>{escape(g.get('images', ''))}</td></tr>"
        for g in sorted(groups, key=lambda g: -(g.get("score") or 0))
    )
    return (
        '<section id="groups"><h2>Groups</h2><table><thead><tr><th>group</th><th>score</th><th>decision</th>'
        f"<th>images</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def legend_html(lut: np.ndarray, threshold: float) -> str:
    stops = ", ".join(f"rgb({r},{g},{b}) {100 * i / 10:.0f}%" for i, (r, g, b) in enumerate(lut[:: 255 // 10][:11]))
    return (
        f'<div class="legend"><span>map 0</span><span class="bar" style="background: linear-gradient(to right, '
        f'{stops})"><span class="mark" style="left: {100 * threshold:.1f}%" title="threshold"></span></span>'
        f"<span>1</span> <small>one fixed scale for every image; the mark is the threshold "
        f"{threshold:.3f}</small></div>"
    )


def page_html(
    header: ReportHeader, body: str, blinded: bool, script: bool, data_src: str | None, data_inline: str | None = None
) -> str:
    """The whole page; with `script`, the rows' data from the file `data_src` or inline (`data_inline`,
    script text that cannot close its element: `html_embed.data_script`)."""
    css = asset("report.css")
    scripts = ""
    if script:
        data = f'<script src="{escape(quote(data_src))}"></script>' if data_src else ""
        scripts = (
            (f"<script>{data_inline}</script>" if data_inline else data) + "<script>" + asset("report.js") + "</script>"
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src 'self' file: data:; "
        "style-src 'unsafe-inline'; script-src 'self' file: 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(header.title)}</title><style>{css}</style></head>"
        f'<body class="{"blinded" if blinded else ""}">{body}{scripts}</body></html>'
    )


@functools.lru_cache(maxsize=None)
def asset(name: str) -> str:
    """A file of `report_assets` (the style and the script every page carries), read once."""
    return (ASSETS / name).read_text(encoding="utf-8")


def header_html(header: ReportHeader, counts: Mapping[str, int], blinded: bool) -> str:
    facts = [
        ("model", header.model),
        ("model SHA-256", header.model_sha256),
        ("detector", header.detector),
        ("input", header.input),
        ("created", header.created),
        ("toolkit version", header.version),
    ]
    if not blinded:
        facts.insert(3, ("threshold", header.threshold_note))
    facts.append(("rows", ", ".join(f"{v} {k}" for k, v in counts.items())))
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in facts if v not in (None, ""))
    mode = (
        '<p class="blind">Blinded: scores, decisions and maps are hidden; rows are in random order.</p>'
        if blinded
        else ""
    )
    return (
        f'<header><h1>{escape(header.title)}</h1><p class="caveat">{escape(CAVEAT)}</p>{mode}'
        f'<table class="facts"><tbody>{rows}</tbody></table></header>'
    )


def filters_html(groups: Sequence[str], blinded: bool, group_column: str = "group") -> str:
    """The filters above the rows; a group filter (named as the group column) only where rows have groups."""
    # the value said outright: an option's text loses repeated and edge spaces, the rows' groups keep them
    options = "".join(f'<option value="{escape(g)}">{escape(g)}</option>' for g in groups)
    group = (
        f'<label>{escape(group_column)} <select id="f-group"><option value="">any</option>{options}</select></label>'
        if groups
        else ""
    )
    decision = (
        ""
        if blinded
        else (
            '<label>decision <select id="f-decision"><option value="">any</option>'
            "<option>flagged</option><option>not flagged</option><option>error</option>"
            "</select></label>"
        )
    )
    scores = (
        ""
        if blinded
        else (
            '<label>score from <input id="f-min" type="number" step="0.01" min="0" max="1"></label>'
            '<label>to <input id="f-max" type="number" step="0.01" min="0" max="1"></label>'
        )
    )
    return (
        '<form id="filters" class="filters" hidden onsubmit="return false">'
        f'<label>search <input id="f-search" type="search" placeholder="path contains"></label>{decision}'
        f"{group}{scores}"
        '<span id="f-count"></span></form>'
    )
