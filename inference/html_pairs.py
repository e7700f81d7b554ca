"""The duplication pairs on the reviewers' page: A and B side by side with the shared regions
outlined and the matched points joined, the verdict, and the transform in words."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import quote

import numpy as np

from inference.html_evidence import draw_pair, transform_in_words
from inference.html_parts import decision_of, escape, score_against, shown_name

PAIRS_SHOWN = 200  # pairs drawn on the page, most suspicious first; every pair stays in the results file


def pair_transform(pair: Mapping[str, Any]) -> dict[str, Any]:
    """The pair's `transform` as a mapping (results files hold it as JSON text; empty when none)."""
    value = pair.get("transform")
    if isinstance(value, Mapping):
        return dict(value)
    try:
        return json.loads(value) if value else {}
    except (TypeError, ValueError):
        return {}


def pair_counts(pairs: Sequence[Mapping[str, Any]], threshold: float, blinded: bool) -> dict[str, int]:
    """What the header counts on a page of pairs."""
    decisions = [decision_of(p, threshold) for p in pairs]
    if blinded:
        return {"pairs": len(pairs) - decisions.count("error"), "errors": decisions.count("error")}
    return {
        "shared content": decisions.count("flagged"),
        "nothing shared": decisions.count("not flagged"),
        "errors": decisions.count("error"),
    }


def verdict_html(pair: Mapping[str, Any], transform: Mapping[str, Any], threshold: float) -> str:
    """A pair's score, decision and operations, the transform in words where it is flagged (the map
    of a pair not flagged is no reuse, and is not said as one), and the detector's reason."""
    decision = decision_of(pair, threshold)
    operations = str(pair.get("operations") or "")
    score = score_against(pair.get("score"), threshold, threshold)
    return (
        f'<p class="verdict">score <span class="score">{escape(score)}</span>, '
        f'<span class="decision">{escape(decision)}</span>'
        + (f": {escape(operations.replace(';', ', '))}" if operations else "")
        + "</p>"
        + (
            f'<p class="transform">{escape(transform_in_words(transform, operations))}</p>'
            if transform and decision == "flagged"
            else ""
        )
        + (f'<p class="note">{escape(pair.get("reason"))}</p>' if pair.get("reason") else "")
    )


def group_line(pair: Mapping[str, Any]) -> str:
    """The review or folder a pair of a grouped input comes from (a pair manifest names none)."""
    return f"in {escape(pair['group'])}<br>" if pair.get("group") else ""


def pairs_html(
    pairs: Sequence[Mapping[str, Any]], files: Path, page: Path, threshold: float, blinded: bool, seed: int = 0
) -> str:
    """The pairs section: the `PAIRS_SHOWN` most suspicious pairs drawn (blinded: a seeded sample in
    random order, drawn without the detector's outlines, points or verdict), then the failed pairs
    with their reasons."""
    if not pairs:
        return ""
    is_scored = [p.get("status", "ok") == "ok" and p.get("score") not in (None, "") for p in pairs]
    scored = [p for p, ok in zip(pairs, is_scored) if ok]
    failed = [p for p, ok in zip(pairs, is_scored) if not ok]
    if blinded:
        order = np.random.default_rng(seed).permutation(len(scored))
        scored = [scored[i] for i in order]
    else:
        scored = sorted(scored, key=lambda p: -float(p["score"]))
    items = []
    for index, pair in enumerate(scored[:PAIRS_SHOWN]):
        transform = pair_transform(pair)
        drawn = pair if not blinded else {"path_a": pair["path_a"], "path_b": pair["path_b"]}
        picture = draw_pair(index, {**drawn, "points": None if blinded else transform.get("points")}, files)
        image = (
            f'<img loading="lazy" class="pair" alt="A and B side by side" '
            f'src="{escape(quote(os.path.relpath(picture, page.parent).replace(os.sep, "/")))}">'
            if picture
            else '<p class="note">the images could not be read</p>'
        )
        words = "" if blinded else verdict_html(pair, transform, threshold)
        items.append(
            f'<div class="pair-row"><p class="name">{group_line(pair)}A: {shown_name(pair["path_a"])}<br>'
            f"B: {shown_name(pair['path_b'])}</p>{image}{words}</div>"
        )
    rest = len(scored) - PAIRS_SHOWN
    fewer = "not shown" if blinded else "scored lower"  # blinded: the sample is random, not the top
    more = f"<p>{rest} more pairs {fewer}; every pair is in the results file.</p>" if rest > 0 else ""
    errors = "".join(
        f'<tr><td class="name">{shown_name(p.get("path_a"))}</td><td class="name">{shown_name(p.get("path_b"))}</td>'
        f'<td class="note">{escape(p.get("error"))}</td></tr>'
        for p in failed
    )
    failures = (
        f"<h3>Pairs that could not be scored</h3><table><thead><tr><th>A</th><th>B</th><th>why</th></tr></thead>"
        f"<tbody>{errors}</tbody></table>"
        if failed
        else ""
    )
    title = "Pairs of images" if blinded else "Shared content between images"  # blinded: no answer in the title
    return f'<section id="pairs"><h2>{title}</h2>{"".join(items)}{more}{failures}</section>'
