import numpy as np
import pandas as pd
import pytest

from evaluation import image_metrics
from evaluation.records import as_columns, by_category, by_group


def table():
    rng = np.random.default_rng(11)
    n = 120
    y = rng.integers(0, 2, n)
    return {
        "label": y,
        "score": rng.random(n) * 0.7 + 0.3 * y,
        "group": np.where(y == 1, rng.choice(["sd", "gan", "edit"], n), "real"),
        "category": rng.choice(["shoes", "food"], n),
    }


def test_by_group_shared_negatives_match_manual_subsets():
    t = table()
    got = by_group(t, "group", threshold=0.4)
    assert set(got) == {"sd", "gan", "edit"}  # the genuine-only "real" group is not a generator
    rows = (t["group"] == "gan") | (t["label"] == 0)
    assert got["gan"] == image_metrics(t["label"][rows], t["score"][rows], threshold=0.4)


def test_by_category_uses_own_rows_and_any_column():
    t = table()
    got = by_category(t)
    rows = t["category"] == "food"
    assert got["food"] == image_metrics(t["label"][rows], t["score"][rows])
    assert by_group(t, "category", shared_negatives=False) == got


@pytest.mark.parametrize("kind", ["dict", "rows", "frame"])
def test_records_in_any_tabular_shape(kind):
    t = table()
    if kind == "rows":
        records = [dict(zip(t, vals)) for vals in zip(*t.values())]
    elif kind == "frame":
        records = pd.DataFrame(t)
    else:
        records = t
    cols = as_columns(records)
    assert set(cols) == set(t)
    np.testing.assert_allclose(cols["score"].astype(float), t["score"])
    assert by_category(records) == by_category(t)


def test_missing_group_values_group_together():
    got = by_group(
        [
            {"label": 1, "score": 0.9, "group": None},
            {"label": 1, "score": 0.2, "group": float("nan")},
            {"label": 0, "score": 0.1, "group": "x"},
            {"label": 0, "score": 0.6, "group": "x"},
        ],
        "group",
    )
    assert list(got) == ["(none)"] and got["(none)"]["n_pos"] == 2 and got["(none)"]["n_neg"] == 2


def test_unknown_column_names_available_ones():
    with pytest.raises(KeyError, match="available"):
        by_group(table(), "generator")


def test_a_column_that_names_no_group_gives_no_breakdown_and_no_category_under_target():
    from evaluation.summary import evaluate_records

    rows = [{"label": 0, "score": 0.9, "category": "", "group": ""}] * 3 + [{"label": 1, "score": 0.8, "category": ""}]
    result = evaluate_records(rows, threshold=0.5, n_resamples=0, target_tnr=0.99)
    assert result["groups"] == {} and "genuine_tnr_below_target" not in result["metrics"]


def test_breakdowns_of_infer_results_score_the_true_label_not_the_decision():
    t = table()
    decision = (t["score"] >= 0.5).astype(int)
    results = {**t, "label": decision, "true_label": t["label"], "status": np.full(len(decision), "ok")}
    truth = {k: v for k, v in t.items()}
    assert by_group(results, "group") == by_group(truth, "group")
    assert by_category(results) == by_category(truth)
    assert by_group(results, "group")["gan"]["auroc"] < 1.0


def test_breakdowns_of_infer_results_without_truth_are_refused():
    t = table()
    results = {**t, "status": np.full(len(t["label"]), "ok")}
    with pytest.raises(ValueError, match="true_label"):
        by_group(results, "group")
