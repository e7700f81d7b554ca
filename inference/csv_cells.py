"""Text cells of the toolkit's CSV files that a spreadsheet would run as a formula, kept as text.

Excel, LibreOffice and Google Sheets evaluate a cell starting with `=`, `+`, `-`, `@`, a tab or a
carriage return when they open a CSV, so an image or folder named `=HYPERLINK(...)` (or a manifest's
review id) would run in a reviewer's spreadsheet. Such a cell is written with a leading `'` (the
spreadsheets' own mark for "text"), and a cell starting with `'` gets one more, so the toolkit's
readers take exactly the `'` the writer put back off and get every value as it was. Numbers are
left as they are: a value such as `-0.25` is a number to a spreadsheet, never a formula.
"""

from __future__ import annotations

import csv
import re
from typing import IO, Any, Iterable, Mapping, Sequence

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
TEXT_MARK = "'"
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)


def escape_cell(value: Any) -> Any:
    """`value` as a CSV cell no spreadsheet runs: text starting as a formula would, or with `'`,
    gets a leading `'`; numbers (and text that is one) and other values are returned unchanged."""
    if not isinstance(value, str) or not value:
        return value
    if value.startswith(TEXT_MARK) or (value.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(value)):
        return TEXT_MARK + value
    return value


def unescape_cell(value: Any) -> Any:
    """A cell as `escape_cell` was given it: the one leading `'` it added taken off, nothing else
    (a `'` it would not have added, as in a file written before cells were escaped, stays)."""
    if isinstance(value, str) and value.startswith(TEXT_MARK) and escape_cell(value[1:]) == value:
        return value[1:]
    return value


def write_csv_rows(
    handle: IO[str], columns: Sequence[str], rows: Iterable[Mapping[str, Any]], extrasaction: str = "raise"
) -> None:
    """`rows` as CSV lines ending in `\n`, each cell escaped (`escape_cell`). A row whose text holds a
    carriage return has every cell quoted: Python's csv leaves a bare `\r` unquoted with `\n` line
    ends, and a reader splits the row there, so a name such as `x.png\r/other.png,0.01,0,ok,` would
    read back as a second row that no image had."""
    plain = csv.DictWriter(handle, fieldnames=columns, extrasaction=extrasaction, lineterminator="\n")
    quoted = csv.DictWriter(
        handle, fieldnames=columns, extrasaction=extrasaction, lineterminator="\n", quoting=csv.QUOTE_ALL
    )
    for row in rows:
        cells = {key: escape_cell(value) for key, value in row.items()}
        (quoted if any(isinstance(v, str) and "\r" in v for v in cells.values()) else plain).writerow(cells)
