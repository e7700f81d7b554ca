"""Speed next to the authors' code: our side measured, theirs read from a JSON dump, ratios per image."""

from __future__ import annotations

import json

import pytest

from benchmarks.speed_vs_authors import compare, load_images, main, per_image

OURS = {
    "images": 4,
    "size": 512,
    "threads": 2,
    "raw_forward_seconds": 2.0,
    "raw_onnx_seconds": 1.5,
    "infer_ckpt_seconds": 3.0,
    "infer_onnx_seconds": 2.5,
}


def test_ratios_are_ours_over_theirs_per_image():
    authors = {"images": 4, "size": 512, "threads": 2, "script_seconds": 24.0, "forward_seconds": [4.0, 5.0, 3.0, 4.0]}
    ratios = compare(OURS, authors)
    assert ratios["authors_script_seconds"] == 6.0 and ratios["authors_forward_seconds"] == 4.0  # the median
    assert ratios["infer_ckpt_vs_authors_script"] == 0.5 and ratios["infer_onnx_vs_authors_script"] == pytest.approx(
        2.5 / 6, abs=1e-3
    )
    assert ratios["raw_forward_vs_authors_forward"] == 0.5 and ratios["raw_onnx_vs_authors_forward"] == 0.375


def test_a_run_under_other_conditions_is_flagged(capsys):
    compare(OURS, {"images": 4, "size": 512, "threads": 8, "script_seconds": 4.0, "forward_seconds": [1.0]})
    assert "threads=8" in capsys.readouterr().err


def test_per_image_is_the_median_after_a_warm_up():
    calls = []
    assert per_image(calls.append, [1, 2, 3]) >= 0 and calls == [1, 1, 2, 3]


def test_an_empty_folder_is_one_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no images"):
        load_images(tmp_path)


@pytest.mark.slow
def test_our_side_runs_end_to_end_on_a_tiny_detector(tmp_path):
    authors = tmp_path / "authors.json"
    authors.write_text(
        json.dumps({"images": 2, "size": 64, "threads": 1, "script_seconds": 20.0, "forward_seconds": [1.0, 1.0]})
    )
    out = tmp_path / "speed.json"
    main(
        [
            "--detector",
            "trufor_tiny",
            "--images-dir",
            str(tmp_path / "images"),
            "--count",
            "2",
            "--size",
            "64",
            "--threads",
            "1",
            "--authors",
            str(authors),
            "--workdir",
            str(tmp_path / "work"),
            "--output",
            str(out),
        ]
    )
    result = json.loads(out.read_text())
    assert len(load_images(tmp_path / "images")) == 2
    for key in ("raw_forward_seconds", "raw_onnx_seconds", "infer_ckpt_seconds", "infer_onnx_seconds"):
        assert result["ours"][key] > 0, key
    # start-up and model load are in the infer.py figures, not in the raw forward
    assert result["ours"]["infer_ckpt_seconds"] > result["ours"]["raw_forward_seconds"]
    assert result["infer_ckpt_vs_authors_script"] == pytest.approx(result["ours"]["infer_ckpt_seconds"] / 10, abs=2e-3)
