"""Where a pair run's pairs come from: a pair manifest (CSV / JSONL with `path_a, path_b` and, when
known, `label`, `operations`, `mask_a`, `mask_b`; paths relative to its folder), or every pair of
distinct images inside each group of an ordinary input (`inference.pairs` scores them)."""

from __future__ import annotations

import csv
import itertools
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from datamodules.layouts import records_from_input
from datamodules.records import LayoutError, Record, jsonl_rows, parse_label
from evaluation.protocols.duplication import parse_operations

log = logging.getLogger(__name__)


def is_pair_manifest(path: str | os.PathLike) -> bool:
    """A CSV / JSONL whose header names `path_a` and `path_b`."""
    path = Path(path)
    if not path.is_file() or path.suffix.lower() not in (".csv", ".jsonl", ".ndjson"):
        return False
    with path.open(encoding="utf-8-sig", newline="") as handle:
        if path.suffix.lower() == ".csv":
            header = next(csv.reader(handle), [])
        else:
            header = next(iter(jsonl_rows(path)), {})
    named = {"path_a", "path_b"} & {h.strip() for h in header}
    if len(named) == 1:  # meant as a pair manifest: say what it lacks, not that it has no `path`
        (given,) = named
        missing = "path_b" if given == "path_a" else "path_a"
        raise LayoutError(f"{path} names {given} but not {missing}: a pair manifest needs both")
    return len(named) == 2


def read_pair_manifest(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Pairs of a pair manifest, paths resolved against its folder; truth kept when given."""
    path = Path(path)
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.DictReader(handle)) if path.suffix.lower() == ".csv" else jsonl_rows(path)

    def resolve(value: Any) -> str | None:
        text = str(value or "").strip()
        return None if not text else text if os.path.isabs(text) else str(path.parent / text)

    pairs = []
    for number, row in enumerate(rows, 2 if path.suffix.lower() == ".csv" else 1):  # a CSV's header is line 1
        a, b = resolve(row.get("path_a")), resolve(row.get("path_b"))
        if not a or not b:
            raise LayoutError(f"{path}: row {number} needs both path_a and path_b")
        pair: dict[str, Any] = {
            "path_a": a,
            "path_b": b,
            "mask_a": resolve(row.get("mask_a")),
            "mask_b": resolve(row.get("mask_b")),
        }
        where = f"{path}: row {number}"
        if "operations" in row:
            pair["operations"] = row.get("operations") or ""
            try:  # checked now, not after every pair was scored
                parse_operations(pair["operations"])
            except ValueError as error:
                raise LayoutError(f"{where}: {error}") from None
        label = parse_label(row.get("label"), where, "0 (no duplication) or 1 (duplication)")
        if label is not None:
            pair["label"] = label
            agreeing_truth(pair, where)
        pairs.append(pair)
    unique = list({(p["path_a"], p["path_b"]): p for p in reversed(pairs)}.values())[::-1]  # the first kept
    if len(unique) < len(pairs):
        log.warning("%s lists %d pair(s) more than once: each is scored once", path, len(pairs) - len(unique))
    return unique


def agreeing_truth(pair: dict[str, Any], where: str) -> None:
    """Refuse a row whose label and operations contradict each other; a duplicated pair with no
    operations written has operations not known (scored as a pair, not in the operation sets)."""
    if "operations" not in pair:
        return
    named = parse_operations(pair["operations"])
    if pair["label"] == 0 and named:
        raise LayoutError(f"{where}: label 0 says no duplication, operations say {';'.join(sorted(named))}")
    if pair["label"] == 1 and not named:
        if pair["operations"].strip():
            raise LayoutError(f"{where}: label 1 says duplication, operations say {pair['operations']!r}")
        del pair["operations"]


def group_pairs(
    input: str | os.PathLike,
    layout: str = "auto",
    group_by: str | None = None,
    keep: Callable[[list[Record]], list[Record]] | None = None,
) -> list[dict[str, Any]]:
    """Every pair of distinct images inside each group (`group_by` or `review` when the input has
    it, else the image's folder), in input order; `keep` filters the input's records first (a run's
    own outputs inside its input folder are no input). An image listed in several groups (one photo
    sent with two refund claims) is paired inside each; a pair two groups share is scored once."""
    from inference.reviews import RECORD_FIELDS, review_ids

    records = records_from_input(input, layout)
    records = keep(records) if keep else records
    if group_by is None:
        group_by = "review" if any(r.review for r in records) else "parent"
    ids = review_ids(records, group_by, input)
    groups: dict[str, dict[str, None]] = OrderedDict()
    for record in records:  # a record field is read per listing; a path-keyed id once per image
        name = (getattr(record, group_by) if group_by in RECORD_FIELDS else ids.get(record.path)) or ""
        if name:
            groups.setdefault(name, {})[record.path] = None  # an image listed twice is no pair with itself
    grouped = {path for paths in groups.values() for path in paths}
    alone = len({r.path for r in records} - grouped) + sum(1 for paths in groups.values() if len(paths) == 1)
    if alone:
        log.info("%d image(s) have no other image in their %s: they are in no pair", alone, group_by)
    pairs: dict[frozenset[str], dict[str, Any]] = {}
    for name, paths in groups.items():
        for a, b in itertools.combinations(list(paths), 2):
            pairs.setdefault(frozenset((a, b)), {"path_a": a, "path_b": b, "group": name})
    return list(pairs.values())
