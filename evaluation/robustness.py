"""Robustness sweep (THEMIS section 4.3): perturb inputs with JPEG, Gaussian blur and rescaling at
growing strength and report metric-vs-strength curves.

The detector is injected, so this module needs no model code: ``robustness_curves`` takes
``score_perturbed(perturbation or None) -> scores``. The toolkit builds it only from the scoring run's
own prediction loop (``inference.scoring.score_perturbed_fn``; ``inference.perturbed_maps`` for
localizers), the perturbation applied right after decoding, so a sweep and a plain scoring run share
every step but the perturbation and cannot drift apart. For localizers, ``score_perturbed`` may also
return the pixel metrics of the perturbed maps (``{"scores": ..., "pixel": {...}}``), so one pass of the
detector per level gives both the image and the pixel curves.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Callable, Mapping, Sequence

import numpy as np

from imageops import gaussian_blur, jpeg, jpeg_codec, rescale

from .image import image_metrics

Perturbation = Callable[[np.ndarray, float], np.ndarray]
ScorePerturbed = Callable[[Callable[[np.ndarray], np.ndarray] | None], "np.ndarray | Mapping"]

PERTURBATIONS: dict[str, Perturbation] = {"jpeg": jpeg, "blur": gaussian_blur, "rescale": rescale}
DEFAULT_LEVELS: dict[str, tuple[float, ...]] = {
    "jpeg": (95, 85, 75, 60, 45, 30),
    "blur": (0.0, 0.5, 1.0, 1.5, 2.0, 3.0),
    "rescale": (0.5, 0.75, 1.0, 1.25, 1.5),
}
DEFAULT_CURVE_KEYS = ("auroc", "pauroc@0.1", "ap", "tpr@fpr=0.05", "tpr", "tnr", "balanced_accuracy")
# Curves added when ``score_perturbed`` returns pixel metrics (keys of ``evaluation.pixel``).
PIXEL_CURVE_KEYS = ("pixel_f1", "pixel_iou", "pixel_auroc", "pixel_f1_best", "pixel_fpr_genuine", "n_masks")


def _is_identity(name: str, level: float) -> bool:
    return (name == "blur" and level <= 0) or (name == "rescale" and level == 1)


def _scores_and_pixel(result) -> tuple[np.ndarray, dict]:
    """``score_perturbed``'s answer as (scores, pixel metrics): a plain array has no pixel metrics."""
    if isinstance(result, Mapping):
        return np.asarray(result["scores"], dtype=float).reshape(-1), dict(result.get("pixel") or {})
    return np.asarray(result, dtype=float).reshape(-1), {}


def robustness_curves(
    score_perturbed: ScorePerturbed,
    labels,
    levels: Mapping[str, Sequence[float]] | None = None,
    threshold: float = 0.5,
    curve_keys: Sequence[str] = DEFAULT_CURVE_KEYS,
    perturbations: Mapping[str, Perturbation] | None = None,
) -> dict:
    """Score clean and perturbed inputs; return ``{"clean": metrics, "curves": {name: {"levels":
    [...], "metrics": {key: [...]}}}}`` with one value per level, ready for plotting and JSON.

    ``score_perturbed(f)`` scores every input with ``f(image)`` applied to its decoded uint8 RGB
    pixels (``None``: unchanged), in the order of ``labels``; a NaN score marks an input that could
    not be scored, and an input that fails at any level (the clean pass included) is left out of
    every level, so the image curves compare the same images (every level is run before any
    metric). It may return ``{"scores": scores, "pixel": pixel metrics of the perturbed maps}``
    instead (localizers): the pixel keys then get curves too (``PIXEL_CURVE_KEYS``), and ``clean``
    holds them; those are the scorer's own, over the maps it made at that level.
    ``levels`` maps a perturbation name to its strengths (default: JPEG quality 95 -> 30, blur sigma
    0 -> 3, rescale 0.5 -> 1.5). ``perturbations`` adds or overrides functions ``f(image, level)``.
    Identity levels (sigma 0, factor 1) reuse the clean scores instead of running the detector again.
    The JPEG curve names its encoder (``codec``): the operations are ``imageops``', the ones training
    augmentation and generated data apply.
    """
    functions = {**PERTURBATIONS, **(perturbations or {})}
    levels = dict(DEFAULT_LEVELS if levels is None else levels)
    unknown = sorted(set(levels) - set(functions))
    if unknown:
        raise ValueError(f"unknown perturbation(s) {unknown}; known: {sorted(functions)}")
    y = np.asarray(labels)
    clean_scores, clean_pixel = _scores_and_pixel(score_perturbed(None))
    if clean_scores.size != y.size:
        raise ValueError(f"{clean_scores.size} scores for {y.size} labels")
    runs = {
        name: _run_levels(score_perturbed, functions[name], name, strengths, y.size)
        for name, strengths in levels.items()
    }
    keep = np.logical_and.reduce(
        [np.isfinite(clean_scores)] + [np.isfinite(r[0]) for rs in runs.values() for r in rs if r]
    )
    if not keep.all():
        warnings.warn(
            f"robustness: {int((~keep).sum())} of {y.size} inputs could not be scored at some level and are left "
            "out of every level",
            stacklevel=2,
        )
    clean = {**image_metrics(y[keep], clean_scores[keep], threshold=threshold), **clean_pixel}
    curve_keys = (*curve_keys, *(k for k in PIXEL_CURVE_KEYS if k in clean_pixel and k not in curve_keys))
    curves: dict[str, dict] = {}
    for name, strengths in levels.items():
        values: dict[str, list] = {k: [] for k in curve_keys}
        for run in runs[name]:
            metrics = clean if run is None else {**image_metrics(y[keep], run[0][keep], threshold=threshold), **run[1]}
            for k in curve_keys:
                values[k].append(metrics[k])
        curves[name] = {"levels": [float(v) for v in strengths], "metrics": values}
        if functions[name] is jpeg:  # which encoder made the curve: another library's JPEG gives other bytes
            curves[name]["codec"] = jpeg_codec()
    return {"clean": clean, "curves": curves}


def _run_levels(
    score_perturbed: ScorePerturbed, fn: Perturbation, name: str, strengths: Sequence[float], n: int
) -> list[tuple[np.ndarray, dict] | None]:
    """(scores, pixel metrics) per level, None for an identity level (the clean pass
    stands for it); all levels are run before any metric, so a failure anywhere is known everywhere."""
    runs: list[tuple[np.ndarray, dict] | None] = []
    for level in strengths:
        if _is_identity(name, level) and fn is PERTURBATIONS.get(name):
            runs.append(None)
            continue
        scores, pixel = _scores_and_pixel(score_perturbed(partial(_perturbed, fn, level)))
        if scores.size != n:
            raise ValueError(f"{scores.size} scores for {n} labels under {name} at {level}")
        runs.append((scores, pixel))
    return runs


def _perturbed(fn: Perturbation, level: float, image: np.ndarray) -> np.ndarray:
    """``fn(image, level)``; a module-level function so it pickles into DataLoader workers."""
    return fn(image, level)
