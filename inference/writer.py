"""Result files of a scoring run: rows streamed to CSV or JSONL, safe to stop and resume."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from evaluation.records import TRUTH_COLUMN  # the input's own label, beside `label` (the decision)
from inference.csv_cells import unescape_cell, write_csv_rows

SIGNATURE_COLUMN = "file_signature"  # the image file's size and modification time when its row was written
COLUMNS = ("path", "score", "label", "status", "error", SIGNATURE_COLUMN)
OPTIONAL_COLUMNS = (TRUTH_COLUMN, SIGNATURE_COLUMN)  # a file written before rows carried them resumes

log = logging.getLogger(__name__)


def file_signature(path: str | os.PathLike) -> str:
    """`<size>:<modification time in ns>` of the file at `path` ('' where it cannot be read)."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return ""
    return f"{found.st_size}:{found.st_mtime_ns}"


def row_signature(row: Mapping[str, Any]) -> str:
    """The signature of the files a row scored now: its image's, or both panels' of a pair row."""
    if "path_a" in row and "path_b" in row:
        return f"{file_signature(row['path_a'])}|{file_signature(row['path_b'])}"
    return file_signature(row["path"])


def is_stale(row: Mapping[str, Any]) -> bool:
    """Whether the image (or a panel) of `row` changed or went since the row was written: its
    recorded signature differs from its files' now. Rows written before rows carried one are taken
    as they are."""
    recorded = row.get(SIGNATURE_COLUMN)
    return bool(recorded) and recorded != row_signature(row)


def signed(row: Mapping[str, Any]) -> dict[str, Any]:
    """`row` with the signature of its files as they are now."""
    return {**row, SIGNATURE_COLUMN: row_signature(row)}


def needs_scoring(row: Mapping[str, Any]) -> bool:
    """Whether a resume scores the image of `row` again: it could not be read then (it may have been
    repaired since), or its file changed since the row was written."""
    return row.get("status") == "error" or is_stale(row)


class ResultWriter:
    """Appends rows to a CSV or JSONL file, one flushed write per batch.

    Each batch goes out as whole lines with a single write followed by fsync, so the file holds
    only complete rows whatever moment the run is stopped at; `resume` drops a torn last line
    (from a crash mid-write) and reads which paths are already done. `done` holds every row of the
    file (those found on resume as `read_rows` gives them, text in CSV; those written since as
    given), so the run never reads its own output back. A CSV text cell a spreadsheet would run as a
    formula is written with a leading `'` (`inference.csv_cells`), which `read_rows` takes off again.
    With `truth` (path -> the input's label), each row written gets it as `true_label` where the
    columns hold one, and where they hold `file_signature` each row gets its image file's size and
    modification time. `rescore`: a resume drops the rows that `needs_scoring` (error rows, and rows
    of images changed since; the file is rewritten without them, whole), so an image repaired or
    replaced since is scored again.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        columns: Sequence[str] = COLUMNS,
        resume: bool = False,
        truth: Mapping[str, Any] | None = None,
        rescore: bool = False,
    ) -> None:
        self.path = Path(path)
        if self.path.suffix.lower() not in (".csv", ".jsonl"):
            raise ValueError(f"output must end in .csv or .jsonl, got {self.path}")
        self.is_csv = self.path.suffix.lower() == ".csv"
        self.columns = list(columns)
        self.truth = truth or {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done: dict[str, dict[str, Any]] = {}
        self.written: list[dict[str, Any]] = []  # the rows written by this writer, in order
        if resume and self.path.is_file():
            self._check_header()
            self._drop_torn_line()
            rows = read_rows(self.path)
            again = [row for row in rows if needs_scoring(row)] if rescore else []
            if again:
                changed = sum(row.get("status") != "error" for row in again)
                if changed:
                    log.info("%s: %d images changed since their rows were written: scored again", self.path, changed)
                rows = [row for row in rows if not needs_scoring(row)]
                self._rewrite(rows)
            self.done = {row["path"]: row for row in rows}
            self.handle = self.path.open("a", encoding="utf-8", newline="")
        else:
            self.handle = self.path.open("w", encoding="utf-8", newline="")
            if self.is_csv:
                self._write([dict(zip(self.columns, self.columns))], header=True)

    def _check_header(self) -> None:
        self.columns = resumable_columns(self.path, self.columns)

    def _drop_torn_line(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as handle:
                handle.truncate(data.rfind(b"\n") + 1)

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        """The file replaced by `rows`, whole (`evaluation.atomic.atomic_path`: never half-written)."""
        from evaluation.atomic import atomic_path

        with atomic_path(self.path) as temporary, temporary.open("w", encoding="utf-8", newline="") as handle:
            if self.is_csv:
                self._write([dict(zip(self.columns, self.columns))], header=True, handle=handle)
            self._write(rows, handle=handle)

    def _write(self, rows: list[dict[str, Any]], header: bool = False, handle: Any = None) -> None:
        """`rows` as whole lines in one flushed, fsynced write to `handle` (the file's own by default)."""
        handle = handle or self.handle
        buffer = io.StringIO()
        if self.is_csv:
            if header:
                csv.DictWriter(buffer, fieldnames=self.columns, lineterminator="\n").writerows(rows)
            else:
                write_csv_rows(buffer, self.columns, rows, extrasaction="ignore")
        else:
            for row in rows:
                buffer.write(json.dumps({k: row.get(k) for k in self.columns}) + "\n")
        handle.write(buffer.getvalue())
        handle.flush()
        os.fsync(handle.fileno())

    def write(self, rows: list[dict[str, Any]]) -> None:
        if self.truth and TRUTH_COLUMN in self.columns:
            rows = [{**row, TRUTH_COLUMN: self.truth.get(row["path"], "")} for row in rows]
        if SIGNATURE_COLUMN in self.columns:
            rows = [row if row.get(SIGNATURE_COLUMN) else signed(row) for row in rows]
        if rows:
            self._write(rows)
            self.done.update({row["path"]: row for row in rows})
            self.written.extend(rows)

    def close(self) -> None:
        self.handle.close()

    def __enter__(self) -> "ResultWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a results file as they were given to the writer (strings in CSV, the `'` that kept a
    text cell from running as a formula taken off), complete lines only: a torn last line, left by a
    crash or being written by another process right now, is not a row yet."""
    path = Path(path)
    data = path.read_bytes()
    text = data[: data.rfind(b"\n") + 1].decode("utf-8")
    if path.suffix.lower() == ".csv":
        rows = csv.DictReader(io.StringIO(text, newline=""))
        return [{key: unescape_cell(value) for key, value in row.items()} for row in rows]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def parse_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row as read or written, with its score as a float and its labels as ints (None where empty)."""
    parsed = {**row, "score": float(row["score"]) if row.get("score") not in (None, "") else None}
    for column in ("label", TRUTH_COLUMN) if TRUTH_COLUMN in row else ("label",):
        parsed[column] = int(row[column]) if row.get(column) not in (None, "") else None
    return parsed


def read_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a results file as dicts (scores as floats, labels as ints where present)."""
    return [parse_row(row) for row in read_rows(path)]


def resumable_columns(path: Path, columns: Sequence[str]) -> list[str]:
    """The columns a resume of `path` appends with: `columns`, or the file's own when it was written
    before rows carried the truth or the file signature (the rewrite in input order at the end adds
    them; its rows are taken as they are). A file of other
    columns (maps saved now and not before, or the reverse) would get rows that do not fit it:
    refused with the reason. A JSONL file's columns are its first row's keys."""
    with path.open(encoding="utf-8", newline="") as handle:
        if path.suffix.lower() == ".csv":
            header = next(csv.reader(handle), None)
        else:
            first = next((line for line in handle if line.strip()), None)
            try:
                header = list(json.loads(first)) if first is not None else None
            except ValueError:  # a torn first row: dropped when the file is resumed
                header = None
    if header is None or header == list(columns):
        return list(columns)
    if set(columns) - set(header) <= set(OPTIONAL_COLUMNS) and header == [c for c in columns if c in header]:
        return header
    raise ValueError(
        f"{path} was written with the columns {header}, this run writes {list(columns)}: resume "
        "with the options it was started with (save_masks, save_confidence, the same input), or "
        "write to another output"
    )


def stamp_run(output: Path, stamp: Mapping[str, Any], compare: bool) -> None:
    """`<output stem>.run.json`: the model (its SHA-256), thresholds and scoring options the rows are
    decided with. With `compare` (a run adding rows to rows already written), other ones are refused
    (the file would mix two runs' decisions); rows written before the stamp existed, or before it
    recorded a key, are added to as before."""
    from evaluation.atomic import atomic_path

    path = output.with_name(f"{output.stem}.run.json")
    if compare and path.is_file():
        before = json.loads(path.read_text(encoding="utf-8"))
        changed = [key for key in stamp if key != "model" and key in before and before[key] != stamp[key]]
        if changed:
            raise ValueError(
                f"{output} was scored with {before.get('model')} ({', '.join(f'{k} {before[k]}' for k in changed)}): "
                "adding rows with another model, threshold or scoring option (resume, shard or merge) would "
                "mix two runs' decisions; score again without resume=true (one process), or write to another output"
            )
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(dict(stamp), indent=1), encoding="utf-8")
