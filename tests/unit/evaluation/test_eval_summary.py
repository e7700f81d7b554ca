import json

import numpy as np
import pytest

from evaluation import image_metrics
from evaluation.calibration import below_target_in, below_target_sentence
from evaluation.image import ImageScoreAccumulator
from evaluation.records import by_group
from evaluation.report import to_jsonable
from evaluation.summary import evaluate_records, report_records
from tests.helpers import TensorLike


def rows():
    rng = np.random.default_rng(4)
    out = []
    for i in range(120):
        y = int(i % 3 == 0)
        out.append(
            {
                "path": f"{i}.png",
                "label": y,
                "score": float(rng.random() * 0.6 + 0.4 * y),
                "group": "sd" if y else "",
                "category": "ab"[i % 2],
            }
        )
    # infer.py rows: a failed read (empty score) and an unlabelled image must be left out.
    out.append({"path": "bad.png", "label": 1, "score": "", "group": "sd", "category": "a"})
    out.append({"path": "new.png", "label": None, "score": 0.9, "group": "", "category": "a"})
    return out


def test_evaluate_records_skips_unusable_rows():
    result = evaluate_records(rows(), threshold=0.5, n_resamples=30)
    good = rows()[:120]
    y = [r["label"] for r in good]
    s = [r["score"] for r in good]
    assert result["n_used"] == 120
    assert result["metrics"] == image_metrics(y, s)
    assert result["groups"]["by_group"] == by_group(good, "group")
    assert set(result["groups"]["by_category"]) == {"a", "b"}
    lo, hi = result["intervals"]["auroc"]
    assert lo <= result["metrics"]["auroc"] <= hi


def test_report_records_writes_everything(tmp_path):
    report = report_records(
        tmp_path, rows(), threshold=0.5, calibrated_threshold=0.7, n_resamples=20, extra={"detector": "d"}
    )
    data = json.loads(report.files["metrics"].read_text())
    assert data["n_pos"] + data["n_neg"] == 120 and data["calibrated_threshold"] == 0.7
    assert "by_category" in data and (tmp_path / "roc.png").exists()
    assert data["detector"] == "d"
    # the metrics handed back are the ones written (NaN would be null in the file; none here)
    assert to_jsonable(report.metrics) == data


def test_image_accumulator_equals_one_shot():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 100)
    s = rng.random(100)
    acc = ImageScoreAccumulator()
    acc.update(TensorLike(y[:40]), TensorLike(s[:40]))
    acc.update(y[40:], s[40:])
    assert acc.compute(threshold=0.3) == image_metrics(y, s, threshold=0.3)
    acc.reset()
    with pytest.warns(UserWarning):
        assert acc.compute()["n_pos"] == 0


def sourced_rows():
    """Genuine crops of three sources and fakes; at 0.5 source `flower` has three crops over the
    threshold (two photo, one phone_photo), `cell` one, `coins` none; one fake is over it too."""
    scores = {
        "flower": [("photo", 0.9), ("photo", 0.7), ("phone_photo", 0.6), ("photo", 0.1)],
        "cell": [("fluorescence", 0.55), ("fluorescence", 0.2)],
        "coins": [("photo", 0.3), ("photo", 0.49)],
    }
    out = [
        {"path": f"{source}_{i}.png", "label": 0, "score": score, "category": category, "source": source}
        for source, crops in scores.items()
        for i, (category, score) in enumerate(crops)
    ]
    out.append({"path": "fake.png", "label": 1, "score": 0.95, "category": "photo", "source": "coins"})
    return out


def test_flagged_genuine_images_are_counted_by_the_source_they_were_cut_from():
    result = evaluate_records(sourced_rows(), threshold=0.5, n_resamples=0)
    assert result["flagged_by_source"] == {
        "flower": {"flagged": 3, "genuine": 4, "categories": {"phone_photo": 1, "photo": 2}},
        "cell": {"flagged": 1, "genuine": 2, "categories": {"fluorescence": 1}},
    }
    assert list(result["flagged_by_source"]) == ["flower", "cell"]  # most flagged first


def test_flagged_by_source_follows_each_categorys_own_threshold():
    result = evaluate_records(
        sourced_rows(), threshold=0.5, n_resamples=0, category_thresholds={"photo": 0.8, "fluorescence": 0.1}
    )
    assert result["flagged_by_source"] == {
        "cell": {"flagged": 2, "genuine": 2, "categories": {"fluorescence": 2}},
        "flower": {"flagged": 2, "genuine": 4, "categories": {"phone_photo": 1, "photo": 1}},
    }


def test_report_names_the_sources_of_the_flagged_genuine_images(tmp_path):
    report = report_records(tmp_path, sourced_rows(), threshold=0.5, n_resamples=0)
    text = report.files["report"].read_text()
    assert "### flagged genuine images by source" in text
    assert "4 genuine images at or over the threshold, from 2 sources" in text
    assert "| flower | 3 | 4 | phone_photo 1, photo 2 |" in text
    assert text.index("flagged genuine images by source") < text.index("## Figures")
    written = json.loads(report.files["metrics"].read_text())
    assert written["flagged_genuine_by_source"]["cell"]["flagged"] == 1


@pytest.mark.parametrize("source", [None, ""], ids=["no source column", "every source empty"])
def test_without_sources_there_is_no_breakdown_by_source(tmp_path, source):
    records = rows() if source is None else [{**row, "source": source} for row in rows()]
    report = report_records(tmp_path, records, threshold=0.5, n_resamples=0)
    assert "flagged_genuine_by_source" not in report.metrics
    assert "by source" not in report.files["report"].read_text()


def test_a_run_without_flagged_genuine_images_says_so(tmp_path):
    calm = [row for row in sourced_rows() if row["label"] == 1 or row["score"] < 0.5]
    report = report_records(tmp_path, calm, threshold=0.5, n_resamples=0)
    assert report.metrics["flagged_genuine_by_source"] == {}
    assert "No genuine image at or over its threshold." in report.files["report"].read_text()


def test_the_sentence_naming_categories_under_target_names_the_sources_of_their_flags_too(tmp_path):
    report = report_records(tmp_path, sourced_rows(), threshold=0.5, n_resamples=0, target_tnr=0.99)
    first_lines = report.files["report"].read_text().splitlines()[:4]
    assert any(
        line.startswith("**Genuine TNR below the target 0.99 in categories:")
        and line.endswith("(flagged genuine images by source: flower 3, cell 1).**")
        for line in first_lines
    ), first_lines


def test_the_sentence_shows_three_sources_and_counts_the_rest():
    flagged = {name: {"flagged": 5 - i, "genuine": 9, "categories": {"photo": 5 - i}} for i, name in enumerate("abcde")}
    sentence = below_target_sentence({"photo": 0.9}, 0.99, flagged)
    assert sentence.endswith("(flagged genuine images by source: a 5, b 4, c 3, and 2 more)")
    assert below_target_sentence({}, 0.99, flagged) == ""


def test_train_and_infer_read_the_sentence_from_the_metrics_they_wrote(tmp_path):
    report = report_records(tmp_path, sourced_rows(), threshold=0.5, n_resamples=0, target_tnr=0.99)
    written = json.loads(report.files["metrics"].read_text())
    sentence = below_target_in(written)
    assert sentence.startswith("genuine TNR below the target 0.99 in categories:")
    assert sentence.endswith("(flagged genuine images by source: flower 3, cell 1)")
    assert below_target_in({"tnr": 1.0}) == ""


def test_the_sentence_names_only_the_sources_of_the_categories_under_target():
    flagged = {
        "cat": {"flagged": 4, "genuine": 9, "categories": {"photo": 4}},  # photo meets the target
        "text": {"flagged": 4, "genuine": 9, "categories": {"doc": 4}},
        "receipt": {"flagged": 3, "genuine": 9, "categories": {"doc": 1, "photo": 2}},
    }
    sentence = below_target_sentence({"doc": 0.8889}, 0.99, flagged)
    assert sentence.endswith("doc 0.8889 (flagged genuine images by source: text 4, receipt 1)")


def test_the_sources_named_are_ordered_by_their_flags_in_the_categories_under_target():
    flagged = {  # ordered by all their flags, as flagged_genuine_by_source gives them
        "a": {"flagged": 6, "genuine": 9, "categories": {"photo": 5, "doc": 1}},
        "b": {"flagged": 3, "genuine": 9, "categories": {"doc": 3}},
    }
    assert below_target_sentence({"doc": 0.9}, 0.99, flagged).endswith("(flagged genuine images by source: b 3, a 1)")


def test_names_from_the_data_are_text_in_report_md_not_markup_or_table_cells(tmp_path):
    """A category, source or title holding HTML (which Markdown viewers render) or a "|" (a table
    cell's end) is shown as written: backslash-escaped, not as HTML entities."""
    hostile = {"photo": "<img src=x onerror=alert(1)>", "fluorescence": "fig|panel"}
    records = [{**row, "category": hostile.get(row["category"], row["category"])} for row in sourced_rows()]
    report = report_records(
        tmp_path, records, threshold=0.5, n_resamples=0, target_tnr=0.99, title="npr on <b>uploads</b>"
    )
    text = report.files["report"].read_text()
    assert "<img" not in text.replace("\\<img", "") and "<b>" not in text
    assert "# npr on \\<b\\>uploads\\</b\\>" in text and "\\<img src=x onerror=alert(1)\\>" in text
    row = next(line for line in text.splitlines() if line.startswith("| fig\\|panel |"))
    assert len(row.replace("\\|", "").split("|")) == len(text.splitlines()[text.splitlines().index(row) - 1].split("|"))


def test_a_metric_undefined_in_one_category_is_said_of_that_category():
    from evaluation import UndefinedMetricWarning
    from evaluation.records import by_category

    records = [
        {"label": 0, "score": 0.2, "category": "chart"},
        {"label": 0, "score": 0.4, "category": "chart"},
        {"label": 0, "score": 0.1, "category": "gel"},
        {"label": 1, "score": 0.9, "category": "gel"},
    ]
    with pytest.warns(UndefinedMetricWarning) as said:
        by_category(records)
    messages = [str(w.message) for w in said]
    assert any(m.startswith("category chart: ") and "needs both classes" in m for m in messages)
    assert not any(m.startswith("category gel") for m in messages)
