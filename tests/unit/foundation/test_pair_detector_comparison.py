"""The side-by-side table of two pair detectors' train.py runs."""

import json

import pytest

from benchmarks.pair_detector_comparison import markdown, pair_metrics


def protocol(tpr_local: float, fpr_furniture: float, **extra) -> dict:
    return {
        "pair_n_pos": 13,
        "pair_n_neg": 84,
        "operations": {"set_f1": 0.5, "exact_match": 0.25, "spc": 0.4, "n": 13},
        "pair_auroc": 0.9,
        "pair_tpr@fpr=0.01": 0.3,
        "pair_tpr@fpr=0.05": 0.6,
        "pair_tpr": 0.7,
        "pair_tnr": 0.95,
        "pixel_f1": 0.8,
        "by_kind": {
            "local": {"n": 13, "label": 1, "tpr": tpr_local},
            "figure_furniture": {"n": 84, "label": 0, "fpr": fpr_furniture},
        },
        **extra,
    }


def test_both_layouts_of_metrics_json_are_read(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"detector": "dup_sift", "test": protocol(1.0, 0.0)}))
    (tmp_path / "b.json").write_text(json.dumps({"detector": "pairnet_tiny", "duplication": protocol(0.5, 0.1)}))
    assert pair_metrics(tmp_path / "a.json")[0] == "dup_sift"
    assert pair_metrics(tmp_path / "b.json")[1]["by_kind"]["local"]["tpr"] == 0.5
    (tmp_path / "c.json").write_text(json.dumps({"detector": "npr", "test": {"auroc": 0.9}}))
    with pytest.raises(ValueError, match="no pair protocol"):
        pair_metrics(tmp_path / "c.json")


def test_each_kind_shows_its_rate_per_detector():
    heads = {"operations": {"set_f1": 0.6, "exact_match": 0.125}, "pixel_f1": 0.9}
    text = markdown(
        [("dup_sift", protocol(1.0, 0.036)), ("pairnet_tiny", protocol(0.154, 0.0, given_duplicated=heads))]
    )
    assert "| local (duplicated: TPR) | 13 | 1.000 | 0.154 |" in text
    assert "| figure_furniture (not duplicated: FPR) | 84 | 0.036 | 0.000 |" in text
    assert "| set-F1 / EM, operation head alone (`given_duplicated`) | - | 0.6000 / 0.1250 |" in text


def test_runs_on_other_pairs_are_said_apart_and_a_bad_file_is_refused_in_one_line(tmp_path, capsys):
    from benchmarks.pair_detector_comparison import main

    other = protocol(1.0, 0.0)
    other["by_kind"]["local"]["n"] = 9
    for name, metrics in (("seed0", protocol(1.0, 0.0)), ("seed1", other)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps({"detector": "dup_sift", "test": metrics}))
    assert main([str(tmp_path / "seed0" / "metrics.json"), str(tmp_path / "seed1" / "metrics.json")]) == 1
    printed = capsys.readouterr().out
    assert "| held-out pairs | dup_sift (seed0) | dup_sift (seed1) |" in printed
    assert "| local (duplicated: TPR) | 13 / 9 |" in printed and "not measured on the same held-out pairs" in printed
    (tmp_path / "broken.json").write_text("{not json")
    for path in (tmp_path / "broken.json", tmp_path / "missing.json", tmp_path):
        with pytest.raises(SystemExit):
            main([str(path)])
        assert "not a readable metrics.json" in capsys.readouterr().err
