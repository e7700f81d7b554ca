"""train.py's closing summary shows the held-out figures of every kind of detector, n/a where undefined."""

from __future__ import annotations

from pathlib import Path

from evaluation.summary import run_summary as summary


def test_an_image_detectors_summary_shows_its_test_figures_and_na_for_undefined_ones():
    text = summary({"detector": "npr", "val": {"auroc": 0.9411}, "auroc": 0.991, "tpr": float("nan")}, Path("run"))
    assert "val auroc=0.9411" in text and "test auroc=0.9910  tpr=n/a" in text


def test_a_pair_detectors_summary_shows_its_held_out_pair_figures():
    metrics = {
        "detector": "dup_sift",
        "threshold": 0.35,
        "test": {"threshold": 0.35, "pair_auroc": 0.99, "pair_f1": 0.95},
        "val": {"pair_auroc": 1.0},
    }
    text = summary(metrics, Path("run"))
    assert "test threshold=0.3500  pair_auroc=0.9900  pair_f1=0.9500" in text
    assert "val auroc=1.0000" in text  # its validation pairs' (it was n/a)


def test_a_learned_pair_detectors_summary_shows_its_pair_figures_measured_at_full_size():
    metrics = {
        "detector": "pairnet",
        "auroc": 0.97,
        "threshold": 0.41,
        "duplication": {"pair_auroc": 0.96, "pair_f1": 0.88, "pair_mcc": 0.8, "set_f1": 0.7},
    }
    text = summary(metrics, Path("run"))
    assert "test auroc=0.9700  threshold=0.4100" in text
    assert "pair_auroc=0.9600  pair_f1=0.8800  pair_mcc=0.8000" in text and "set_f1" not in text
