"""Reports are written whole, and readable as any file the user's process writes (its umask)."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from evaluation.atomic import atomic_path
from evaluation.report import write_metrics_json


def test_written_reports_take_the_umask_permissions_not_mkstemps_owner_only(tmp_path):
    from evaluation.plots import plot_roc

    before = os.umask(0o022)
    try:
        json_file = write_metrics_json(tmp_path / "metrics.json", {"auroc": 0.5})
        png = plot_roc(tmp_path / "roc.png", np.array([0, 1, 0, 1]), np.array([0.1, 0.9, 0.4, 0.6]))
    finally:
        os.umask(before)
    for path in (json_file, png):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_a_failed_write_leaves_neither_the_target_nor_a_temporary_file(tmp_path):
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "report.md") as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert list(tmp_path.iterdir()) == []
