"""The collection benchmark never deletes a folder the user named (only the collection and indexes it
made there, when a run of other settings replaces them), and `--reuse` needs one."""

from __future__ import annotations

import json
import sys

import pytest

import benchmarks.collection_index as bench


def test_reuse_without_a_workdir_is_refused_before_anything_runs(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["collection_index.py", "--reuse"])
    monkeypatch.setattr(bench, "run", lambda args: pytest.fail("the benchmark ran"))
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 2 and "--reuse measures again on the --workdir" in capsys.readouterr().err


def test_a_named_workdir_is_kept_without_keep(tmp_path, monkeypatch):
    def fail_after_writing(root, args):
        (root / "collection").mkdir(parents=True)
        raise RuntimeError("stopped")

    monkeypatch.setattr(bench, "write_collection", fail_after_writing)
    args = bench.argparse.Namespace(workdir=str(tmp_path / "W"), keep=False)
    with pytest.raises(RuntimeError):
        bench.run(args)
    assert (tmp_path / "W" / "collection").is_dir()


def test_reuse_of_a_collection_drawn_with_other_settings_is_refused(tmp_path):
    settings = {"distractors": 40, "sources": 4, "copies_per_source": 1, "calibration_queries": 8, "seed": 0}
    (tmp_path / "collection_settings.json").write_text(bench.json.dumps(settings))
    args = bench.argparse.Namespace(**{**settings, "distractors": 60}, reuse=True)
    with pytest.raises(SystemExit, match="holds a collection made with .*'distractors': 40.*, not .*'distractors': 60"):
        bench.write_collection(tmp_path, args)
    (tmp_path / "collection_settings.json").unlink()
    with pytest.raises(SystemExit, match="unrecorded settings"):
        bench.write_collection(tmp_path, bench.argparse.Namespace(**settings, reuse=True))


def test_a_workdir_of_other_settings_is_emptied_of_that_collection_and_one_of_no_run_refused(tmp_path, capsys):
    made_with = {"distractors": 50, "seed": 0}
    (tmp_path / "collection" / "d0000").mkdir(parents=True)
    (tmp_path / "collection" / "d0000" / "panel000150.jpg").write_bytes(b"a distractor of a larger run")
    (tmp_path / "index_local_sift").mkdir()
    (tmp_path / "notes.txt").write_text("the user's own")
    with pytest.raises(SystemExit, match="unrecorded settings"):
        bench.replace_other_collection(tmp_path, made_with)
    (tmp_path / "collection_settings.json").write_text(json.dumps(made_with))
    bench.replace_other_collection(tmp_path, made_with)  # the same draw: kept, indexes go on incrementally
    assert (tmp_path / "collection" / "d0000" / "panel000150.jpg").exists()
    (tmp_path / "collection_settings.json").write_text(json.dumps({"distractors": 200, "seed": 0}))
    bench.replace_other_collection(tmp_path, made_with)  # it indexed the 150 leftovers as its own before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
