"""A generator=diffusers run resumes as the other generators' runs do: the fakes an earlier run
wrote (image, mask and JSON, then their marker) are kept and not made again, a killed run goes on
with the rest, and the summary counts the fakes made and reused. Tiny random pipelines
(tests.diffusers_helpers) on 3 small photos: a run takes about a second."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import synthesis.diffusers_set as diffusers_set
from generate import spec_from_config
from synthesis.diffusers_set import make_diffusers_manifest
from tests.diffusers_helpers import tiny_options
from tests.helpers import compose_config


def run(photos: Path, pipeline: Path, output: Path) -> dict:
    """The set made as `generate.py generator=diffusers` makes it; its summary."""
    torch.set_num_threads(1)
    options = tiny_options(pipeline, seed=3)
    cfg = compose_config(
        "generate", [f"source={photos}", "generator=diffusers", "panels.crops_per_photo=0", "panels.min_panel_side=32"]
    )
    _, summary = make_diffusers_manifest(
        output, spec_from_config(cfg), options, photos=sorted(photos.iterdir()), root=photos, progress=False
    )
    return summary


def _fakes(output: Path) -> dict[str, bytes]:
    return {str(p.relative_to(output)): p.read_bytes() for p in sorted(output.glob("*/diffusers_*/*"))}


def test_a_repeated_run_makes_no_fake_again_and_counts_them_reused(photo_folder, pipeline, tmp_path):
    first = run(photo_folder, pipeline, tmp_path / "out")
    assert first["generators"]["diffusers"].endswith(": 6 fakes made, 0 reused from an earlier run")
    assert (first["made"], first["reused"], first["items"]) == (3 + 6, 0, 3 + 6)
    times = {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "fake").rglob("*.png")}
    manifest = (tmp_path / "out" / "manifest.csv").read_bytes()
    again = run(photo_folder, pipeline, tmp_path / "out")
    assert again["generators"]["diffusers"].endswith(": 0 fakes made, 6 reused from an earlier run")
    assert (again["made"], again["reused"], again["items"]) == (0, 3 + 6, 3 + 6)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "fake").rglob("*.png")} == times
    assert (tmp_path / "out" / "manifest.csv").read_bytes() == manifest
    assert again["psnr_db"] == first["psnr_db"] and again["by_group"] == first["by_group"]


def test_a_killed_run_goes_on_with_the_fakes_it_had_not_made(photo_folder, pipeline, tmp_path, monkeypatch):
    whole = run(photo_folder, pipeline, tmp_path / "whole")
    made_whole = tmp_path / "whole" / "manifest.csv"
    real = diffusers_set.generate_fakes

    def killed_after_two(*args, **kwargs):
        for count, fake in enumerate(real(*args, **kwargs)):
            if count == 2:
                raise KeyboardInterrupt  # as a run killed while making its third fake
            yield fake

    monkeypatch.setattr(diffusers_set, "generate_fakes", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        run(photo_folder, pipeline, tmp_path / "out")
    kept = {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "fake").rglob("*.png")}
    assert len(kept) == 2
    monkeypatch.setattr(diffusers_set, "generate_fakes", real)
    resumed = run(photo_folder, pipeline, tmp_path / "out")
    assert resumed["generators"]["diffusers"].endswith(": 4 fakes made, 2 reused from an earlier run")
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # the killed run's fakes were kept
    assert _fakes(tmp_path / "out") == _fakes(tmp_path / "whole")  # the same set as one run makes
    listed = (tmp_path / "out" / "manifest.csv").read_text().replace(str(tmp_path / "out"), "")
    assert listed == made_whole.read_text().replace(str(tmp_path / "whole"), "")
    assert resumed["by_group"] == whole["by_group"] and resumed["psnr_db"] == whole["psnr_db"]
