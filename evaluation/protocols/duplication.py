"""Scoring duplication between panel pairs: THEMIS CMO-I operation sets, pair decisions and masks.

Operation sets are THEMIS CMO-I answers (`direct`, `scaling`, `rotation`, `flip`, `parameter`).
Set-F1 / exact match / SPC are computed on duplicated pairs only, as THEMIS Table 12 asks the
question of duplicated pairs (and once more over all pairs, where a negative counts as exact when
nothing is predicted). Pixel figures follow BioFors' image-pair protocol in this variant: the two
panels' masks of a pair are scored together (their pixel counts added), at the detector's decision
(a pair judged not duplicated predicts empty masks, so a missed pair scores 0); `pixel_f1` /
`pixel_mcc` average over duplicated pairs with true masks, `_pooled` add the counts of every pair
with masks.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..image import image_metrics
from .themis import multilabel_set_metrics

CMO_OPERATIONS = ("direct", "scaling", "rotation", "flip", "parameter")
# Fine operation name -> the CMO-I answers it implies. THEMIS asks for every type that appears, so a
# mirror turned by an angle other than 0 or 180 degrees (`detectors.matching.Geometry` says `hflip`
# and `vflip`, mirror + 180, for those) is a flip and a rotation.
FINE_TO_CMO: dict[str, tuple[str, ...]] = {
    **{name: ("direct",) for name in ("direct_reuse", "direct")},
    "scaling": ("scaling",),
    **{name: ("rotation",) for name in ("rotate180", "rotation")},
    **{name: ("flip",) for name in ("hflip", "vflip", "flip")},
    "flip_rotation": ("flip", "rotation"),
    **{
        name: ("parameter",)
        for name in ("parameter", "brightness", "contrast", "saturation", "hue", "color_temperature")
    },
}
PAIR_PIXEL_PROTOCOL = (
    "pixel F1 / MCC of a pair = both panels' masks scored together at the pair decision (BioFors-style "
    "image-pair masks); pixel_f1 / pixel_mcc average over duplicated pairs with true masks, a missed pair "
    "(empty prediction) scoring 0 in both; pixel_mcc leaves out the pairs where it is undefined: one class in "
    "the truth (a whole-panel copy, found or missed) or in the prediction (every pixel marked); _pooled sum "
    "the pixel counts of all pairs with masks (negatives add only false positives)"
)


def cmo_set(operations: Iterable[str]) -> set[str]:
    """Fine operation names (or CMO answers) -> the set of THEMIS CMO-I answers; unknown names refused."""
    unknown = sorted(set(operations) - set(FINE_TO_CMO))
    if unknown:
        raise ValueError(f"unknown duplication operations {unknown}; known: {sorted(FINE_TO_CMO)}")
    return {answer for op in operations for answer in FINE_TO_CMO[op]}


def parse_operations(value: Any) -> set[str]:
    """`"flip;parameter"`, `"hflip|brightness"`, a list, or empty -> CMO answers (empty: no duplication)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return set()
    if isinstance(value, str):
        parts = [p.strip() for p in value.replace("|", ";").replace(",", ";").split(";")]
        value = [p for p in parts if p and p not in ("none", "no_duplication")]
    return cmo_set(value)


def operations_from_probabilities(probabilities: Sequence[float], cut: float = 0.5) -> list[str]:
    """THEMIS answers of a pair judged duplicated from the five operation probabilities of a learned
    pair detector (`CMO_OPERATIONS` order): those at `cut` or above among scaling, rotation, flip and
    parameter, and `direct` (reuse as it is) when none is."""
    said = [op for op, p in zip(CMO_OPERATIONS, probabilities) if op != "direct" and p >= cut]
    return sorted(said or ["direct"])


def _counts(truth: np.ndarray, predicted: np.ndarray) -> tuple[int, int, int, int]:
    tp = int(np.count_nonzero(truth & predicted))
    fp = int(np.count_nonzero(predicted) - tp)
    fn = int(np.count_nonzero(truth) - tp)
    return tp, fp, fn, int(truth.size) - tp - fp - fn


def f1_mcc(tp: int, fp: int, fn: int, tn: int) -> tuple[float, float]:
    f1 = 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else float("nan")
    denominator = np.sqrt(float(tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    mcc = (tp * tn - fp * fn) / denominator if denominator else float("nan")
    return float(f1), float(mcc)


def pair_mcc(tp: int, fp: int, fn: int, tn: int) -> float:
    """MCC of one pair's masks. NaN, left out of the mean, where it is undefined whatever is
    predicted: the truth holds one class (a whole-panel copy), found or missed alike (leaving out
    only the found ones would count its misses alone: 3 missed of 97 whole-panel copies made 4 of
    the 19 pairs averaged); also where the prediction marks every pixel (a near-whole copy marked
    whole, F1 0.98, is no miss). A missed partial copy (nothing predicted) is 0, as pixel F1 counts
    it, so misses stay in the mean."""
    if tn + fp == 0 or tp + fn == 0:
        return float("nan")
    if tp + fp == 0:
        return 0.0
    return f1_mcc(tp, fp, fn, tn)[1]


def decision_f1_mcc(truth: np.ndarray, decided: np.ndarray) -> tuple[float, float]:
    """F1 and MCC of pair decisions. Decisions all of one kind (nothing flagged, or everything) have
    MCC 0, no better than chance (sklearn's convention), not NaN; MCC is NaN where the truth holds
    one class only, as AUROC is. F1 is NaN only without positives and flags (no pairs included)."""
    f1, mcc = f1_mcc(*_counts(truth, decided))
    if not truth.any() or truth.all():
        return f1, float("nan")
    return f1, 0.0 if np.isnan(mcc) else mcc


def pair_pixel_counts(
    true_a: np.ndarray, true_b: np.ndarray, pred_a: np.ndarray, pred_b: np.ndarray
) -> tuple[int, int, int, int]:
    """Pixel counts of one pair, both panels together (masks boolean, each at its panel's size)."""
    a, b = (_counts(true_a.astype(bool), pred_a.astype(bool)), _counts(true_b.astype(bool), pred_b.astype(bool)))
    return tuple(x + y for x, y in zip(a, b))  # type: ignore[return-value]


def duplication_metrics(
    rows: Sequence[Mapping[str, Any]],
    threshold: float,
    pixel_counts: Sequence[tuple[int, int, int, int] | None] | None = None,
) -> dict[str, Any]:
    """Metrics of scored pairs. Each row: `label` (1 duplicated), `score`, `predicted` and `truth`
    (sets of CMO answers; `truth` may be None when only the label is known); `pixel_counts`, one
    (tp, fp, fn, tn) or None per row, from `pair_pixel_counts`.

    Kept in one piece: each block reads the same rows; the result is one flat
    report.
    """
    labels = np.asarray([int(r["label"]) for r in rows])
    scores = np.asarray([float(r["score"]) for r in rows])
    out: dict[str, Any] = {"n_pairs": len(rows), "threshold": float(threshold)}
    if len(rows) and 0 < labels.sum() < len(rows):
        out.update({f"pair_{k}": v for k, v in image_metrics(labels, scores, threshold=threshold).items()})
    decided = scores >= threshold
    out["pair_f1"], out["pair_mcc"] = decision_f1_mcc(labels.astype(bool), decided)
    known = [r for r in rows if r.get("truth") is not None]
    positives = [r for r in known if int(r["label"]) == 1]
    if positives:
        out["operations"] = multilabel_set_metrics(
            [set(r["predicted"]) for r in positives], [set(r["truth"]) for r in positives]
        )
        out["operations_all_pairs"] = multilabel_set_metrics(
            [set(r["predicted"]) for r in known], [set(r["truth"]) for r in known]
        )
        per: dict[str, dict[str, float]] = {}
        for op in CMO_OPERATIONS:
            has = [op in r["truth"] for r in positives]
            said = [op in r["predicted"] for r in positives]
            tp = sum(h and s for h, s in zip(has, said))
            per[op] = {
                "n": int(sum(has)),
                "recall": tp / sum(has) if sum(has) else float("nan"),
                "precision": tp / sum(said) if sum(said) else float("nan"),
            }
            subset = [r for r, h in zip(positives, has) if h]
            if subset:
                per[op].update(
                    {
                        k: v
                        for k, v in multilabel_set_metrics(
                            [set(r["predicted"]) for r in subset], [set(r["truth"]) for r in subset]
                        ).items()
                        if k != "n"
                    }
                )
        out["by_operation"] = per
    if pixel_counts is not None and any(c is not None for c in pixel_counts):
        duplicated = [c for c, r in zip(pixel_counts, rows) if c is not None and int(r["label"]) == 1]
        per_pair = [(f1_mcc(*c)[0], pair_mcc(*c)) for c in duplicated]
        pooled = np.sum([c for c in pixel_counts if c is not None], axis=0)
        out["pixel_f1"] = float(np.nanmean([f for f, _ in per_pair])) if per_pair else float("nan")
        defined = [m for _, m in per_pair if np.isfinite(m)]  # undefined where a true mask fills both panels
        out["pixel_mcc"] = float(np.mean(defined)) if defined else float("nan")
        out["pixel_f1_pooled"], out["pixel_mcc_pooled"] = f1_mcc(*(int(v) for v in pooled))
        out["n_mask_pairs"] = len(per_pair)
        out["pixel_protocol"] = PAIR_PIXEL_PROTOCOL
    return out


def rates_by_kind(rows: Sequence[Mapping[str, Any]], threshold: float) -> dict[str, dict[str, Any]]:
    """Per kind of pair (`kind`: every pair of a kind shares its label), the share flagged at
    `threshold`: the TPR of a kind of duplication, the FPR of a kind of negative (hard negatives
    are where a matcher fails first)."""
    kinds: dict[str, dict[str, Any]] = {}
    for kind in sorted({r["kind"] for r in rows}):
        subset = [r for r in rows if r["kind"] == kind]
        flagged = float(np.mean([r["score"] >= threshold for r in subset]))
        kinds[kind] = {"n": len(subset), "label": subset[0]["label"], ("tpr" if subset[0]["label"] else "fpr"): flagged}
    return kinds
