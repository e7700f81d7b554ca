"""`infer.py devices=2` (two CPU processes under Lightning Fabric) writes exactly what one process
writes, rows and metrics, and a rank killed mid-run loses nothing on resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infer import infer
from inference.parts import Shard, part_path
from inference.writer import read_rows
from tests.helpers import ROOT, compose_config, write_images, write_tiny_model

TWO_CPU_PROCESSES = ["devices=2", "strategy=ddp", "device=cpu"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("ddp_model"))


def labelled_manifest(folder: Path, count: int) -> Path:
    paths = write_images(folder, [(24 + i % 9, 30 + i % 5) for i in range(count)])
    paths[3].write_bytes(b"an upload that is no image")
    manifest = folder / "manifest.csv"
    with manifest.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label"])
        writer.writerows([[p.name, i % 2] for i, p in enumerate(paths)])
    return manifest


def infer_command(model: Path, manifest: Path, output: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "infer.py"),
        f"model={model}",
        f"input={manifest}",
        f"output={output}",
        "progress=false",
        "num_workers=1",
        *extra,
    ]


def one_process(model: Path, manifest: Path, output: Path, *extra: str) -> None:
    infer(compose_config("infer", infer_command(model, manifest, output, *extra)[2:]))


@pytest.mark.slow  # two spawned processes (~20 s)
def test_two_processes_write_the_rows_and_metrics_of_one(tiny_model, tmp_path):
    manifest = labelled_manifest(tmp_path / "data", 21)
    one_process(tiny_model["onnx"], manifest, tmp_path / "one.csv", "batch_size=4")
    command = infer_command(tiny_model["onnx"], manifest, tmp_path / "two.csv", "batch_size=3", *TWO_CPU_PROCESSES)
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (done.stdout + done.stderr).count("scored 20, failed 1") == 1  # rank 0 speaks for both
    assert (tmp_path / "two.csv").read_bytes() == (tmp_path / "one.csv").read_bytes()
    assert not (tmp_path / "two.csv.parts").exists()
    one, two = (json.loads((tmp_path / f"{n}.metrics.json").read_text()) for n in ("one", "two"))
    assert two == one and one["n_pos"] + one["n_neg"] == 20


def child_pids(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return children


@pytest.mark.slow
def test_a_rank_killed_mid_run_loses_nothing_on_resume(tiny_model, tmp_path):
    manifest = labelled_manifest(tmp_path / "data", 400)
    output = tmp_path / "scores.csv"
    command = infer_command(tiny_model["ckpt"], manifest, output, "batch_size=1", *TWO_CPU_PROCESSES)
    main = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rank1_part = part_path(output, Shard(), rank=1)
    deadline = time.monotonic() + 600
    while not (rank1_part.is_file() and len(read_rows(rank1_part)) >= 5) and time.monotonic() < deadline:
        assert main.poll() is None, "the run ended before it could be interrupted"
        time.sleep(0.02)
    (rank1,) = child_pids(main.pid)
    os.kill(rank1, signal.SIGKILL)
    assert main.wait(timeout=120) != 0  # Lightning takes the whole run down with the lost rank
    written = read_rows(rank1_part) + read_rows(part_path(output, Shard(), rank=0))
    partial = sum(row["status"] != "error" for row in written)  # an error row is tried again on resume
    assert 0 < partial < 400 and not output.exists()

    resumed = subprocess.run([*command, "resume=true"], capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    one_process(tiny_model["ckpt"], manifest, tmp_path / "one.csv", "batch_size=1")  # PyTorch: same batches
    assert output.read_bytes() == (tmp_path / "one.csv").read_bytes()
    assert f"already done {partial}" in resumed.stdout
