"""Dependencies between the top-level packages run one way (docs/architecture.md, "Packages").

Every `import` in every module of a package is read with `ast` (imports inside functions included),
so a lazy import cannot slip a backward dependency past the rule.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINTS = {"train", "infer", "export", "generate", "calibrate", "index"}
# package -> the sibling modules it may import (a package name allows all of it)
ALLOWED = {
    "imageops": set(),
    "evaluation": {"imageops"},
    "datamodules": {"evaluation", "imageops"},
    "detectors": {"datamodules", "evaluation", "imageops"},
    "synthesis": {"datamodules.io", "imageops"},
    "inference": {"detectors", "datamodules", "evaluation", "imageops"},
    "exporting": {"detectors", "datamodules", "evaluation", "inference", "imageops"},
    "collection": {"detectors", "datamodules", "inference", "imageops"},
    "tools": {"detectors", "datamodules", "evaluation", "inference", "exporting", "imageops"},
}
NOT_PRODUCT = {"tests", "benchmarks", "configs", "docs", "checkpoints"}


def top_level_packages() -> set[str]:
    return {p.parent.name for p in ROOT.glob("*/__init__.py")} - NOT_PRODUCT


def imported_modules(path: Path) -> set[str]:
    """Absolute dotted names a file imports (`from a.b import c` gives `a.b.c`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside the file's own package
                base = ".".join(path.relative_to(ROOT).with_suffix("").parts[: -node.level])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names |= {f"{module}.{alias.name}" for alias in node.names}
    return names


def violations(package: str) -> list[str]:
    siblings = top_level_packages() | ENTRY_POINTS
    allowed = ALLOWED[package]
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in sorted(imported_modules(path)):
            top = name.split(".")[0]
            if top == package or top not in siblings:
                continue
            if any(name == a or name.startswith(f"{a}.") for a in allowed):
                continue
            found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def test_every_package_has_a_declared_place_in_the_rule():
    assert top_level_packages() == set(ALLOWED), "declare a new package's allowed imports in ALLOWED"


def test_every_package_of_the_rule_has_its_row_in_the_architecture_page():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = {line.split("`")[1] for line in page.splitlines() if line.startswith("| `")}
    assert set(ALLOWED) <= rows, f"docs/architecture.md has no row for {sorted(set(ALLOWED) - rows)}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_the_rule_allows(package):
    assert violations(package) == []


def test_the_checker_sees_backward_and_lazy_imports(tmp_path, monkeypatch):
    """The rule test itself must be able to fail: a planted backward import is reported."""
    fake_root = tmp_path
    for name in ALLOWED:
        (fake_root / name).mkdir()
        (fake_root / name / "__init__.py").write_text("")
    (fake_root / "datamodules" / "bad.py").write_text("def f():\n    from synthesis.embedded import x\n")
    (fake_root / "synthesis" / "ok.py").write_text("from datamodules.io import read_image\n")
    (fake_root / "synthesis" / "bad.py").write_text("from datamodules import records\n")
    (fake_root / "evaluation" / "bad.py").write_text("import train\n")
    monkeypatch.setattr(f"{__name__}.ROOT", fake_root)
    assert violations("datamodules") == ["datamodules/bad.py imports synthesis.embedded.x"]
    assert violations("synthesis") == ["synthesis/bad.py imports datamodules.records"]
    assert violations("evaluation") == ["evaluation/bad.py imports train"]


def python_files(root: Path) -> list[Path]:
    """The repository's Python files, tests and scripts included (git's view: ignored data is not)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [root / name for name in listed if (root / name).is_file()]


def sys_path_edits(root: Path, paths: list[Path]) -> list[str]:
    """`sys.path.insert/append/extend` calls and `sys.path` assignments, as file:line."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value
            elif isinstance(node, ast.Assign):
                target = node.targets[0]
            else:
                continue
            if (
                isinstance(target, ast.Attribute)
                and target.attr == "path"
                and isinstance(target.value, ast.Name)
                and target.value.id == "sys"
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(found)


def test_no_file_edits_sys_path(tmp_path):
    """Scripts run as `python -m` and tests import through the packages, so nothing needs it. The
    one exception: the mutation check imports a mutated copy of the repository in a forked child."""
    edits = sys_path_edits(ROOT, python_files(ROOT))
    assert [e for e in edits if not e.startswith("benchmarks/mutation/runner.py:")] == []
    assert len(edits) <= 1
    script = tmp_path / "script.py"
    script.write_text("import sys\nsys.path.insert(0, '..')\nsys.path = []\nprint(sys.path)\n")
    assert sys_path_edits(tmp_path, [script]) == ["script.py:2", "script.py:3"]


def test_every_package_and_entry_point_is_installed():
    """`pip install -e .` ships each package the entry points import: one missing from setup.cfg
    imports only from the repository root (`import infer` elsewhere failed on `collection`)."""
    import configparser

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    included = {line.strip().rstrip("*") for line in setup["options.packages.find"]["include"].split()}
    modules = {name.strip() for name in setup["options"]["py_modules"].split(",")}
    assert top_level_packages() <= included and ENTRY_POINTS <= modules
