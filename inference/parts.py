"""Part files of a run split over processes or jobs, and their atomic merge into the output.

Every process (a rank of `devices=N`, or a job of `shard=i/n`) appends its rows to its own part
file beside the output, `<output>.parts/shard-<i>-of-<n>.rank-<r><suffix>`, with the same fsync'd
whole-line writes as a one-process run, so a process killed at any moment loses no finished row.
The merge writes the output's rows plus every part's rows in input order to a temporary file and
renames it over the output, so the output is never half-merged.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from datamodules.records import Record
from inference.writer import ResultWriter, is_stale, needs_scoring, read_rows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shard:
    """Job `index` of `count`: the records whose input position is `index` modulo `count`."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str | None) -> "Shard":
        """`i/n` (0 <= i < n) or empty for the whole input."""
        if text in (None, "", "0/1"):
            return cls()
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if not match or not int(match[1]) < int(match[2]):
            raise ValueError(f"shard must look like i/n with 0 <= i < n (e.g. shard=0/4), got {text!r}")
        return cls(int(match[1]), int(match[2]))

    def items(self, records: Sequence[Record]) -> list[tuple[int, str]]:
        """`(input position, path)` of this shard's records."""
        return [(i, r.path) for i, r in enumerate(records) if i % self.count == self.index]

    @property
    def prefix(self) -> str:
        return f"shard-{self.index}-of-{self.count}."


def parts_dir(output: Path) -> Path:
    return output.with_name(f"{output.name}.parts")


def part_path(output: Path, shard: Shard, rank: int) -> Path:
    return parts_dir(output) / f"{shard.prefix}rank-{rank}{output.suffix}"


def part_files(output: Path, shard: Shard | None = None) -> list[Path]:
    """Existing part files of `output` (of one shard, or of all)."""
    folder = parts_dir(output)
    if not folder.is_dir():
        return []
    prefix = shard.prefix if shard else "shard-"
    return sorted(p for p in folder.iterdir() if p.name.startswith(prefix) and p.suffix == output.suffix)


def done_paths(output: Path, shard: Shard | None = None) -> set[str]:
    """Paths that already have a row in the output or in the part files (complete lines only), but
    for the rows that `needs_scoring`: a resume tries those images again (one repaired or changed
    since is scored)."""
    files = ([output] if output.is_file() else []) + part_files(output, shard)
    return {row["path"] for path in files for row in read_rows(path) if not needs_scoring(row)}


def remove_parts(output: Path, shard: Shard | None = None) -> None:
    for path in part_files(output, shard):
        path.unlink()
    folder = parts_dir(output)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def merge_parts(output: Path, records: Sequence[Record], columns: Sequence[str]) -> dict[str, int]:
    """Fold every part file into `output` (its existing rows kept), rows in input order, atomically.

    Returns {"rows": rows written, "missing": inputs without a row yet (a shard still to run)}.
    """
    rows, missing = fold_parts(output, records, columns)
    return {"rows": len(rows), "missing": missing}


def fold_parts(output: Path, records: Sequence[Record], columns: Sequence[str]) -> tuple[list[dict[str, Any]], int]:
    """`merge_parts`, returning the rows written (as written: text in CSV) and how many inputs have
    none yet. A path scored twice (a row in two files, from overlapping resumed runs) keeps its first row,
    unless a later one is better: read where the first is an error row (an image tried again on
    resume and read), or of the image as it is now where the first is of an earlier version."""
    files = ([output] if output.is_file() else []) + part_files(output)
    rows: dict[str, dict[str, Any]] = {}
    for path in files:
        for row in read_rows(path):
            kept = rows.get(row["path"])
            if kept is None or better_row(row, kept):
                rows[row["path"]] = row
    ordered = write_in_order(output, rows, records, columns)
    remove_parts(output)
    return ordered, len({r.path for r in records} - set(rows))


def better_row(row: dict[str, Any], kept: dict[str, Any]) -> bool:
    """Whether `row` replaces `kept`, an earlier row of the same path, in a merge."""
    if is_stale(kept) != is_stale(row):
        return is_stale(kept)
    return kept.get("status") == "error" and row.get("status") != "error"


def once_each(records: Sequence[Record]) -> list[Record]:
    """Each image once, at its first listing: a run writes one row per image whether one process
    scores it or several (whose merge keeps one row per path), so rows and metrics agree."""
    first: dict[str, Record] = {}
    for record in records:
        first.setdefault(record.path, record)
    return list(first.values())


def known_labels(records: Sequence[Record]) -> dict[str, int]:
    """Each labelled input's own label, by path: the rows' `true_label`."""
    return {r.path: int(r.label) for r in records if r.label is not None}


def write_in_order(
    output: Path, rows: dict[str, dict[str, Any]], records: Sequence[Record], columns: Sequence[str]
) -> list[dict[str, Any]]:
    """Replace `output` atomically with `rows` (by path) in input order; returns them in that order.
    Rows of paths that are no input record are kept at the end, with a warning."""
    position: dict[str, int] = {}
    for i, record in enumerate(records):
        position.setdefault(record.path, i)
    unknown = [p for p in rows if p not in position]
    if unknown:
        log.warning("%d rows belong to no input record (kept at the end), e.g. %s", len(unknown), unknown[0])
    ordered = [rows[p] for p in sorted(rows, key=lambda p: position.get(p, len(records)))]
    tmp = output.with_name(f".{output.stem}.merging{output.suffix}")
    with ResultWriter(tmp, columns, truth=known_labels(records)) as writer:  # also rows resumed without it
        writer.write(ordered)
    os.replace(tmp, output)
    return ordered
