"""benchmarks/jpeg_splicing.py: the bundled photographs split in two by name, each forgery kept in the
three final formats with its one mask, genuine crops in every JPEG history, and a summary per format."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import benchmarks.jpeg_splicing as benchmark
from benchmarks.jpeg_splicing import FINAL_FORMATS, GENUINE_FORMATS, make_images, photo_split, score, summarize
from detectors.registry import create_detector
from synthesis.embedded import bundled_photo_paths


def test_photos_split_by_name_into_two_non_empty_halves():
    names = [path.name for path in bundled_photo_paths()]
    splits = [photo_split(name) for name in names]
    assert set(splits) == {"val", "test"} and splits == [photo_split(name) for name in names]
    assert photo_split("motorcycle_left.png") == photo_split("motorcycle_right.png")  # one stereo scene


def test_each_splice_comes_in_every_final_format_with_one_mask_and_genuine_crops_in_every_history():
    images = make_images("test", side=128, per_photo=len(GENUINE_FORMATS))
    genuine = [item for item in images if item["mask"] is None]
    forged = [item for item in images if item["mask"] is not None]
    assert {item["format"] for item in genuine} == set(GENUINE_FORMATS)
    assert forged and len(forged) % len(FINAL_FORMATS) == 0
    for start in range(0, len(forged), len(FINAL_FORMATS)):
        group = forged[start : start + len(FINAL_FORMATS)]
        assert [item["format"] for item in group] == list(FINAL_FORMATS)
        assert all(np.array_equal(item["mask"], group[0]["mask"]) for item in group) and group[0]["mask"].any()
        assert not np.array_equal(group[0]["image"], group[1]["image"])  # saved again as JPEG 95
    assert all(item["image"].dtype == np.uint8 and item["image"].ndim == 3 for item in images)


def test_the_summary_reports_each_final_format_against_every_genuine_image():
    rows = [
        {"format": "png", "forged": True, "f1": 0.8, "image_logit": 3.0},
        {"format": "jpeg95", "forged": True, "f1": 0.0, "image_logit": -10.0},
        {"format": "jpeg90", "forged": True, "f1": 0.2, "image_logit": 0.5},
        *(
            {"format": f, "forged": False, "marked": 0.01 * i, "image_logit": -1.0 - i}
            for i, f in enumerate(GENUINE_FORMATS)
        ),
    ]
    summary = summarize(rows)
    assert summary["png"]["pixel_f1"] == 0.8 and summary["png"]["image_auroc"] == 1.0
    assert summary["jpeg95"]["image_auroc"] == 0.0 and summary["genuine_images"] == len(GENUINE_FORMATS)
    assert summary["genuine_marked"]["jpeg75"] == 0.01


def test_jpeg_grid_scored_by_the_benchmark_finds_the_regions_kept_lossless_and_marks_no_genuine_crop(one_thread):
    """Per image, pixel F1 at probability 0.5 (the toolkit's pixel metrics) and the genuine share
    marked; a final save at JPEG 90 wipes the donor's grid."""
    images = make_images("test", side=256, per_photo=6)
    rows = score("jpeg_grid", [], images)
    first = next(i for i, item in enumerate(images) if item["mask"] is not None)
    with torch.no_grad():
        logit = create_detector("jpeg_grid")(torch.from_numpy(images[first]["image"]).permute(2, 0, 1)[None] / 255.0)
    marked, truth = logit["mask_logit"][0, 0].numpy() > 0, images[first]["mask"]
    assert rows[first]["f1"] == pytest.approx(2 * (marked & truth).sum() / (marked.sum() + truth.sum()), abs=1e-3)
    summary = summarize(rows)
    assert summary["png"]["pixel_f1"] > 0.3 and summary["png"]["image_auroc"] > 0.9
    assert summary["jpeg90"]["pixel_f1"] < 0.05
    assert max(summary["genuine_marked"].values()) < 0.01


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--override", "jpeg_gird:peak=0.2"], "DETECTOR one of jpeg_grid jpeg_ghost"),  # was ignored
        (["--override", "jpeg_grid:peek=0.2"], "--override for jpeg_grid: Could not override"),
        (["--side", "10"], "--side must be at least 64"),
        (["--detectors", "nope"], "unknown detector(s) nope"),
    ],
)
def test_a_mistyped_run_is_refused_in_one_line_before_any_image_is_made(arguments, message, monkeypatch, capsys):
    monkeypatch.setattr(benchmark, "make_images", lambda *_: pytest.fail("images made for a refused run"))
    with pytest.raises(SystemExit) as refused:
        benchmark.main(arguments)
    assert refused.value.code == 2 and message in capsys.readouterr().err
