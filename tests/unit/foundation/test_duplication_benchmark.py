"""The duplication benchmark's command line: an impossible count or an unusable --json is refused
in one line before anything is measured (they failed after minutes, or divided by zero)."""

from __future__ import annotations

import pytest

from benchmarks import duplication


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--copy-move", "-1"], "--copy-move: must be 0 or more"),
        (["--speed-panels", "1"], "--speed-panels 2 or more"),
        (["--speed-rounds", "0"], "--speed-rounds 1 or more"),
        (["--skip-pairs", "--copy-move", "0", "--speed-panels", "0"], "nothing to measure"),
        (["--json", "{tmp}/a/file/x.json"], "needs a file in an existing folder"),
        (["--json", "{tmp}"], "needs a file in an existing folder"),
    ],
)
def test_an_impossible_run_is_refused_before_anything_is_measured(arguments, message, tmp_path, monkeypatch, capsys):
    for measured in ("pair_benchmark", "copy_move_benchmark", "speed_benchmark"):
        monkeypatch.setattr(duplication, measured, lambda args: pytest.fail("measured a refused run"))
    with pytest.raises(SystemExit) as refused:
        duplication.main([argument.format(tmp=tmp_path) for argument in arguments])
    assert refused.value.code == 2 and message in capsys.readouterr().err
