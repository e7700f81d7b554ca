import json

import numpy as np
import pytest

from evaluation import image_metrics
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
