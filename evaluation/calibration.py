"""Pick the operating threshold from genuine images only, so a deployment's false-alarm rate is set."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable, Mapping

import numpy as np

from ._checks import as_scores, warn_undefined
from .records import NO_GROUP

CALIBRATION_RULES = ("quantile", "bound")


def check_rule(rule: str) -> str:
    if rule not in CALIBRATION_RULES:
        raise ValueError(f"calibration rule must be one of {', '.join(CALIBRATION_RULES)}, got {rule!r}")
    return rule


def rule_phrase(rule: str | None, confidence: float = 0.95, sufficient: bool = True) -> str:
    """How a report names the rule a threshold was calibrated by ('' for the default quantile); on
    too few negatives the rule's promise does not hold, and is not made."""
    if rule != "bound":
        return ""
    if not sufficient:
        return f" (rule bound, whose {confidence:.0%} promise needs more of them than this: see below)"
    return f" (rule bound: the true FPR is at or under the target with {confidence:.0%} confidence)"


def bounded_allowance(n: int, target_fpr: float, confidence: float = 0.95) -> int:
    """How many of n genuine images a threshold may flag while its true FPR stays at or under
    `target_fpr` with `confidence`: the largest m with P(Binomial(n, target_fpr) <= m) <= 1 - confidence
    (the Neyman-Pearson umbrella order statistic of Tong, Feng & Li, Science Advances 2018); 0 where
    not even m = 0 reaches it (n under `genuine_needed`, which the calibration check then reports).
    """
    from scipy.stats import binom

    risk = 1.0 - confidence
    allowed = int(binom.ppf(risk, n, target_fpr))  # the smallest m with P(<= m) >= risk
    if binom.cdf(allowed, n, target_fpr) > risk:
        allowed -= 1
    return max(0, allowed)


# How far apart two backends' scores of one image may be (float32 PyTorch vs ONNX Runtime, batched or
# not: up to 2e-7 measured); a threshold above the top genuine scores keeps this far above them.
BACKEND_MARGIN = 1e-6


def calibrate_threshold(genuine_scores, target_fpr: float, rule: str = "quantile", confidence: float = 0.95) -> float:
    """A threshold t with ``mean(genuine_scores >= t) <= target_fpr`` that flags as many genuine
    images as the bound allows.

    rule="quantile" flags up to `target_fpr` of these images, so a new sample's FPR lands on either
    side of the target about equally often. rule="bound" flags only as many as keep the true FPR at
    or under the target with `confidence` (`bounded_allowance`): fewer false alarms on new genuine
    images, bought with a higher threshold (fewer fakes caught).

    t sits midway between the highest genuine score that must stay below it and the next distinct
    genuine score, not one ulp above the former: scores computed by another backend (ONNX vs
    PyTorch, a batch of one vs many) differ in the last bits, and an image scored right at t would
    flip label between them. With no higher genuine score, t is `BACKEND_MARGIN` above the
    boundary (the top genuine scores are often tied: crops of one flat photo), for the same reason.
    Ties cannot break the bound, and everything is done in the scores' own float precision, so
    casting to float32 later does not bring a tie back. ``target_fpr >= 1`` returns -inf (everything may be
    flagged); no genuine scores returns NaN with a warning.
    """
    if not (0.0 <= float(target_fpr) <= 1.0):
        raise ValueError(f"target_fpr must be in [0, 1], got {target_fpr!r}")
    check_rule(rule)
    s = as_scores(genuine_scores, "genuine_scores")
    if not np.isfinite(s).all():
        raise ValueError("genuine_scores must be finite to calibrate a threshold")
    n = s.size
    if n == 0:
        warn_undefined(["threshold"], "no genuine scores to calibrate on")
        return float("nan")
    allowed = min(n, math.floor(target_fpr * n * (1.0 + 1e-12)))
    if allowed >= n:
        return float("-inf")
    if rule == "bound":
        allowed = min(allowed, bounded_allowance(n, target_fpr, confidence))
    s = np.sort(s)
    # Every score above s[n - allowed - 1] may be flagged; that score itself (and its ties) may not.
    boundary = s[n - allowed - 1]
    # the scores' own precision (float16 too); one wider than float64 is held at float64, the
    # precision of the float returned: its next float64 still lies above the exact boundary
    dtype = s.dtype if s.dtype.itemsize <= 8 else np.dtype(np.float64)
    boundary = dtype.type(boundary)
    s = s.astype(dtype, copy=False)
    t = np.nextafter(boundary, dtype.type(np.inf))
    above = s[s > boundary]
    if above.size:
        middle = dtype.type((float(boundary) + float(above[0])) / 2)
        t = max(t, middle)  # the midpoint can round onto the boundary when the gap is one ulp
    else:
        t = max(t, dtype.type(float(boundary) + BACKEND_MARGIN * max(1.0, abs(float(boundary)))))
    return float(t)


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval of a binomial proportion seen as k in n.

    Used for the false-positive rate at a threshold: with few genuine images a measured FPR of 0
    is compatible with a large true FPR, and this interval says how large. n = 0 gives (0, 1).
    """
    from scipy.stats import beta

    k, n = int(k), int(n)
    if n < 0 or not 0 <= k <= max(n, 0):
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n == 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def genuine_needed(target_fpr: float, confidence: float = 0.95) -> int:
    """Smallest n for which zero false positives among n genuine images bounds the FPR below
    `target_fpr` at `confidence` (one-sided): (1 - target_fpr)**n <= 1 - confidence, about
    3 / target_fpr at 95 % (the rule of three; 299 for 1 %)."""
    if not 0.0 < float(target_fpr) < 1.0:
        raise ValueError(f"target_fpr must be in (0, 1), got {target_fpr!r}")
    return int(math.ceil(math.log(1.0 - confidence) / math.log1p(-float(target_fpr)) - 1e-9))


GENUINE_IMAGES = "genuine validation images"  # what a detector of images is calibrated on
NON_DUPLICATE_PAIRS = "validation pairs without duplication"  # and a detector of pairs


def calibration_check(
    genuine_scores, threshold: float, target_fpr: float, confidence: float = 0.95, negatives: str = GENUINE_IMAGES
) -> dict:
    """How much a threshold calibrated on `genuine_scores` can be trusted at `target_fpr`.

    Returns n_genuine, false_positives, fpr and its Clopper-Pearson interval at `threshold`,
    genuine_needed, sufficient (n_genuine >= genuine_needed), `negatives` (what the scores are of,
    as the report names them) and, when not sufficient, a warning sentence a user can act on.
    """
    s = as_scores(genuine_scores, "genuine_scores")
    n = int(s.size)
    fp = int(np.sum(s >= threshold)) if n else 0
    low, high = clopper_pearson(fp, n, confidence)
    needed = genuine_needed(target_fpr, confidence)
    result = {
        "n_genuine": n,
        "false_positives": fp,
        "fpr": fp / n if n else float("nan"),
        "fpr_interval": [low, high],
        "interval_confidence": confidence,
        "target_fpr": float(target_fpr),
        "genuine_needed": needed,
        "sufficient": n >= needed,
        "negatives": negatives,
    }
    warnings = []
    kind = negatives.replace("validation ", "")
    if n < needed:
        warnings.append(
            f"the threshold was calibrated on {n} {negatives}; a target FPR of "
            f"{target_fpr:g} needs at least {needed} to be meaningful. The FPR at this threshold is "
            f"{fp}/{n}, {confidence:.0%} Clopper-Pearson interval [{low:.3f}, {high:.3f}]: expect more "
            f"{kind} flagged than the target. Add {kind} to validation or raise target_fpr."
        )
    if threshold > 1.0:  # scores are probabilities: more of the negatives than target_fpr score 1
        warnings.append(
            f"the threshold {threshold:.9g} is above every score there is, so it flags no image at all: "
            f"{int(np.sum(s >= 1.0))} of {n} {kind} score 1, more than target_fpr={target_fpr:g} allows. "
            "The model is saturated on them; train it on images of this kind or raise target_fpr."
        )
    if warnings:
        result["warning"] = " ".join(warnings)
    return result


def calibration_markdown(check: dict) -> str:
    """The calibration sample as a report section: size, FPR with its interval, and the warning."""
    low, high = check["fpr_interval"]
    negatives = check.get("negatives", GENUINE_IMAGES)
    sources = check.get("genuine_sources")
    cut_from = (
        f" (cut from {sources} sources: crops of one source are not independent draws, so the interval "
        "below is narrower than these images warrant)"
        if sources and sources < check["n_genuine"]
        else ""
    )
    rule = rule_phrase(check.get("rule"), sufficient=check.get("sufficient", True))
    lines = [
        "## Calibration",
        "",
        f"Threshold calibrated to target FPR {check['target_fpr']:g}{rule} on "
        f"{check['n_genuine']} {negatives}{cut_from}: "
        f"{check['false_positives']} of them at or above it, FPR "
        f"{check['false_positives']}/{check['n_genuine']}, {check['interval_confidence']:.0%} "
        f"Clopper-Pearson interval [{low:.3f}, {high:.3f}]. A meaningful target needs at least "
        f"{check['genuine_needed']} {negatives}.",
    ]
    if check.get("warning"):
        lines += ["", f"**Warning**: {check['warning']}"]
    return "\n".join(lines) + "\n"


def category_names(categories) -> np.ndarray:
    """Category values as strings; a missing category (None, NaN, '') becomes ''."""
    out = []
    for value in np.asarray(categories, dtype=object).tolist():
        missing = value is None or (isinstance(value, float) and math.isnan(value)) or value == ""
        out.append("" if missing else str(value))
    return np.asarray(out, dtype=object)


def calibrate_by_category(
    genuine_scores,
    categories,
    target_fpr: float,
    confidence: float = 0.95,
    rule: str = "quantile",
    other_categories: Iterable[Any] = (),
) -> dict:
    """One threshold per category of the genuine images, each only where the category has enough
    genuine images for `target_fpr` to mean anything (`genuine_needed`); a category of
    `other_categories` (the fakes') with no genuine image at all is among the too few.

    A grainy kind of image (micrographs, blots) can sit far above the others in score; one global
    threshold then flags most of it while the global FPR still looks fine. Returns
    ``{"thresholds": {category: t}, "checks": {category: calibration_check(...)},
    "too_few": {category: (n_genuine, genuine_needed)}}``; images without a category take part
    in no category's threshold (they keep the global one).
    """
    scores = as_scores(genuine_scores, "genuine_scores")
    names = category_names(categories)
    if names.shape != scores.shape:
        raise ValueError(f"need one category per genuine score, got {names.shape} for {scores.shape}")
    needed = genuine_needed(target_fpr, confidence)
    result: dict = {"thresholds": {}, "checks": {}, "too_few": {}}
    seen = set(names.tolist()) | set(category_names(list(other_categories)).tolist())
    for name in sorted(seen - {""}):
        own = scores[names == name]
        if own.size < needed:
            result["too_few"][name] = (int(own.size), needed)
            continue
        threshold = calibrate_threshold(own, target_fpr, rule, confidence)
        result["thresholds"][name] = threshold
        result["checks"][name] = calibration_check(own, threshold, target_fpr, confidence)
    return result


def too_few_sentence(too_few: dict, target_fpr: float) -> str:
    """The categories that cannot have their own threshold, named with their counts."""
    listed = ", ".join(f"{name} ({n} of {needed})" for name, (n, needed) in sorted(too_few.items()))
    return (
        f"too few genuine images for a threshold of their own at target FPR {target_fpr:g} in: "
        f"{listed} (genuine images of the category, of the number needed)"
    )


def row_thresholds(categories, thresholds: dict, default: float) -> np.ndarray:
    """Each row's threshold: its category's when it has one, else `default`."""
    names = category_names(categories)
    return np.asarray([thresholds.get(name, default) if name else default for name in names.tolist()], dtype=np.float64)


def categories_below_target(by_category: dict, target_tnr: float) -> dict:
    """``{category: genuine TNR}`` of every category whose genuine TNR is below `target_tnr`
    (categories without genuine images are left out): what a summary must name."""
    return {
        name: float(m["tnr"])
        for name, m in sorted(by_category.items())
        if m.get("n_neg") and m.get("tnr") is not None and math.isfinite(m["tnr"]) and m["tnr"] < target_tnr
    }


NO_SOURCE = "(none given)"  # how reports name the flagged genuine images whose records name no source


def below_target_sentence(below: dict, target_tnr: float, flagged_by_source: dict | None = None) -> str:
    """'' when every category meets the target, else a sentence naming each one that misses it,
    and the sources most of those categories' flagged genuine images come from
    (`flagged_genuine_by_source`, most first), so one odd source is seen where a user looks first."""
    if not below:
        return ""
    listed = ", ".join(f"{name} {tnr:.4f}" for name, tnr in below.items())
    sentence = f"genuine TNR below the target {target_tnr:g} in categories: {listed}"
    # the sources of the flagged genuine images of the categories named, most first
    counts = Counter(
        {
            name: sum(n for category, n in entry["categories"].items() if (category or NO_GROUP) in below)
            for name, entry in (flagged_by_source or {}).items()
        }
    )
    sources = [(name, n) for name, n in counts.most_common() if n]
    if sources:
        shown = sources[:3]
        named = ", ".join(f"{name or NO_SOURCE} {n}" for name, n in shown)
        more = len(sources) - len(shown)
        sentence += f" (flagged genuine images by source: {named}{f', and {more} more' if more else ''})"
    return sentence


def below_target_in(metrics: Mapping[str, Any]) -> str:
    """`below_target_sentence` of a metrics.json payload (train.py's summary, infer.py's log)."""
    return below_target_sentence(
        metrics.get("genuine_tnr_below_target") or {},
        metrics.get("target_tnr", 0.0),
        metrics.get("flagged_genuine_by_source"),
    )
