"""Column access for result tables, so protocols accept a DataFrame, a dict of columns or a list of
row dicts (as read from a manifest or infer.py's output) without ``evaluation`` needing pandas."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

import numpy as np

from ._checks import UndefinedMetricWarning
from .image import image_metrics

Records = Any  # pandas.DataFrame | Mapping[str, Sequence] | Sequence[Mapping[str, Any]]


NO_GROUP = "(none)"  # the breakdown row of records whose column is empty
RESULTS_COLUMNS = {"score", "status"}  # infer.py's results file, whose `label` is the decision
TRUTH_COLUMN = "true_label"  # the results file's copy of the input's label


def as_columns(records: Records) -> dict[str, np.ndarray]:
    """Columns as numpy arrays, whatever tabular shape the records come in."""
    if hasattr(records, "columns") and hasattr(records, "to_numpy"):  # DataFrame-like
        return {str(c): np.asarray(records[c].to_numpy()) for c in records.columns}
    if isinstance(records, Mapping):
        return {str(k): np.asarray(v) for k, v in records.items()}
    rows = list(records)
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    return {k: np.asarray([row.get(k) for row in rows]) for k in keys}


def truth_column(cols: Mapping[str, np.ndarray], label: str = "label") -> str:
    """The column holding the truth. In infer.py's results file (columns score and status) `label`
    is the decision and the truth is `true_label`: scoring decisions against themselves would read
    as perfect. A results file without `true_label` (its input had no labels) is refused."""
    if label != "label" or not RESULTS_COLUMNS <= set(cols):
        return label
    if TRUTH_COLUMN not in cols:
        raise ValueError(
            "these rows are infer.py's results (columns score, status): their label column holds the "
            "decisions, not the truth, and no true_label column came with them (the input had no labels); "
            "join the truth from the input's manifest as a label column"
        )
    return TRUTH_COLUMN


def column(cols: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    if name not in cols:
        raise KeyError(f"records have no column {name!r}; available: {sorted(cols)}")
    return cols[name]


def numeric(cols: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """A label/score column as floats; CSV readers hand back strings such as "1" or "0.73"."""
    values = column(cols, name)
    if values.dtype.kind in "biuf":
        return values.astype(float)
    try:
        return values.astype(float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"column {name!r} must be numeric: {err}") from None


def group_names(values: np.ndarray) -> np.ndarray:
    """Group keys as strings; missing values (None, NaN, '') become '' so they group together."""
    out = []
    for v in values.tolist():
        if v is None or (isinstance(v, float) and np.isnan(v)):
            out.append("")
        else:
            out.append(str(v))
    return np.asarray(out, dtype=object)


def by_group(
    records: Records,
    column_name: str = "group",
    metric_fn: Callable[..., dict] = image_metrics,
    shared_negatives: bool = True,
    label: str = "label",
    score: str = "score",
    **metric_kwargs,
) -> dict[str, dict]:
    """Metrics per value of ``column_name`` (e.g. generator), nested under the group's name.

    With ``shared_negatives`` (the FraudBench convention for generators) each group is scored as
    its own fakes against every genuine image, and groups holding no fake are left out; without it
    each group is scored on its own rows only (the right choice for ``category``). From infer.py's
    results file the truth is its `true_label` (see `truth_column`), not the decisions.
    """
    cols = as_columns(records)
    y = numeric(cols, truth_column(cols, label))
    s = numeric(cols, score)
    names = group_names(column(cols, column_name))
    # one threshold per row (per-category calibration) follows the rows of each group
    per_row = np.ndim(metric_kwargs.get("threshold", 0.5)) == 1
    out: dict[str, dict] = {}
    negative = y == 0
    for name in sorted(set(names.tolist())):
        member = names == name
        if shared_negatives:
            positive = member & ~negative
            if not positive.any():
                continue
            rows = positive | negative
        else:
            rows = member
        kwargs = (
            {**metric_kwargs, "threshold": np.asarray(metric_kwargs["threshold"])[rows]} if per_row else metric_kwargs
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out[name or NO_GROUP] = metric_fn(y[rows], s[rows], **kwargs)
        for found in caught:  # a metric undefined in one group is said of that group, not of the whole run
            prefix = f"{column_name} {name or NO_GROUP}: " if issubclass(found.category, UndefinedMetricWarning) else ""
            warnings.warn_explicit(f"{prefix}{found.message}", found.category, found.filename, found.lineno)
    return out


def by_category(records: Records, column_name: str = "category", **kwargs) -> dict[str, dict]:
    """Per-category metrics: every category is scored on its own fakes and genuines."""
    kwargs.setdefault("shared_negatives", False)
    return by_group(records, column_name, **kwargs)


def _present(value: Any, name: str) -> bool:
    """Whether a cell holds a value (None, "" and NaN do not); a value that is no number is refused."""
    if value is None or value == "":
        return False
    try:
        return not np.isnan(float(value))
    except (TypeError, ValueError):
        raise ValueError(f"column {name!r} must be numeric, got {value!r}") from None


def labelled_rows(records: Records, label: str = "label", score: str = "score") -> dict[str, np.ndarray]:
    """Columns restricted to rows with both a label and a score (unlabelled inputs and failed
    reads, which infer.py writes with an empty score, are left out), label as int, score as float.
    From infer.py's results file the label is its `true_label` (see `truth_column`)."""
    cols = as_columns(records)
    cols[label] = column(cols, truth_column(cols, label))
    y, s = cols[label], column(cols, score)
    keep = np.array([_present(a, label) & _present(b, score) for a, b in zip(y.tolist(), s.tolist())], dtype=bool)
    cols = {k: v[keep] for k, v in cols.items()}
    cols[label] = cols[label].astype(float).astype(int)
    cols[score] = cols[score].astype(float)
    return cols
