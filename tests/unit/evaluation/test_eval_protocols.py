import json
import math

import numpy as np
import pytest
from sklearn import metrics as skm

from evaluation import UndefinedMetricWarning, evaluate_records, image_metrics
from evaluation.protocols import (
    aggregate_reviews,
    balanced_robustness_index,
    block_localization,
    exact_match,
    forged_regions,
    fraudbench_protocol,
    grid_partition,
    mfcbench_protocol,
    multilabel_set_metrics,
    review_metrics,
    set_f1,
    subset_partial_credit,
)

# --- FraudBench -------------------------------------------------------------------------------

FRAUDBENCH_ROWS = [
    # category A: g1 fakes (1 of 2 caught), g2 fake (caught), genuines (1 of 4 flagged)
    ("A", "g1", 1, 0.9),
    ("A", "g1", 1, 0.2),
    ("A", "g2", 1, 0.8),
    ("A", "", 0, 0.1),
    ("A", "", 0, 0.6),
    ("A", "", 0, 0.3),
    ("A", "", 0, 0.4),
    # category B: only g1 fakes (2 of 4 caught), genuines (1 of 2 flagged)
    ("B", "g1", 1, 0.7),
    ("B", "g1", 1, 0.95),
    ("B", "g1", 1, 0.1),
    ("B", "g1", 1, 0.3),
    ("B", "", 0, 0.2),
    ("B", "", 0, 0.55),
]


def fraudbench_records():
    return [dict(zip(("category", "group", "label", "score"), row)) for row in FRAUDBENCH_ROWS]


def test_fraudbench_hand_computed():
    got = fraudbench_protocol(fraudbench_records(), threshold=0.5)
    assert got["by_category"]["A"]["tpr"] == pytest.approx(2 / 3)
    assert got["by_category"]["A"]["balanced_accuracy"] == pytest.approx((2 / 3 + 3 / 4) / 2)
    assert got["by_category"]["B"]["f1"] == pytest.approx(4 / 7)
    # Per-generator TPR is macro over the categories where the generator occurs (g2: only A).
    assert got["tpr_by_generator"] == pytest.approx({"g1": 0.5, "g2": 1.0})
    assert got["tnr"] == pytest.approx((0.75 + 0.5) / 2)
    assert got["balanced_accuracy"] == pytest.approx(((2 / 3 + 0.75) / 2 + 0.5) / 2)
    assert got["f1"] == pytest.approx((2 / 3 + 4 / 7) / 2)
    # Confidence on correct predictions: score for caught fakes, 1 - score for kept genuines.
    assert got["confidence_correct_by_generator"] == pytest.approx({"g1": 0.85, "g2": 0.8})
    assert got["confidence_correct_genuine"] == pytest.approx((0.9 + 0.7 + 0.6 + 0.8) / 4)
    # Threshold-free metrics are pooled over all categories and generators.
    y = [r[2] for r in FRAUDBENCH_ROWS]
    s = [r[3] for r in FRAUDBENCH_ROWS]
    assert got["pooled"] == image_metrics(y, s)


def test_fraudbench_without_categories_is_one_category():
    rows = [{k: v for k, v in r.items() if k != "category"} for r in fraudbench_records()]
    got = fraudbench_protocol(rows)
    y = np.array([r["label"] for r in rows])
    pred = np.array([r["score"] for r in rows]) >= 0.5
    assert got["n_categories"] == 1
    assert got["balanced_accuracy"] == pytest.approx(skm.balanced_accuracy_score(y, pred))
    assert got["f1"] == pytest.approx(skm.f1_score(y, pred))


def test_fraudbench_explicit_confidence_column():
    rows = fraudbench_records()
    for r in rows:
        r["conf"] = 0.5
    got = fraudbench_protocol(rows, confidence="conf")
    assert got["confidence_correct_genuine"] == 0.5


# --- MFC-Bench --------------------------------------------------------------------------------


def test_mfcbench_matches_sklearn_and_bias():
    rng = np.random.default_rng(3)
    n = 200
    y = rng.integers(0, 2, n)
    s = rng.random(n) * 0.8 + 0.2 * y
    types = np.where(y == 1, rng.choice(["face_swap", "photoshop"], n), "")
    got = mfcbench_protocol({"label": y, "score": s, "group": types}, threshold=0.5)
    pred = (s >= 0.5).astype(int)
    assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, pred))
    assert got["macro_f1"] == pytest.approx(skm.f1_score(y, pred, average="macro"))
    tn, fp, fn, tp = skm.confusion_matrix(y, pred).ravel()
    assert got["fpr"] == pytest.approx(fp / (fp + tn)) and got["fnr"] == pytest.approx(fn / (fn + tp))
    face = (types == "face_swap") | (y == 0)
    assert got["by_group"]["face_swap"]["macro_f1"] == pytest.approx(skm.f1_score(y[face], pred[face], average="macro"))
    assert set(got["by_group"]) == {"face_swap", "photoshop"}


def test_mfcbench_scores_each_type_on_its_own_real_images_where_they_name_it():
    """MFC-Bench Table 1 gives every manipulation subset real images of its own: their FPR is the type's."""
    y = np.array([1, 1, 0, 0, 1, 0, 0, 0])
    s = np.array([0.9, 0.2, 0.7, 0.1, 0.8, 0.1, 0.2, 0.3])
    types = np.array(["face_swap"] * 4 + ["photoshop"] * 4)
    got = mfcbench_protocol({"label": y, "score": s, "group": types})["by_group"]
    assert got["face_swap"]["fpr"] == 0.5 and got["photoshop"]["fpr"] == 0.0
    assert got["face_swap"]["n"] == 4 and got["photoshop"]["n"] == 4
    pooled = mfcbench_protocol({"label": y, "score": s, "group": types}, shared_negatives=True)["by_group"]
    assert pooled["face_swap"]["fpr"] == pooled["photoshop"]["fpr"] == pytest.approx(1 / 5)


def test_mfcbench_shares_genuine_images_whose_group_is_no_manipulation_type():
    """The toolkit's own manifests group genuine images as "genuine": every type is scored against them all."""
    y = np.array([1, 1, 1, 1, 0, 0, 0, 0])
    s = np.array([0.9, 0.2, 0.8, 0.7, 0.7, 0.1, 0.2, 0.3])
    types = np.array(["face_swap", "face_swap", "photoshop", "photoshop"] + ["genuine"] * 4)
    got = mfcbench_protocol({"label": y, "score": s, "group": types})["by_group"]
    assert set(got) == {"face_swap", "photoshop"}
    assert got["face_swap"]["fpr"] == got["photoshop"]["fpr"] == pytest.approx(1 / 4)
    assert got["face_swap"]["n"] == got["photoshop"]["n"] == 6
    unnamed = np.where(y == 1, types, "")
    mixed = np.array(["face_swap", "face_swap", "photoshop", "photoshop", "face_swap", "genuine", "", ""])
    for groups in (unnamed, mixed):  # one genuine row naming a type does not take the others out
        shared = mfcbench_protocol({"label": y, "score": s, "group": groups})["by_group"]
        assert shared["face_swap"]["fpr"] == pytest.approx(1 / 4) and shared["photoshop"]["n"] == 6


def test_mfcbench_always_yes_bias():
    got = mfcbench_protocol({"label": [0, 0, 1, 1], "score": [0.9, 0.8, 0.7, 0.6]})
    assert got["fpr"] == 1.0 and got["fnr"] == 0.0 and got["accuracy"] == 0.5
    # Macro-F1: fake-class F1 = 2*2/(4+2) = 2/3; genuine-class F1 = 0.
    assert got["macro_f1"] == pytest.approx(1 / 3)


# --- Review level -----------------------------------------------------------------------------


def test_review_aggregation_hand_computed():
    ids = ["r1", "r1", "r2", "r2", "r3", None]
    scores = [0.2, 0.9, 0.5, 0.5, 0.4, 0.3]
    labels = [0, 1, 0, 0, 0, 1]
    uniq, agg, y = aggregate_reviews(ids, scores, labels, "noisy_or")
    assert list(uniq) == ["<no review> row 5", "r1", "r2", "r3"]  # no id: a review of its own
    np.testing.assert_allclose(agg, [0.3, 1 - 0.8 * 0.1, 0.75, 0.4])
    assert y.tolist() == [True, True, False, False]
    assert aggregate_reviews(ids, scores, method="max")[1].tolist() == [0.3, 0.9, 0.5, 0.4]
    np.testing.assert_allclose(aggregate_reviews(ids, scores, method="mean")[1], [0.3, 0.55, 0.5, 0.4])
    got = review_metrics({"review": ids, "score": scores, "label": labels}, method="max")
    assert got["n_pos"] == 2 and got["n_neg"] == 2
    assert got == image_metrics([1, 1, 0, 0], [0.3, 0.9, 0.5, 0.4])


def test_review_aggregation_errors():
    with pytest.raises(ValueError, match="method"):
        aggregate_reviews(["a"], [0.1], method="median")
    with pytest.raises(ValueError, match="probabilities"):
        aggregate_reviews(["a"], [1.5], method="noisy_or")


# --- THEMIS -----------------------------------------------------------------------------------


def test_set_metrics_hand_computed():
    assert set_f1({"scale", "rotate"}, {"rotate"}) == pytest.approx(2 / 3)
    assert set_f1(set(), set()) == 1.0 and set_f1({"a"}, set()) == 0.0
    assert exact_match(["a", "b"], {"b", "a"}) == 1.0
    assert subset_partial_credit({"a"}, {"a", "b"}) == 0.5
    assert subset_partial_credit({"a", "c"}, {"a", "b"}) == 0.0  # a false positive forfeits credit
    assert subset_partial_credit(set(), {"a"}) == 0.0
    got = multilabel_set_metrics([{"a"}, {"a", "b"}, {"c"}], [{"a", "b"}, {"a", "b"}, {"a"}])
    assert got == pytest.approx({"set_f1": (2 / 3 + 1 + 0) / 3, "exact_match": 1 / 3, "spc": (0.5 + 1 + 0) / 3, "n": 3})


def test_multilabel_set_metrics_take_numpy_arrays_of_label_sets():
    predicted = np.array([[1, 2], [3, 4]])
    truth = np.array([[1, 2], [3, 5]])
    got = multilabel_set_metrics(predicted, truth)
    assert got == multilabel_set_metrics([{1, 2}, {3, 4}], [{1, 2}, {3, 5}])
    assert got["exact_match"] == 0.5
    with pytest.warns(UndefinedMetricWarning):
        assert multilabel_set_metrics(np.empty((0, 2)), np.empty((0, 2)))["n"] == 0


def test_block_localization_on_a_grid():
    part = grid_partition((40, 60), 2, 3)
    assert part[0, 0] == 1 and part[0, -1] == 3 and part[-1, 0] == 4 and part[-1, -1] == 6
    truth = np.zeros((40, 60), bool)
    truth[0:5, 25:30] = True  # a sliver of region 2
    truth[20:40, 20:40] = True  # all of region 5
    prob = np.zeros((40, 60), np.float32)
    prob[20:40, 20:60] = 0.9  # regions 5 and 6
    prob[0:20, 0:8] = 0.9  # 40 % of region 1: below the 50 % coverage rule
    got = block_localization(truth, prob, part)
    assert got["predicted"] == [5, 6] and got["true"] == [2, 5]
    assert got["iou"] == pytest.approx(1 / 3) and got["f1"] == 0.5 and got["exact_match"] == 0.0
    assert forged_regions(truth, part, min_coverage=0.5) == {5}
    # A half-size true mask is resized (nearest) to the partition's grid.
    assert forged_regions(truth[::2, ::2], part, 0.5) == {5}


# THEMIS Table 2: SMF Id avg., SMF Loc avg., DUP Id, TII Id, TII Loc, published BRI (lambda 0.25).
THEMIS_TABLE2 = {
    "GPT-5": ([53.50, 24.14, 33.32, 60.67, 27.44], 56.15),
    "OpenAI o4-mini-high": ([51.68, 20.00, 30.34, 66.33, 32.22], 52.34),
    "Qwen-VL-Max": ([51.07, 41.42, 23.33, 56.00, 15.36], 49.83),
    "Gemini 2.5 Flash": ([55.47, 47.52, 24.96, 36.33, 28.24], 44.70),
    "Doubao-Seed-1.6-thinking": ([48.80, 13.62, 20.22, 60.00, 31.71], 37.14),
    "Doubao-Seed-1.6-vision": ([36.72, 29.43, 45.13, 37.00, 30.43], 33.47),
    "Gemini 2.5 Pro": ([30.99, 46.82, 21.49, 44.67, 37.31], 31.97),
    "GLM-4.5V": ([47.39, 13.80, 21.84, 53.67, 22.69], 31.57),
    "Claude Sonnet 4.5": ([45.27, 26.68, 21.86, 35.67, 27.42], 29.96),
    "Qwen2.5-VL-72B": ([54.91, 47.46, 16.75, 61.33, 12.32], 47.16),
    "InternVL3.5-8B": ([52.13, 38.94, 33.28, 55.00, 4.78], 38.73),
    "Llama 4 Maverick": ([44.27, 22.06, 19.01, 54.00, 16.08], 34.78),
    "LLaVA-Interleave-7B": ([45.43, 31.08, 8.01, 50.00, 12.57], 23.59),
    "LLaVA-NeXT-34B": ([50.00, 43.32, 10.73, 41.33, 4.28], 18.40),
    "Qwen2.5-VL-32B": ([42.34, 10.76, 15.26, 58.33, 17.94], 18.22),
    "Gemma 3 27B": ([29.50, 29.01, 12.20, 31.67, 21.41], 9.59),
}


def test_bri_reproduces_themis_table2():
    got = balanced_robustness_index({m: r for m, (r, _) in THEMIS_TABLE2.items()}, lam=0.25)
    for model, (_, published) in THEMIS_TABLE2.items():
        assert 100 * got[model] == pytest.approx(published, abs=0.01), model
    assert 100 * got["GPT-5"] == pytest.approx(56.15, abs=0.01)
    assert 100 * got["Gemma 3 27B"] == pytest.approx(9.59, abs=0.01)
    assert 100 * got["Qwen-VL-Max"] == pytest.approx(49.83, abs=0.01)


@pytest.mark.parametrize(
    "lam,expected",
    [
        (0.10, {"GPT-5": 64.56, "Qwen-VL-Max": 57.31, "Gemma 3 27B": 17.37}),
        (0.40, {"GPT-5": 47.75, "Qwen-VL-Max": 42.35, "Gemma 3 27B": 1.81}),
    ],
)
def test_bri_lambda_sensitivity_table8(lam, expected):
    got = balanced_robustness_index({m: r for m, (r, _) in THEMIS_TABLE2.items()}, lam=lam)
    for model, published in expected.items():
        assert 100 * got[model] == pytest.approx(published, abs=0.01), model


def test_bri_undefined_cases_warn():
    with pytest.warns(UndefinedMetricWarning):
        got = balanced_robustness_index({"a": [1, 2], "b": [1, 3]})
    assert all(math.isnan(v) for v in got.values())
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(balanced_robustness_index({"a": [1, 2]})["a"])


def test_bri_refuses_models_scored_on_different_tasks_and_warns_of_a_missing_score():
    with pytest.raises(ValueError, match="one score per task for every model, got a: 2, b: 3"):
        balanced_robustness_index({"a": [0.1, 0.2], "b": [0.3, 0.4, 0.5]})
    with pytest.warns(UndefinedMetricWarning, match="model 'b' has no score \\(NaN\\) for task 1"):
        got = balanced_robustness_index({"a": [0.1, 0.2], "b": [0.3, float("nan")], "c": [0.5, 0.9]})
    assert all(math.isnan(v) for v in got.values())


def test_protocols_accept_csv_strings():
    # csv.DictReader hands every value back as a string.
    as_strings = [{k: str(v) for k, v in r.items()} for r in fraudbench_records()]
    same = json.dumps(fraudbench_protocol(as_strings), sort_keys=True)  # NaN-aware comparison
    assert same == json.dumps(fraudbench_protocol(fraudbench_records()), sort_keys=True)
    assert mfcbench_protocol(as_strings)["accuracy"] == mfcbench_protocol(fraudbench_records())["accuracy"]
    with pytest.raises(ValueError, match="numeric"):
        fraudbench_protocol([{"label": "yes", "score": "0.2", "group": "g"}])


def as_results_file(rows: list[dict], threshold: float = 0.5) -> list[dict]:
    """The rows as infer.py writes them: `label` is the decision, the truth is `true_label`."""
    return [
        {**{k: str(v) for k, v in r.items()}, "label": str(int(r["score"] >= threshold)), "true_label": str(r["label"])}
        | {"status": "ok", "error": ""}
        for r in rows
    ]


def test_infer_results_are_scored_against_their_true_label_not_the_decisions():
    records = fraudbench_records()
    results = as_results_file(records) + [
        {"path": "x.png", "score": "", "label": "", "true_label": "1", "status": "error"}
    ]
    y, s = np.array([r["label"] for r in records]), np.array([r["score"] for r in records])
    mfc = mfcbench_protocol(results)
    assert mfc["accuracy"] == pytest.approx(skm.accuracy_score(y, s >= 0.5)) and mfc["accuracy"] < 1
    assert mfc["fpr"] == pytest.approx(np.mean(s[y == 0] >= 0.5)) and mfc["fpr"] > 0
    same = json.dumps(fraudbench_protocol(results), sort_keys=True)
    assert same == json.dumps(fraudbench_protocol(records), sort_keys=True)
    assert evaluate_records(results, n_resamples=0)["metrics"]["tnr"] == pytest.approx(np.mean(s[y == 0] < 0.5))
    reviews = [{**r, "review": f"r{i // 2}"} for i, r in enumerate(records)]
    assert review_metrics(as_results_file(reviews)) == review_metrics(reviews)


def test_review_metrics_leave_out_failed_reads_and_unlabelled_images_as_the_other_protocols_do():
    reviews = [{**r, "review": f"r{i // 2}"} for i, r in enumerate(fraudbench_records())]
    failed = {"path": "x.png", "review": "r0", "score": "", "label": "", "true_label": "1", "status": "error"}
    unlabelled = {"path": "y.png", "review": "r1", "score": "0.99", "label": "1", "true_label": "", "status": "ok"}
    results = as_results_file(reviews) + [failed, unlabelled]
    assert review_metrics(results) == review_metrics(reviews)
    counted = review_metrics(results, method="mean")
    assert counted["n_pos"] + counted["n_neg"] == len({r["review"] for r in reviews})


def test_infer_results_of_an_unlabelled_input_are_refused_not_scored_against_their_decisions():
    results = [{k: v for k, v in r.items() if k != "true_label"} for r in as_results_file(fraudbench_records())]
    for protocol in (mfcbench_protocol, fraudbench_protocol, review_metrics, evaluate_records):
        with pytest.raises(ValueError, match="decisions, not the truth"):
            protocol([{**r, "review": "r"} for r in results])
