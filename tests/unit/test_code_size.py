"""Files stay focused: none over 400 lines, and no function over 60 lines unless its docstring says
why it is kept in one piece (docs/architecture.md, "Adding things")."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
REASON = "Kept in one piece:"


def source_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if not name.startswith("tests/") and (ROOT / name).is_file()]


def test_no_file_is_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in source_files()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES
    }
    assert long == {}


def test_long_functions_say_why_they_are_kept_in_one_piece():
    unexplained = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and REASON not in (ast.get_docstring(node) or ""):
                    unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert unexplained == [], f'split them, or add "{REASON} <reason>" to the docstring'
