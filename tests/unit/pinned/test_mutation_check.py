"""The mutation check finds the mutants that matter and never edits the working tree; its full run
on a module (slow) leaves no survivor that is not listed, with a reason, as accepted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.mutation.mutants import mutants_of, mutated_source
from benchmarks.mutation_check import COVERAGE, accepted_keys

ROOT = Path(__file__).resolve().parents[3]


def test_the_planted_kinds_of_bug_are_among_the_mutants():
    keys = {m.key for m in mutants_of("evaluation/pixel.py")}
    boundary = "pred = p >= self.threshold  ->  pred = p > self.threshold"
    assert f"evaluation/pixel.py: add: {boundary}" in keys
    tiling = {m.key for m in mutants_of("inference/tiling.py")}
    assert any("best = max(best" in k and "best = min(best" in k for k in tiling)
    masks = {m.after for m in mutants_of("inference/masks.py")}
    assert any("cv2.resize(pixels, (size[0], size[0])" in a for a in masks)
    parts = {m.after for m in mutants_of("inference/parts.py")}
    assert any("sorted(rows)]" in a and "key=" not in a for a in parts)


def test_messages_logs_and_annotations_are_not_mutated():
    for module in ("tools/themis_blocks.py", "tools/fraudbench_table.py"):
        for mutant in mutants_of(module):
            assert not mutant.before.startswith(("raise ", "log.")), mutant.key


def test_a_mutant_changes_exactly_one_thing_and_still_parses():
    [mutant] = [m for m in mutants_of("inference/parts.py") if "sorted(rows)]" in m.after and "key=" not in m.after]
    source = mutated_source(mutant)
    assert mutant.after + "\n" in source and "key=lambda p: position.get" not in source
    compile(source, "parts.py", "exec")


def test_accepted_survivors_each_give_a_reason_and_are_still_mutants_of_the_code():
    """A line whose statement was rewritten since it was accepted no longer excuses anything."""
    mutants = {module: {m.key for m in mutants_of(module)} for module in COVERAGE}
    for key, reason in accepted_keys().items():
        module, scope, change = key.split(": ", 2)
        assert module in COVERAGE and scope and "  ->  " in change and len(reason) > 10, key
        assert key in mutants[module], f"stale accepted line: {key[:200]}"


@pytest.mark.slow  # every mutant of one module runs its tests (minutes)
@pytest.mark.ci  # the mutation check gates CI on one module
def test_no_unexplained_survivor_in_the_merge_of_part_files(tmp_path):
    """Run as a command: a fresh process, so the mutated modules are imported from the copy."""
    status = ["git", "status", "--porcelain"]
    before = subprocess.run(status, check=True, cwd=ROOT, capture_output=True, text=True).stdout
    report = tmp_path / "parts.json"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.mutation_check", "--module", "inference/parts.py", "--output", str(report)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    results = json.loads(report.read_text())
    assert results and all(m["status"] in ("killed", "accepted") for m in results)
    dropped_order = [m for m in results if "sorted(rows)]" in m["after"] and "key=" not in m["after"]]
    assert dropped_order and all(m["status"] == "killed" for m in dropped_order)
    after = subprocess.run(status, check=True, cwd=ROOT, capture_output=True, text=True).stdout
    assert after == before
