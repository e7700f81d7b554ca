"""A relative path that names nothing is refused with where it was looked for, so a user whose command
ran in another folder than they thought (`hydra.job.chdir=true` runs it in the run's folder) sees it."""

from __future__ import annotations

import re

import pytest


def missing_manifest(path: str) -> None:
    from datamodules.records import read_manifest

    read_manifest(path)


def missing_input(path: str) -> None:
    from datamodules.layouts import records_from_input

    records_from_input(path)


def missing_model(path: str) -> None:
    from inference.runtime import load_runtime

    load_runtime(path, "cpu")


def missing_ckpt_path(path: str) -> None:
    from train import check_resume

    check_resume(path, None)


def missing_source(path: str) -> None:
    from generate import find_photos

    find_photos(path)


REFUSALS = {
    "manifest": (missing_manifest, "data/m.csv", "manifest data/m.csv does not exist"),
    "input": (missing_input, "photos", "input photos does not exist"),
    "model": (missing_model, "npr.ckpt", "checkpoint npr.ckpt does not exist"),
    "onnx model": (missing_model, "npr.onnx", "ONNX model npr.onnx does not exist"),
    "ckpt_path": (missing_ckpt_path, "last.ckpt", "ckpt_path last.ckpt does not exist"),
    "source": (missing_source, "photos", "source photos does not exist or is not a folder"),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_a_missing_relative_path_is_said_with_the_absolute_path_looked_for(tmp_path, monkeypatch, name):
    refuse, path, said = REFUSALS[name]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception, match=re.escape(f"{said} (looked for {tmp_path / path})")):
        refuse(path)


@pytest.mark.parametrize("name", REFUSALS)
def test_a_missing_absolute_path_is_said_as_given(tmp_path, name):
    refuse, path, said = REFUSALS[name]
    absolute = str(tmp_path / path)
    with pytest.raises(Exception, match=re.escape(said.replace(path, absolute, 1))) as refused:
        refuse(absolute)
    assert "looked for" not in str(refused.value)
