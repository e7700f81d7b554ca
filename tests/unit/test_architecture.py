"""Dependencies between the top-level packages run one way (docs/architecture.md, "Packages").

Every `import` in every module of a package is read with `ast` (imports inside functions included),
so a lazy import cannot slip a backward dependency past the rule.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINTS = {"train", "infer", "export", "generate", "calibrate"}
# package -> the sibling modules it may import (a package name allows all of it)
ALLOWED = {
    "imageops": set(),
    "evaluation": {"imageops"},
    "datamodules": {"evaluation", "imageops"},
    "detectors": {"datamodules", "evaluation", "imageops"},
    "synthesis": {"datamodules.io", "imageops"},
    "inference": {"detectors", "datamodules", "evaluation", "imageops"},
    "exporting": {"detectors", "datamodules", "evaluation", "inference", "imageops"},
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
                base = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-node.level])
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
