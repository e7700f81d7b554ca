"""`python infer.py -m ...` as a user runs it: every job's rows are kept, each in its job's own folder."""

from __future__ import annotations

import os
import subprocess
import sys

from inference.writer import read_rows
from tests.helpers import ROOT, write_images, write_tiny_model


def test_a_multirun_over_two_inputs_keeps_each_jobs_scores_in_its_own_folder(tmp_path):
    write_tiny_model(tmp_path, onnx=False)
    write_images(tmp_path / "inA", [(40, 40)] * 3, seed=1)
    write_images(tmp_path / "inB", [(40, 40)] * 2, seed=2)
    command = [
        sys.executable,
        str(ROOT / "infer.py"),
        "-m",
        "model=model.ckpt",
        "input=inA,inB",
        "output=scores.csv",
        "num_workers=0",
        "progress=false",
        "hydra.sweep.dir=sweep",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (tmp_path / "scores.csv").exists()  # no file that one job writes over another's
    for job, folder in enumerate(("inA", "inB")):
        rows = read_rows(tmp_path / "sweep" / str(job) / "scores.csv")
        expected = sorted(f"{folder}/{image.name}" for image in (tmp_path / folder).iterdir())
        assert sorted(row["path"] for row in rows) == expected
        assert all(row["status"] == "ok" for row in rows)
    assert f"multirun job 1 writes output=scores.csv in its own folder: {tmp_path / 'sweep' / '1' / 'scores.csv'}" in (
        result.stdout + result.stderr
    )


def test_an_index_multirun_builds_one_index_per_job_unless_given_an_absolute_folder(tmp_path):
    write_images(tmp_path / "inA", [(64, 64)] * 3, seed=1)
    write_images(tmp_path / "inB", [(64, 64)] * 2, seed=2)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    printed = {}
    for index in ("idx", str(tmp_path / "shared")):
        command = [sys.executable, str(ROOT / "index.py"), "-m", "input=inA,inB", f"index={index}"]
        command.append("hydra.sweep.dir=sweep")
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        printed[index] = result.stdout + result.stderr
    assert not (tmp_path / "idx").exists()
    # each job's own index holds its own input's panels; an absolute folder gathers both inputs
    assert f"3 panels in {tmp_path / 'sweep' / '0' / 'idx'} " in printed["idx"]
    assert f"2 panels in {tmp_path / 'sweep' / '1' / 'idx'} " in printed["idx"]
    assert f"5 panels in {tmp_path / 'shared'} " in printed[str(tmp_path / "shared")]
