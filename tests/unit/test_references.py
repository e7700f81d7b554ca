"""Every file the code and documentation point at exists in the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".cfg", ".toml", ".txt"}
# a path inside the repository named in prose: docs/..., configs/..., a package file, a README
REFERENCE = re.compile(
    r"(?<![\w/.-])((?:docs|configs|checkpoints|benchmarks|detectors|datamodules|evaluation|"
    r"inference|synthesis|tests)/[\w/.-]*\.(?:md|py|yaml))\b"
)


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if Path(name).suffix in TEXT_SUFFIXES and (ROOT / name).is_file()]


def test_nothing_points_at_design_notes_outside_the_repository():
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in tracked_text_files()
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "DESIGN.md" in line or "../shared" in line
    ]
    assert offenders == [], "point at docs/architecture.md instead"


def test_every_repository_path_named_in_code_and_docs_exists():
    """Tests are left out: they name files they create in tmp_path."""
    missing = [
        f"{path.relative_to(ROOT)} names {match.group(1)}"
        for path in tracked_text_files()
        if path.relative_to(ROOT).parts[0] != "tests"
        for match in REFERENCE.finditer(path.read_text(encoding="utf-8"))
        if not (ROOT / match.group(1)).exists()
    ]
    assert missing == []


def test_architecture_document_exists_and_the_readme_links_it():
    assert (ROOT / "docs" / "architecture.md").is_file()
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8")
