"""The localization quality benchmark: named variants of a detector config, and its tables."""

from __future__ import annotations

import pytest

from benchmarks.localization_quality import (
    ROBUSTNESS_MARKERS,
    markdown,
    parse_variant,
    robustness_markdown,
    run_name,
    write_readme,
)


def test_a_variant_is_a_config_name_with_overrides_of_its_net():
    assert parse_variant("seg_tiny") == ("seg_tiny", [])
    assert parse_variant("trufor_tiny:noise_input=rgb") == ("trufor_tiny", ["detector.net.noise_input=rgb"])
    assert parse_variant("trufor_tiny:encoder.embed_dims=[8,16,24,32],noise_input=rgb") == (
        "trufor_tiny",
        ["detector.net.encoder.embed_dims=[8,16,24,32]", "detector.net.noise_input=rgb"],
    )
    assert run_name("trufor_tiny:noise_input=rgb") == "trufor_tiny-noise_input-rgb"  # Hydra reads `=`


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_such_detector", "unknown detector 'no_such_detector'"),
        ("trufor_tiny:noise_input", "bad variant"),
        ("trufor_tiny:=rgb", "bad variant"),
    ],
)
def test_a_wrong_variant_is_one_clear_error(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_variant(spec)


def curves(f1: list[float], auroc: list[float]) -> dict:
    """A sweep's answer: clean values first, then JPEG 95 and 30, then rescale 0.5, 1 and 1.5."""
    return {
        "clean": {"pixel_f1": f1[0], "pixel_auroc": auroc[0], "n_masks": 7},
        "curves": {
            "jpeg": {"levels": [95.0, 30.0], "metrics": {"pixel_f1": f1[1:3], "pixel_auroc": auroc[1:3]}},
            "rescale": {
                "levels": [0.5, 1.0, 1.5],
                "metrics": {"pixel_f1": [f1[3], f1[0], f1[4]], "pixel_auroc": [auroc[3], auroc[0], auroc[4]]},
            },
        },
    }


def test_tables_carry_the_variant_label_the_budget_and_each_strength(tmp_path):
    results = [
        {
            "detector": "trufor_tiny:noise_input=rgb",
            "budget": {"seconds": 300.0, "steps": 120, "epochs": 8, "load": [2.5, 3.0]},
            "operations": {
                "splicing": {
                    "pixel_f1": 0.5,
                    "pixel_f1_best": 0.6,
                    "pixel_iou": 0.4,
                    "pixel_auroc": 0.7,
                    "image_auroc": 0.6,
                    "pixel_fpr_genuine": 0.1,
                    "whole_image_f1": 0.3,
                    "n_masks": 6,
                }
            },
            "robustness": curves([0.5, 0.45, 0.2, 0.3, 0.4], [0.7, 0.68, 0.55, 0.6, 0.65]),
        }
    ]
    quality = markdown(results)
    assert "| trufor_tiny:noise_input=rgb | splicing | 0.500 |" in quality
    assert "120 steps / 8 epochs in 5.0 min (load 2.5 -> 3.0)" in quality
    robust = robustness_markdown(results)
    assert "| pixel_f1: detector | clean | JPEG 95 | JPEG 30 | x0.5 | x1.5 |" in robust  # identity shown once
    assert "| trufor_tiny:noise_input=rgb | 0.500 | 0.450 | 0.200 | 0.300 | 0.400 |" in robust
    assert "| trufor_tiny:noise_input=rgb | 0.700 | 0.680 | 0.550 | 0.600 | 0.650 |" in robust
    assert "7 manipulated" in robust
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{ROBUSTNESS_MARKERS[0]}\nstale table\n{ROBUSTNESS_MARKERS[1]}\nafter\n")
    write_readme(readme, robust, ROBUSTNESS_MARKERS)
    text = readme.read_text()
    assert "stale table" not in text and robust in text and text.startswith("before") and text.endswith("after\n")


def test_a_finished_run_is_reused_only_for_the_data_and_schedule_it_was_trained_on(tmp_path, monkeypatch):
    """A learned run trained on one generated set is not scored on another (another seed's test
    photos were in its training split): other data, epochs or minutes train it again."""
    import subprocess

    import torch

    from benchmarks import localization_quality

    trained = []

    def fake_train_py(command, **_):
        trained.append(next(arg for arg in command if arg.startswith("data.root=")))
        run = tmp_path / "run" / "checkpoints"
        run.mkdir(parents=True, exist_ok=True)
        for name in ("last.ckpt", "best.ckpt"):
            torch.save({"global_step": 4, "epoch": 1}, run / name)

    monkeypatch.setattr(subprocess, "run", fake_train_py)
    train = localization_quality.train
    train("seg_tiny", tmp_path / "data_seed0", tmp_path / "run", 2, 0.5, reuse=True)
    train("seg_tiny", tmp_path / "data_seed0", tmp_path / "run", 2, 0.5, reuse=True)  # the same: reused
    assert len(trained) == 1
    train("seg_tiny", tmp_path / "data_seed1", tmp_path / "run", 2, 0.5, reuse=True)
    train("seg_tiny", tmp_path / "data_seed1", tmp_path / "run", 3, 0.5, reuse=True)
    assert trained == [f"data.root={tmp_path / f'data_seed{seed}'}" for seed in (0, 1, 1)]
