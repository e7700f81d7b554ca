"""train.py's closing summary shows the held-out figures of every kind of detector, n/a where undefined."""

from __future__ import annotations

from pathlib import Path

from train import summary


def test_an_image_detectors_summary_shows_its_test_figures_and_na_for_undefined_ones():
    text = summary({"detector": "npr", "val": {"auroc": 0.9411}, "auroc": 0.991, "tpr": float("nan")}, Path("run"))
    assert "val auroc=0.9411" in text and "test auroc=0.9910  tpr=n/a" in text


def test_a_pair_detectors_summary_shows_its_held_out_pair_figures():
    metrics = {
        "detector": "dup_sift",
        "threshold": 0.35,
        "test": {"threshold": 0.35, "pair_auroc": 0.99, "pair_f1": 0.95},
    }
    assert "test threshold=0.3500  pair_auroc=0.9900  pair_f1=0.9500" in summary(metrics, Path("run"))
