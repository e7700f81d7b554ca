"""`--help` of each entry point lists what it reads: the scoring, calibration, export and index
commands compose no config group, so their help shows their settings and not train.py's groups
(detectors, data, trainers), which they would refuse or ignore."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.mark.parametrize("entry_point, setting", [("infer", "input: ???"), ("calibrate", "target_fpr:")])
def test_help_of_a_command_without_groups_shows_its_settings_only(entry_point, setting):
    shown = subprocess.run(
        [sys.executable, str(ROOT / f"{entry_point}.py"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert shown.startswith(f"{entry_point}.py, a command of the toolkit")
    assert "model: ???" in shown and setting in shown
    assert "detector:" not in shown and "trainer:" not in shown and "Configuration groups" not in shown


def test_help_of_train_still_lists_the_groups_it_composes():
    shown = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "== Configuration groups ==" in shown and "detector: " in shown and "npr_tiny" in shown
