"""`index.py devices=N`: Lightning Fabric processes each describe a share into a part, and the first
merges them; together with `shard=i/n` jobs every file is described exactly once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")

from datamodules.io import write_image  # noqa: E402
from index import index, process_shard  # noqa: E402
from inference.parts import Shard  # noqa: E402
from synthesis.collection import texture_panel  # noqa: E402
from tests.helpers import ROOT, compose_config  # noqa: E402


@pytest.mark.parametrize("jobs", [1, 2, 3])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_the_processes_of_all_jobs_describe_every_file_exactly_once(jobs, world_size):
    positions = range(40)
    described = [
        position
        for job in range(jobs)
        for rank in range(world_size)
        for position in positions
        if position % process_shard(Shard(job, jobs), rank, world_size).count
        == process_shard(Shard(job, jobs), rank, world_size).index
    ]
    assert sorted(described) == list(positions)


def indexed_panels(index_dir: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(index_dir / "panels.sqlite") as db:
        return sorted(db.execute("SELECT path, n_vectors FROM panels").fetchall())


@pytest.mark.slow  # two spawned processes (~20 s)
def test_two_processes_build_the_index_one_process_builds(tmp_path):
    rng = np.random.default_rng(3)
    for number in range(9):
        write_image(tmp_path / "archive" / f"paper{number % 3}" / f"panel{number}.png", texture_panel(rng, 160))
    (tmp_path / "archive" / "paper0" / "broken.png").write_bytes(b"not an image")
    index(compose_config("index", [f"input={tmp_path / 'archive'}", f"index={tmp_path / 'one'}"]))
    command = [
        sys.executable,
        str(ROOT / "index.py"),
        f"input={tmp_path / 'archive'}",
        f"index={tmp_path / 'two'}",
        "devices=2",
        "strategy=ddp",
        "device=cpu",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "indexed 9 panels of 9 files (1 unreadable" in done.stdout + done.stderr
    assert indexed_panels(tmp_path / "two") == indexed_panels(tmp_path / "one")
    assert not (tmp_path / "two" / "parts").exists()
    # a file deleted since: both builds forget it, and both count the files they found indexed
    (tmp_path / "archive" / "paper0" / "panel0.png").unlink()
    again = index(compose_config("index", [f"input={tmp_path / 'archive'}", f"index={tmp_path / 'one'}"]))
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert again["removed"] == 1 and f"{again['skipped']} already indexed" in done.stdout + done.stderr
    assert indexed_panels(tmp_path / "two") == indexed_panels(tmp_path / "one")
    assert len(indexed_panels(tmp_path / "one")) == 8
