"""One HTML page for the people who judge the findings: every scored image with its evidence and
its decision, most suspicious first.

On disk, beside the results file `<stem>.csv`:

    <stem>_report.html        the page: header, caveat, metrics, groups, pairs, the first rows
    <stem>_report_files/      thumbnails, overlays and masks (JPEG/PNG), the remaining rows as static
                              pages (read with scripts off), and rows.js for the filters and search

The page needs no server and no network: styles and scripts are inline or in the sibling folder,
and every image it shows is a file in that folder. The only links that leave it point at the scored
images themselves. Every name that came from the user (file names, groups, errors) is escaped, or
set as text by the script, never parsed as HTML. Maps are drawn on one fixed 0-1 colour scale (the
legend), never rescaled per image, so two overlays can be compared by eye.
"""
from __future__ import annotations

import hashlib
import html
import json
import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote

import numpy as np

from inference.html_evidence import RowEvidence, colour_lut, draw_pair, draw_row, image_link, transform_in_words

ASSETS = Path(__file__).with_name("report_assets")
PAGE_SIZE = 200        # rows per static page (scripts off); the script pages its own way
CAVEAT = ("These are flags for a person to check, not verdicts. A score says how much an image "
          "resembles what the detector was trained to flag; read the evidence before acting.")


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


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def threshold_note(threshold: float, calibration: Mapping[str, Any] | None, chosen_by_user: bool) -> str:
    """How the threshold was set, in one sentence a reviewer can weigh."""
    if chosen_by_user:
        return f"set by the user to {threshold:.4g} for this run"
    if not calibration:
        return f"{threshold:.4g}, stored in the model (no calibration record in the model file)"
    target = calibration.get("target_fpr")
    n = calibration.get("n_genuine")
    source = calibration.get("input") or "genuine validation images"
    text = f"{threshold:.4g}, calibrated to flag at most {target:g} of {n} genuine images ({source})"
    interval = calibration.get("fpr_interval")
    if interval and all(v is not None for v in interval):
        confidence = calibration.get("interval_confidence", calibration.get("confidence", 0.95))
        text += (f"; false-positive rate there {calibration.get('false_positives', '?')}/{n}, "
                 f"{confidence:.0%} Clopper-Pearson interval [{interval[0]:.3f}, {interval[1]:.3f}]")
    if calibration.get("warning"):
        text += f". {calibration['warning']}"
    return text


def read_calibration(model: str | os.PathLike) -> dict[str, Any] | None:
    """The calibration record a model file carries (`train.py` or `calibrate.py` wrote it), if any."""
    model = Path(model)
    try:
        if model.suffix == ".onnx":
            import onnx

            meta = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
            return json.loads(meta["calibration"]) if "calibration" in meta else None
        import torch

        record = torch.load(model, map_location="cpu", weights_only=True).get("calibration")
        return dict(record) if isinstance(record, Mapping) else None
    except Exception:  # noqa: BLE001 - a report without the note is still a report; the header says so
        return None


def decision_of(row: Mapping[str, Any], threshold: float) -> str:
    if row.get("status", "ok") != "ok" or row.get("score") is None:
        return "error"
    return "flagged" if float(row["score"]) >= threshold else "not flagged"


def ordered(rows: Iterable[Mapping[str, Any]], blinded: bool, seed: int = 0) -> list[Mapping[str, Any]]:
    """Most suspicious first; errors last. Blinded: a seeded shuffle (the order would tell the score)."""
    rows = list(rows)
    scored = [r for r in rows if r.get("status", "ok") == "ok" and r.get("score") is not None]
    failed = [r for r in rows if r not in scored]
    if blinded:
        order = np.random.default_rng(seed).permutation(len(scored))
        return [scored[i] for i in order] + failed
    return sorted(scored, key=lambda r: -float(r["score"])) + failed


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _score_text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{float(value):.4f}"


def _row_html(row: Mapping[str, Any], evidence: RowEvidence, decision: str, page: Path, blinded: bool,
              is_localizer: bool) -> str:
    link = image_link(row["path"], page.parent)
    thumb = (f'<a href="{_e(link)}"><img loading="lazy" class="thumb" alt="thumbnail" '
             f'src="{_e(quote(evidence.thumb))}"></a>' if evidence.thumb else "")
    cells = [f'<td>{thumb}</td>', f'<td class="name">{_e(row["path"])}</td>']
    if not blinded:
        cells += [f'<td class="score">{_score_text(row.get("score"))}</td>',
                  f'<td class="decision">{_e(decision)}</td>']
    cells.append(f'<td class="group">{_e(row.get("group", ""))}</td>')
    if is_localizer and not blinded:
        overlay = (f'<img loading="lazy" class="thumb" alt="map overlay" src="{_e(quote(evidence.overlay))}">'
                   if evidence.overlay else "")
        mask = (f'<img loading="lazy" class="thumb" alt="mask at threshold" src="{_e(quote(evidence.mask))}">'
                if evidence.mask else "")
        share = "" if evidence.pixel_share is None else f"{100 * evidence.pixel_share:.1f} %"
        cells += [f"<td>{overlay}</td>", f"<td>{mask}</td>", f'<td class="share">{share}</td>']
    if blinded:
        cells.append('<td class="rating"><select aria-label="rating"><option></option><option>genuine</option>'
                     '<option>manipulated</option><option>unsure</option></select></td>')
    note = row.get("error") or evidence.problem or ""
    cells.append(f'<td class="note">{_e(note)}</td>')
    return f'<tr data-decision="{_e(decision)}">' + "".join(cells) + "</tr>"


def _table_head(blinded: bool, is_localizer: bool) -> str:
    names = ["image", "file"] + ([] if blinded else ["score", "decision"]) + ["group"]
    if is_localizer and not blinded:
        names += ["map (0-1 scale)", "mask at threshold", "pixels above"]
    names += (["your rating"] if blinded else []) + ["note"]
    return "<thead><tr>" + "".join(f"<th>{_e(n)}</th>" for n in names) + "</tr></thead>"


def _pager(current: int, pages: int, page_href) -> str:
    if pages <= 1:
        return ""
    links = [f'<a href="{_e(page_href(p))}">{p}</a>' if p != current else f"<strong>{p}</strong>"
             for p in range(1, pages + 1)]
    return f'<nav class="pager" aria-label="pages">Page: {" ".join(links)}</nav>'


def _mapping_table(title: str, table: Mapping[str, Mapping[str, Any]]) -> str:
    columns: list[str] = []
    for values in table.values():
        columns += [k for k, v in values.items() if k not in columns and not isinstance(v, (Mapping, list))]
    head = "".join(f"<th>{_e(c)}</th>" for c in [""] + columns)
    body = "".join("<tr><th>" + _e(key) + "</th>" + "".join(f"<td>{_e(_fmt(values.get(c)))}</td>" for c in columns)
                   + "</tr>" for key, values in table.items())
    return f"<h3>{_e(title)}</h3><table class=\"metrics\"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "–" if not math.isfinite(value) else f"{value:.4f}"
    return "–" if value is None else str(value)


def _metrics_html(metrics: Mapping[str, Any], plots: Sequence[str]) -> str:
    scalars = {k: v for k, v in metrics.items() if not isinstance(v, (Mapping, list))}
    parts = ["<section id=\"metrics\"><h2>Against the known truth</h2>", "<table class=\"metrics\"><tbody>"]
    parts += [f"<tr><th>{_e(k)}</th><td>{_e(_fmt(v))}</td></tr>" for k, v in scalars.items()]
    parts.append("</tbody></table>")
    for key, value in metrics.items():
        if isinstance(value, Mapping) and value and all(isinstance(v, Mapping) for v in value.values()):
            parts.append(_mapping_table(f"By {key}", value))
    parts += [f'<figure><img class="plot" alt="{_e(Path(p).stem)}" src="{_e(quote(p))}">'
              f"<figcaption>{_e(Path(p).stem)}</figcaption></figure>" for p in plots]
    return "".join(parts) + "</section>"


def _groups_html(groups: Sequence[Mapping[str, Any]], threshold: float, blinded: bool) -> str:
    if blinded or not groups:
        return ""
    rows = "".join(f"<tr><td>{_e(g.get('group'))}</td><td>{_score_text(g.get('score'))}</td>"
                   f"<td>{_e(decision_of(g, threshold))}</td><td>{_e(g.get('images', ''))}</td></tr>"
                   for g in sorted(groups, key=lambda g: -(g.get("score") or 0)))
    return ("<section id=\"groups\"><h2>Groups</h2><table><thead><tr><th>group</th><th>score</th><th>decision</th>"
            f"<th>images</th></tr></thead><tbody>{rows}</tbody></table></section>")


def _pairs_html(pairs: Sequence[Mapping[str, Any]], files: Path, page: Path, blinded: bool) -> str:
    if not pairs:
        return ""
    items = []
    for index, pair in enumerate(sorted(pairs, key=lambda p: -(p.get("score") or 0))):
        picture = draw_pair(index, pair, files)
        source = quote(os.path.relpath(picture, page.parent)) if picture else ""
        image = f'<img loading="lazy" class="pair" alt="pair" src="{_e(source)}">' if picture else ""
        verdict = "" if blinded else (f"<p>score {_score_text(pair.get('score'))}, {_e(pair.get('decision', ''))}: "
                                      f"{_e(pair.get('operations', ''))}</p>")
        items.append(f"<div class=\"pair-row\"><p class=\"name\">A: {_e(pair['path_a'])}<br>B: {_e(pair['path_b'])}</p>"
                     f"{image}{verdict}<p>{_e(transform_in_words(pair.get('transform')))}</p></div>")
    return "<section id=\"pairs\"><h2>Shared content between images</h2>" + "".join(items) + "</section>"


def _legend(lut: np.ndarray, threshold: float) -> str:
    stops = ", ".join(f"rgb({r},{g},{b}) {100 * i / 10:.0f}%" for i, (r, g, b) in enumerate(lut[::255 // 10][:11]))
    return (f'<div class="legend"><span>map 0</span><span class="bar" style="background: linear-gradient(to right, '
            f'{stops})"><span class="mark" style="left: {100 * threshold:.1f}%" title="threshold"></span></span>'
            f"<span>1</span> <small>one fixed scale for every image; the mark is the threshold "
            f"{threshold:.3f}</small></div>")


def _page(header: ReportHeader, body: str, blinded: bool, script: bool, data_src: str | None) -> str:
    css = (ASSETS / "report.css").read_text(encoding="utf-8")
    scripts = ""
    if script:
        scripts = (f'<script src="{_e(quote(data_src))}"></script>' if data_src else "") + \
            "<script>" + (ASSETS / "report.js").read_text(encoding="utf-8") + "</script>"
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src 'self' file: data:; "
            "style-src 'unsafe-inline'; script-src 'self' file: 'unsafe-inline'\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(header.title)}</title><style>{css}</style></head>"
            f"<body class=\"{'blinded' if blinded else ''}\">{body}{scripts}</body></html>")


def _header_html(header: ReportHeader, counts: Mapping[str, int], blinded: bool) -> str:
    facts = [("model", header.model), ("model SHA-256", header.model_sha256), ("detector", header.detector),
             ("input", header.input), ("created", header.created), ("toolkit version", header.version)]
    if not blinded:
        facts.insert(3, ("threshold", header.threshold_note))
    facts.append(("rows", ", ".join(f"{v} {k}" for k, v in counts.items())))
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts if v not in (None, ""))
    mode = "<p class=\"blind\">Blinded: scores, decisions and maps are hidden; rows are in random order.</p>" \
        if blinded else ""
    return (f"<header><h1>{_e(header.title)}</h1><p class=\"caveat\">{_e(CAVEAT)}</p>{mode}"
            f"<table class=\"facts\"><tbody>{rows}</tbody></table></header>")


def _filters_html(groups: Sequence[str], blinded: bool) -> str:
    options = "".join(f"<option>{_e(g)}</option>" for g in groups)
    decision = "" if blinded else ('<label>decision <select id="f-decision"><option value="">any</option>'
                                   "<option>flagged</option><option>not flagged</option><option>error</option>"
                                   "</select></label>")
    scores = "" if blinded else (
        '<label>score from <input id="f-min" type="number" step="0.01" min="0" max="1"></label>'
        '<label>to <input id="f-max" type="number" step="0.01" min="0" max="1"></label>')
    return ('<form id="filters" class="filters" hidden onsubmit="return false">'
            f'<label>search <input id="f-search" type="search" placeholder="file name"></label>{decision}'
            f'<label>group <select id="f-group"><option value="">any</option>{options}</select></label>{scores}'
            '<span id="f-count"></span></form>')


def write_html_report(target: str | os.PathLike, rows: Sequence[Mapping[str, Any]], header: ReportHeader, *,
                      is_localizer: bool = False, metrics: Mapping[str, Any] | None = None,
                      plots: Sequence[str | os.PathLike] = (), groups: Sequence[Mapping[str, Any]] = (),
                      pairs: Sequence[Mapping[str, Any]] = (), blinded: bool = False,
                      page_size: int = PAGE_SIZE, workers: int = 2) -> Path:
    """Write the report page `target` (.html) and its sibling `<stem>_files/` folder; returns `target`.

    `rows`: the results rows (`path`, `score`, `status`, `error`, optionally `group`, `mask` (the saved
    8-bit map), `label`). `groups`: review verdicts (`group`, `score`, `images`). `pairs`: duplication
    rows (`path_a`, `path_b`, `score`, `decision`, `operations`, `transform`, `mask_a`, `mask_b`,
    `points`). `blinded` hides scores, decisions and maps for rating studies.
    Kept in one piece: the page's parts are assembled in the order a reviewer reads them.
    """
    target = Path(target)
    files = target.with_name(f"{target.stem}_files")
    if files.exists():
        shutil.rmtree(files)
    for sub in ("thumbs", "overlays", "masks", "pages", "plots", "pairs"):
        (files / sub).mkdir(parents=True, exist_ok=True)
    lut = colour_lut()
    threshold = float(header.threshold)
    rows = ordered(rows, blinded)
    decisions = [decision_of(r, threshold) for r in rows]
    pages = max(1, math.ceil(len(rows) / page_size))
    page_paths = [target] + [files / "pages" / f"page-{p:05d}.html" for p in range(2, pages + 1)]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        evidence = list(pool.map(lambda item: draw_row(item[0], item[1], files, threshold, lut, target.parent),
                                 enumerate(rows)))
    counts = {"flagged": decisions.count("flagged"), "not flagged": decisions.count("not flagged"),
              "errors": decisions.count("error")}
    if blinded:
        counts = {"images": len(rows) - counts["errors"], "errors": counts["errors"]}
    group_names = sorted({str(r["group"]) for r in rows if r.get("group") not in (None, "")})
    plot_links = []
    for plot in plots if not blinded else ():
        copy = files / "plots" / Path(plot).name
        shutil.copyfile(plot, copy)
        plot_links.append(os.path.relpath(copy, target.parent))

    def page_href(number: int, current: Path) -> str:
        return quote(os.path.relpath(page_paths[number - 1], current.parent).replace(os.sep, "/"))

    head = _table_head(blinded, is_localizer)
    for number, page in enumerate(page_paths, start=1):
        chunk = range((number - 1) * page_size, min(number * page_size, len(rows)))
        # evidence paths were made relative to the main page; pages live one folder down
        body_rows = "".join(_row_html(rows[i], _relocate(evidence[i], target.parent, page.parent), decisions[i],
                                      page, blinded, is_localizer) for i in chunk)
        pager = _pager(number, pages, lambda p, page=page: page_href(p, page))
        table = (f'<section id="rows"><h2>Images</h2>{pager}<table id="rows-table">{head}'
                 f'<tbody id="rows-body">{body_rows}</tbody></table>{pager}</section>')
        if number == 1:
            legend = _legend(lut, threshold) if is_localizer and not blinded else ""
            body = (_header_html(header, counts, blinded) + legend
                    + (_metrics_html(metrics, plot_links) if metrics and not blinded else "")
                    + _groups_html(groups, threshold, blinded) + _pairs_html(pairs, files, target, blinded)
                    + _filters_html(group_names, blinded) + table)
            data = _write_rows_js(files / "rows.js", rows, evidence, decisions, target.parent, blinded, is_localizer)
            text = _page(header, body, blinded, script=True, data_src=os.path.relpath(data, target.parent))
        else:
            back = f'<p><a href="{_e(quote(os.path.relpath(target, page.parent)))}">back to the summary</a></p>'
            text = _page(header, f"<h1>{_e(header.title)}</h1>{back}{table}", blinded, script=False, data_src=None)
        _write_text(page, text)
    return target


def write_run_report(target: str | os.PathLike, rows: Sequence[Mapping[str, Any]], *, model: str | os.PathLike | None,
                     detector: str, threshold: float, calibration: Mapping[str, Any] | None = None,
                     threshold_from_user: bool = False, input: str = "", **options: Any) -> Path:
    """`write_html_report` with the header of a scoring or test run: the model file and its SHA-256,
    how the threshold was set, the toolkit's version. `options` go to `write_html_report`."""
    from detectors import __version__

    model_file = Path(model) if model else None
    header = ReportHeader(
        title=f"{detector} on {input}" if input else str(detector), model=str(model or ""), detector=str(detector),
        threshold=float(threshold), input=str(input), version=__version__,
        threshold_note=threshold_note(float(threshold), calibration, threshold_from_user),
        model_sha256=file_sha256(model_file) if model_file is not None and model_file.is_file() else "")
    return write_html_report(target, rows, header, **options)


def _relocate(evidence: RowEvidence, base: Path, page_dir: Path) -> RowEvidence:
    if base == page_dir:
        return evidence

    def move(path: str | None) -> str | None:
        return None if path is None else os.path.relpath(base / path, page_dir)

    return RowEvidence(move(evidence.thumb), move(evidence.overlay), move(evidence.mask),
                       evidence.pixel_share, evidence.problem)


def _write_rows_js(path: Path, rows: Sequence[Mapping[str, Any]], evidence: Sequence[RowEvidence],
                   decisions: Sequence[str], base: Path, blinded: bool, is_localizer: bool) -> Path:
    """All rows for the page's script, as data (set as text by the script, never as HTML)."""
    records = []
    for row, drawn, decision in zip(rows, evidence, decisions):
        item = {"name": str(row["path"]), "link": image_link(row["path"], base), "thumb": drawn.thumb,
                "group": "" if row.get("group") is None else str(row["group"]),
                "note": row.get("error") or drawn.problem or ""}
        if not blinded:
            item.update({"score": None if row.get("score") is None else float(row["score"]), "decision": decision})
            if is_localizer:
                item.update({"overlay": drawn.overlay, "mask": drawn.mask, "share": drawn.pixel_share})
        records.append(item)
    payload = {"blinded": blinded, "localizer": is_localizer, "rows": records}
    _write_text(path, "window.REPORT_DATA = " + json.dumps(payload, ensure_ascii=True, allow_nan=False) + ";\n")
    return path


def _write_text(path: Path, text: str) -> None:
    """Atomic: a reader never sees half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
