"""One HTML page for the people who judge the findings: every scored image with its evidence and
its decision, most suspicious first.

On disk, beside the results file `<stem>.csv`:

    <stem>_report.html        the page: header, caveat, metrics, groups, pairs, the first rows
    <stem>_report_files/      thumbnails, overlays and masks (JPEG/PNG), the remaining rows as static
                              pages (read with scripts off), and rows.js for the filters and search

A small report (every row on one page, its pictures within `EMBED_LIMIT_BYTES`) is the one HTML
file instead, pictures as data: URIs and rows inline (`inference.html_embed`); a larger one keeps
the sibling folder, so the browser loads only the pictures it shows.
The page needs no server and no network: styles and scripts are inline or in the sibling folder,
and every image it shows is embedded or a file in that folder. The only links that leave it point
at the scored images themselves. Every name that came from the user (file names, groups, errors) is escaped, or
set as text by the script, never parsed as HTML. Maps are drawn on one fixed 0-1 colour scale (the
legend), never rescaled per image, so two overlays can be compared by eye.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote

import numpy as np

from datamodules.io import file_sha256
from evaluation.calibration import NON_DUPLICATE_PAIRS, rule_phrase
from inference import html_embed
from inference.html_evidence import RowEvidence, colour_lut, draw_row, folder_link, image_link
from inference.html_pairs import pair_counts, pairs_html
from inference.html_parts import (
    ReportHeader,
    decision_of,
    escape,
    filters_html,
    groups_html,
    header_html,
    legend_html,
    metrics_html,
    page_html,
    pager_html,
    row_html,
    score_against,
    table_head,
)
from inference.report_pictures import check_page_folder

__all__ = ["PAGE_SIZE", "ReportHeader", "decision_of", "ordered", "write_html_report", "write_run_report"]

PAGE_SIZE = 200  # rows per static page (scripts off); the script pages its own way


def threshold_note(
    threshold: float,
    calibration: Mapping[str, Any] | None,
    chosen_by_user: bool,
    category_thresholds: Mapping[str, float] | None = None,
) -> str:
    """How the threshold was set, in one sentence a reviewer can weigh; `category_thresholds`: the
    categories whose images this run decided at a threshold of their own."""
    if chosen_by_user:
        return f"set by the user to {threshold:.4g} for this run"
    if category_thresholds:
        own = ", ".join(f"{name} {value:.4g}" for name, value in sorted(category_thresholds.items()))
        general = threshold_note(threshold, calibration, chosen_by_user)
        return f"per category, calibrated on each category's genuine images: {own}; other images {general}"
    if not calibration:
        return f"{threshold:.4g}, stored in the model (no calibration record in the model file)"
    target = calibration.get("target_fpr")
    n = calibration.get("n_genuine")
    source = calibration.get("input") or "genuine validation images"
    confidence = calibration.get("interval_confidence", calibration.get("confidence", 0.95))
    pairs = calibration.get("negatives") == NON_DUPLICATE_PAIRS  # a pair detector's negatives are pairs
    kind = "pairs without duplication" if pairs else "genuine images"
    text = f"{threshold:.4g}, calibrated to flag at most {target:g} of {n} {kind}"
    text += " (validation pairs)" if pairs else f" ({source})"
    text += rule_phrase(calibration.get("rule"), confidence, calibration.get("sufficient") is not False)
    interval = calibration.get("fpr_interval")
    if not interval and calibration.get("tnr_interval"):  # calibrate.py records the TNR's interval
        interval = [None if v is None else 1.0 - v for v in reversed(calibration["tnr_interval"])]
    if interval and all(v is not None for v in interval):
        text += (
            f"; false-positive rate there {calibration.get('false_positives', '?')}/{n}, "
            f"{confidence:.0%} Clopper-Pearson interval [{interval[0]:.3f}, {interval[1]:.3f}]"
        )
    needed = calibration.get("genuine_needed")
    if calibration.get("sufficient") is False and needed:  # the interval is given above: not twice
        text += (
            f". {n} {kind} are too few for a target of {target:g} (at least {needed} are needed): "
            f"expect more {kind} flagged than the target"
        )
    elif calibration.get("warning"):
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


def ordered(rows: Iterable[Mapping[str, Any]], blinded: bool, seed: int = 0) -> list[Mapping[str, Any]]:
    """Most suspicious first; errors last. Blinded: a seeded shuffle (the order would tell the score)."""
    rows = list(rows)
    is_scored = [r.get("status", "ok") == "ok" and r.get("score") is not None for r in rows]
    scored = [r for r, ok in zip(rows, is_scored) if ok]
    failed = [r for r, ok in zip(rows, is_scored) if not ok]
    if blinded:
        order = np.random.default_rng(seed).permutation(len(scored))
        return [scored[i] for i in order] + failed
    return sorted(scored, key=lambda r: -float(r["score"])) + failed


def write_html_report(
    target: str | os.PathLike,
    rows: Sequence[Mapping[str, Any]],
    header: ReportHeader,
    *,
    is_localizer: bool = False,
    metrics: Mapping[str, Any] | None = None,
    plots: Sequence[str | os.PathLike] = (),
    groups: Sequence[Mapping[str, Any]] = (),
    pairs: Sequence[Mapping[str, Any]] = (),
    blinded: bool = False,
    evidence: Mapping[str, RowEvidence] | None = None,
    page_size: int | None = None,
    workers: int = 2,
    embed_limit: int | None = None,
    group_column: str = "group",
) -> Path:
    """Write the report page `target` (.html) and its sibling `<stem>_files/` folder, or the page alone
    with its pictures embedded when every row fits on one page (`page_size`, default `PAGE_SIZE`)
    and its pictures take at most `embed_limit` bytes (default `html_embed.EMBED_LIMIT_BYTES`; 0:
    always the folder); returns `target`.

    `rows`: the results rows (`path`, `score`, `status`, `error`, optionally `group`, `mask` (the saved
    8-bit map), `label`). `evidence`: what the scoring run already drew into `<stem>_files/` (by
    path, relative to the page; `EvidenceDrawer.finish()`): reused, only the rows it lacks are drawn
    now. `groups`: review verdicts (`group`, `score`, `images`). `pairs`: duplication rows (`path_a`,
    `path_b`, `score`, `status`, `error`, `label`, `operations`, `transform`, `mask_a`, `mask_b`).
    `blinded` hides scores, decisions and maps for rating studies. `group_column` names what the
    rows' `group` holds (`review`, `folder`...); a page whose rows have none has no such column or filter.
    Kept in one piece: the page's parts are assembled in the order a reviewer reads them.
    """
    target = Path(target)
    page_size = page_size or PAGE_SIZE
    embed_limit = html_embed.EMBED_LIMIT_BYTES if embed_limit is None else embed_limit
    files = target.with_name(f"{target.stem}_files")
    clear_page_files(files, keep_evidence=evidence is not None)
    lut = colour_lut()
    threshold = float(header.threshold)
    rows = ordered(rows, blinded)
    decisions = [decision_of(r, threshold) for r in rows]
    shown_scores = [score_against(r.get("score"), float(r.get("threshold", threshold)), threshold) for r in rows]
    pages = max(1, math.ceil(len(rows) / page_size))
    page_paths = [target] + [files / "pages" / f"page-{p:05d}.html" for p in range(2, pages + 1)]
    drawn = evidence_of_rows(rows, evidence or {}, files, threshold, lut, target.parent, workers, blinded)
    counts = {
        "flagged": decisions.count("flagged"),
        "not flagged": decisions.count("not flagged"),
        "errors": decisions.count("error"),
    }
    if blinded:
        counts = {"images": len(rows) - counts["errors"], "errors": counts["errors"]}
    group_names = sorted({str(r["group"]) for r in rows if r.get("group") not in (None, "")})
    plot_links = []
    for plot in plots if not blinded else ():
        copy = files / "plots" / Path(plot).name
        shutil.copyfile(plot, copy)
        plot_links.append(os.path.relpath(copy, target.parent))

    @functools.lru_cache(maxsize=None)
    def href(number: int, folder: Path) -> str:
        return quote(os.path.relpath(page_paths[number - 1], folder).replace(os.sep, "/"))

    @functools.lru_cache(maxsize=None)
    def pager_links(folder: Path) -> list[str]:  # the pages below the first share a folder
        return [f'<a href="{escape(href(p, folder))}">{p}</a>' for p in range(1, pages + 1)]

    grouped = bool(group_names)  # a column empty in every row would say nothing
    head = table_head(blinded, is_localizer, group_column if grouped else None)
    show_rows = bool(rows) or not pairs  # a pair run's page is its pairs
    base = str(target.parent)
    links = [image_link(row["path"], base) for row in rows]
    for number, page in enumerate(page_paths, start=1):
        chunk = range((number - 1) * page_size, min(number * page_size, len(rows)))
        # links and evidence paths are relative to the main page; the other pages live below it
        up = folder_link(str(target.parent.absolute()), str(page.parent.absolute()))
        body_rows = "".join(
            row_html(
                rows[i],
                drawn[i],
                (decisions[i], shown_scores[i]),
                moved(links[i], up),
                blinded,
                is_localizer,
                up,
                grouped,
            )
            for i in chunk
        )
        pager = pager_html(number, pager_links(page.parent))
        table = (
            f'<section id="rows"><h2>Images</h2>{pager}<table id="rows-table">{head}'
            f'<tbody id="rows-body">{body_rows}</tbody></table>{pager}</section>'
            if show_rows
            else ""
        )
        if number == 1:
            legend = legend_html(lut, threshold) if is_localizer and not blinded else ""
            body = (
                header_html(header, counts if show_rows else pair_counts(pairs, threshold, blinded), blinded)
                + legend
                + (metrics_html(metrics, plot_links) if metrics and not blinded else "")
                + groups_html(groups, threshold, blinded)
                + pairs_html(pairs, files, target, threshold, blinded)
                + (filters_html(group_names, blinded, group_column) if show_rows else "")
                + table
            )
            payload = rows_payload(rows, drawn, list(zip(decisions, shown_scores)), links, blinded, is_localizer)
            payload["grouped"] = grouped
            single = html_embed.embedded_body(body, payload, files, target.parent, embed_limit) if pages == 1 else None
            if single is not None:
                _write_text(
                    target, page_html(header, single[0], blinded, show_rows, None, html_embed.data_script(single[1]))
                )
                shutil.rmtree(files)
                return target
            data = files / "rows.js"
            _write_text(data, html_embed.data_script(payload))
            text = page_html(header, body, blinded, script=show_rows, data_src=os.path.relpath(data, target.parent))
        else:
            back = f'<p><a href="{escape(quote(os.path.relpath(target, page.parent)))}">back to the summary</a></p>'
            text = page_html(header, f"<h1>{escape(header.title)}</h1>{back}{table}", blinded, False, None)
        _write_text(page, text)
    return target


def clear_page_files(files: Path, keep_evidence: bool) -> None:
    """A fresh sibling folder; `keep_evidence` keeps the pictures the scoring run drew into it."""
    if files.exists() and not keep_evidence:
        check_page_folder(files)
        shutil.rmtree(files)
    for sub in ("pages", "plots", "pairs"):
        if (files / sub).exists():
            shutil.rmtree(files / sub)
    for sub in ("thumbs", "overlays", "masks", "pages", "plots", "pairs"):
        (files / sub).mkdir(parents=True, exist_ok=True)


def evidence_of_rows(
    rows: Sequence[Mapping[str, Any]],
    evidence: Mapping[str, RowEvidence],
    files: Path,
    threshold: float,
    lut: np.ndarray,
    base: Path,
    workers: int,
    blinded: bool,
) -> list[RowEvidence]:
    """Each row's pictures: those drawn while scoring, the others drawn now (named `r<position>`, so
    they never overwrite a picture drawn while scoring, which is named by input position)."""

    def one(item: tuple[int, Mapping[str, Any]]) -> RowEvidence:
        position, row = item
        found = evidence.get(row["path"]) if row.get("status", "ok") == "ok" else None
        if found is not None:
            return found
        own = float(row.get("threshold", threshold))  # the threshold that decided it (its category's)
        return draw_row(f"r{position:07d}", row, files, own, lut, base, maps=not blinded)

    missing = sum(1 for r in rows if r["path"] not in evidence)
    if missing <= 1 or workers <= 1:
        return [one(item) for item in enumerate(rows)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, enumerate(rows)))


def write_run_report(
    target: str | os.PathLike,
    rows: Sequence[Mapping[str, Any]],
    *,
    model: str | os.PathLike | None,
    detector: str,
    threshold: float,
    calibration: Mapping[str, Any] | None = None,
    threshold_from_user: bool = False,
    category_thresholds: Mapping[str, float] | None = None,
    input: str = "",
    **options: Any,
) -> Path:
    """`write_html_report` with the header of a scoring or test run: the model file and its SHA-256,
    how the threshold was set (`category_thresholds`: those the rows' own `threshold` came from),
    the toolkit's version. `options` go to `write_html_report`."""
    from detectors import __version__

    model_file = Path(model) if model else None
    header = ReportHeader(
        title=f"{detector} on {input}" if input else str(detector),
        model=str(model or ""),
        detector=str(detector),
        threshold=float(threshold),
        input=str(input),
        version=__version__,
        threshold_note=threshold_note(float(threshold), calibration, threshold_from_user, category_thresholds),
        model_sha256=file_sha256(model_file) if model_file is not None and model_file.is_file() else "",
    )
    return write_html_report(target, rows, header, **options)


def moved(link: str | None, up: str) -> str | None:
    """A link relative to the main page's folder as seen from a page `up` (its way back) below it."""
    if link is None or up in ("", ".") or link.startswith("file:"):
        return link
    return f"{up}/{link}"


def rows_payload(
    rows: Sequence[Mapping[str, Any]],
    evidence: Sequence[RowEvidence],
    decided: Sequence[tuple[str, str]],
    links: Sequence[str],
    blinded: bool,
    is_localizer: bool,
) -> dict[str, Any]:
    """All rows for the page's script, as data (set as text by the script, never as HTML); each row's
    decision and its score as shown beside it (`score_against`), the score itself for the filters."""
    records = []
    for row, drawn, (decision, shown), link in zip(rows, evidence, decided, links):
        item = {
            "name": str(row["path"]),
            "link": link,
            "thumb": link if drawn.thumb_is_source else drawn.thumb,
            "thumb_box": drawn.thumb_box,
            "group": "" if row.get("group") is None else str(row["group"]),
            "note": row.get("error") or drawn.problem or row.get("note") or "",
        }
        if not blinded:
            score = None if row.get("score") is None else float(row["score"])
            item.update({"score": score, "score_text": shown, "decision": decision})
            if is_localizer:
                item.update(
                    {
                        "overlay": drawn.overlay,
                        "overlay_box": drawn.overlay_box,
                        "mask": drawn.mask,
                        "mask_box": drawn.mask_box,
                        "share": drawn.pixel_share,
                    }
                )
        records.append(item)
    return {"blinded": blinded, "localizer": is_localizer, "rows": records}


def _write_text(path: Path, text: str) -> None:
    """Atomic: a reader never sees half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
