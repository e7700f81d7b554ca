"""Report figures, drawn with matplotlib's object API on the Agg canvas: no display needed and
no global backend switched under the caller's feet."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ._checks import as_labels_scores
from .atomic import atomic_path
from .image import roc_points

MAX_CURVE_POINTS = 5000
CAPTION_CHARS = 36  # a contact sheet's row title at fontsize 7 fills about its panel's width (square images)
AXIS_LABELS = {"jpeg": "JPEG quality", "blur": "blur sigma (px)", "rescale": "scale factor"}


def _save(fig: Figure, path: str | os.PathLike) -> Path:
    """Write atomically, so a crashed run never leaves a half-written PNG behind."""
    FigureCanvasAgg(fig)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    return Path(path)


def _operating_point(y: np.ndarray, s: np.ndarray, t: float | np.ndarray) -> tuple[float, float]:
    """FPR and TPR of deciding each score at `t`: one threshold, or one per row (per-category)."""
    pred = s >= t
    return float(pred[~y].mean()), float(pred[y].mean())


def _per_row(threshold: float | None, decision_thresholds) -> np.ndarray | None:
    """The rows' own thresholds when they are not all `threshold` (per-category calibration), else None."""
    if decision_thresholds is None:
        return None
    cuts = np.asarray(decision_thresholds, dtype=np.float64).reshape(-1)
    return None if threshold is not None and bool(np.all(cuts == threshold)) else cuts


def _thin(fpr: np.ndarray, tpr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep the curve drawable at 10 M scores without changing its shape visibly."""
    if fpr.size <= MAX_CURVE_POINTS:
        return fpr, tpr
    idx = np.unique(np.linspace(0, fpr.size - 1, MAX_CURVE_POINTS).astype(int))
    return fpr[idx], tpr[idx]


def plot_roc(
    path,
    labels,
    scores,
    threshold: float | None = None,
    calibrated_threshold: float | None = None,
    decision_thresholds=None,
) -> Path:
    """ROC on linear and log FPR axes (the low-FPR end is where deployments live), with the
    operating threshold and the calibrated threshold marked.

    `decision_thresholds`: each row's threshold (per-category calibration). Where they differ from
    `threshold` the point marked is the one the rows were decided at, as metrics.json counts it:
    the global threshold's point would contradict the reported TPR and TNR."""
    y, s = as_labels_scores(labels, scores)
    cuts = _per_row(threshold, decision_thresholds)
    marks = [(threshold, "o", "threshold"), (calibrated_threshold, "s", "calibrated")]
    if cuts is not None:
        marks[0] = (cuts, "o", "per-category thresholds")
    fpr, tpr, _ = roc_points(y, s)
    fpr, tpr = _thin(fpr, tpr)
    both = bool(y.any() and not y.all())  # one class only: no curve, no rates, and a note saying why
    fig = Figure(figsize=(10, 4.4))
    for ax, log in zip(fig.subplots(1, 2), (False, True)):
        if both:
            ax.plot(fpr, tpr, lw=1.6, label="ROC")
        else:
            only = f"{int(y.sum())} fake" if y.any() else f"{int((~y).sum())} genuine"
            note = f"the ROC curve needs both genuine and fake images\n(here only {only})"
            ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=9)
        chance = np.geomspace(1e-5, 1, 200) if log else np.array([0.0, 1.0])
        ax.plot(chance, chance, ls=":", c="grey", label="chance")
        for t, marker, name in marks if both else ():
            if t is not None and np.all(np.isfinite(t)):
                x, yy = _operating_point(y, s, t)
                where = name if np.ndim(t) else f"{name} {t:.4g}"
                ax.plot([x], [yy], marker, ms=8, label=f"{where}: FPR {x:.3g}, TPR {yy:.3g}")
        if log:
            ax.set_xscale("log")
            ax.set_xlim(max(1e-4, 0.5 / max(1, int((~y).sum()))), 1)
        ax.set_xlabel("false positive rate (genuine flagged)" + (", log" if log else ""))
        ax.set_ylabel("true positive rate (fakes caught)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    return _save(fig, path)


def plot_score_histograms(
    path,
    labels,
    scores,
    threshold: float | None = None,
    calibrated_threshold: float | None = None,
    decision_thresholds=None,
    xlabel: str = "score (probability of fake)",
) -> Path:
    """Genuine vs fake score distributions; overlap is what no threshold can fix. With
    `decision_thresholds` that differ (per-category), the line is named the global threshold: the
    categories with their own were decided elsewhere on this axis."""
    y, s = as_labels_scores(labels, scores)
    own = _per_row(threshold, decision_thresholds) is not None
    lines = [(threshold, "--", "global threshold" if own else "threshold"), (calibrated_threshold, ":", "calibrated")]
    fig = Figure(figsize=(6.5, 4))
    ax = fig.subplots()
    finite = s[np.isfinite(s)]
    bins = np.linspace(finite.min(), finite.max(), 51) if finite.size and finite.min() < finite.max() else 50
    for mask, name, colour in ((~y, "genuine", "tab:blue"), (y, "fake", "tab:red")):
        if mask.any():
            ax.hist(
                s[mask & np.isfinite(s)],
                bins=bins,
                alpha=0.55,
                color=colour,
                density=True,
                label=f"{name} (n={int(mask.sum())})",
            )
    for t, ls, name in lines:
        if t is not None and np.isfinite(t):
            note = " (categories with their own are decided at theirs)" if name == "global threshold" else ""
            ax.axvline(t, ls=ls, c="k", label=f"{name} {t:.4g}{note}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_robustness(
    path,
    robustness: Mapping,
    keys: Sequence[str] = ("auroc", "tpr@fpr=0.05", "balanced_accuracy", "pixel_f1", "pixel_auroc"),
) -> Path:
    """One panel per perturbation: each metric against perturbation strength (pixel metrics when
    the sweep had a localizer's maps)."""
    curves = robustness["curves"]
    fig = Figure(figsize=(4.2 * max(1, len(curves)), 3.8))
    axes = np.atleast_1d(fig.subplots(1, max(1, len(curves))))
    for ax, (name, curve) in zip(axes, curves.items()):
        for key in keys:
            if key in curve["metrics"]:
                ax.plot(curve["levels"], curve["metrics"][key], marker="o", label=key)
        if name == "jpeg":
            ax.invert_xaxis()  # quality falls left to right: stronger compression to the right
        ax.set_title(name)
        ax.set_xlabel(AXIS_LABELS.get(name, "strength"))
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def _overlay(image: np.ndarray, mask: np.ndarray | None, colour) -> np.ndarray:
    out = image.astype(np.float32) / 255.0
    if mask is not None:
        m = np.asarray(mask, dtype=np.float32)
        if m.shape != out.shape[:2]:
            from .pixel import resize_mask_nearest

            m = resize_mask_nearest(m, out.shape[:2])
        out = out * (1 - 0.5 * m[..., None]) + 0.5 * m[..., None] * np.asarray(colour, np.float32)
    return np.clip(out, 0, 1)


def _caption(text: str, limit: int = CAPTION_CHARS) -> str:
    """`text` cut to `limit` characters by an ellipsis: the start and, longer, the end of a file name
    (its numbering, its extension and what follows, such as a row's pixel F1) tell names apart best."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 5
    return text[:head] + "…" + text[len(text) - (limit - 1 - head) :]


def plot_contact_sheet(path, items: Sequence, threshold: float = 0.5, max_items: int = 16) -> Path:
    """Rows of image / true mask overlay (green) / predicted map overlay (red, prob >= threshold).

    ``items``: ``(image uint8 H x W x 3, true_mask or None, prob_map)`` tuples, optionally with a
    fourth element used as the row title, cut to fit its panel (`_caption`): a long one would run
    over the other titles and widen the sheet.
    """
    items = list(items)[:max_items]
    n = max(1, len(items))
    fig = Figure(figsize=(9, 2.9 * n))
    axes = np.asarray(fig.subplots(n, 3, squeeze=False))
    for row, item in zip(axes, items):
        image, truth, prob = item[0], item[1], item[2]
        title = _caption(str(item[3])) if len(item) > 3 else ""
        image = np.asarray(image)
        if image.ndim == 2:
            image = np.repeat(image[..., None], 3, axis=-1)
        p = np.squeeze(np.asarray(prob, dtype=np.float32))
        pred = p >= threshold
        row[0].imshow(image)
        row[0].set_title(title or "image", fontsize=7)
        row[1].imshow(_overlay(image, None if truth is None else np.squeeze(truth) > 0, (0, 1, 0)))
        row[1].set_title("true mask" if truth is not None else "true mask: none (genuine)", fontsize=8)
        row[2].imshow(_overlay(image, pred.astype(np.float32), (1, 0, 0)))
        row[2].set_title(f"predicted >= {threshold:g} (max p {p.max():.2f})", fontsize=8)
        for ax in row:
            ax.axis("off")
    return _save(fig, path)
