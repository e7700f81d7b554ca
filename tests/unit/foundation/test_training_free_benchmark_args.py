"""The training-free timing benchmark refuses bad arguments with one line before timing anything."""

from __future__ import annotations

import sys

import pytest

import benchmarks.bench_training_free as bench


@pytest.mark.parametrize(
    "arguments, phrase",
    [
        (["--size", "0"], "--size must be at least 32"),
        (["--repeats", "0"], "--repeats at least 1"),
        (["--detectors", "noise_level", "nois_level"], "nois_level: not a training-free single-image detector"),
        (["--detectors", "dup_sift"], "dup_sift: not a training-free"),  # a pair detector: a TypeError after
        (["--detectors", "seg_tiny"], "seg_tiny: not a training-free"),  # learned: random weights timed
        (["--image", "no_such_image.png"], "no_such_image.png: file not found"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_timed(arguments, phrase, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench_training_free.py", *arguments])
    monkeypatch.setattr(bench, "median_seconds", lambda *a: pytest.fail("the benchmark ran"))
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 2 and phrase in capsys.readouterr().err
