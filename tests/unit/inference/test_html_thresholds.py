"""What a reader needs to check each decision on a page: the score to as many decimals as tell it
from its threshold, the threshold a row was decided at where it is not the page's, and how far a
calibrate.py threshold can be trusted."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.io import write_image
from inference.html_parts import score_against
from inference.html_report import threshold_note, write_html_report
from tests.unit.inference.test_html_report import header, open_page


def test_a_score_that_reads_as_its_threshold_to_4_decimals_gets_the_decimals_that_tell_them_apart():
    assert score_against(0.594006, 0.594007, 0.594007) == "0.594006 (threshold 0.594007)"
    assert score_against(0.9317, 0.5, 0.5) == "0.9317"
    assert score_against(0.5, 0.5, 0.5) == "0.500000000 (threshold 0.500000000)"  # at it: flagged, as said
    assert score_against(None, 0.5, 0.5) == "" and score_against(float("nan"), 0.5, 0.5) == ""


def test_a_row_decided_at_its_categorys_threshold_shows_that_threshold():
    assert score_against(0.183, 0.15, 0.8909) == "0.1830 (threshold 0.1500)"


@pytest.mark.parametrize("javascript", [True, False])
def test_a_page_shows_each_score_beside_the_threshold_that_decided_it_with_scripts_or_without(
    tmp_path, browser, javascript
):
    write_image(tmp_path / "a.png", np.full((20, 20, 3), 90, np.uint8))
    rows = [
        {"path": str(tmp_path / "a.png"), "score": 0.594006, "status": "ok"},
        {"path": str(tmp_path / "a.png"), "score": 0.183, "status": "ok", "threshold": 0.15},
        {"path": str(tmp_path / "a.png"), "score": 0.91, "status": "ok"},
    ]
    page_path = write_html_report(tmp_path / "report.html", rows, header(threshold=0.594007))
    context, page, seen = open_page(browser, page_path, javascript=javascript)
    cells = page.locator("#rows-table tbody tr")
    shown = {
        cells.nth(i).locator("td.score").inner_text(): cells.nth(i).locator("td.decision").inner_text()
        for i in range(3)
    }
    assert shown == {
        "0.9100": "flagged",
        "0.594006 (threshold 0.594007)": "not flagged",
        "0.1830 (threshold 0.1500)": "flagged",
    }
    assert seen["errors"] == []
    context.close()


def test_the_threshold_line_of_a_calibrate_py_model_gives_its_clopper_pearson_interval():
    record = {
        "threshold": 0.89,
        "target_fpr": 0.1,
        "confidence": 0.95,
        "n_genuine": 134,
        "false_positives": 13,
        "tnr_interval": [0.84, 0.95],
        "input": "own/",
    }
    note = threshold_note(0.89, record, chosen_by_user=False)
    assert "false-positive rate there 13/134, 95% Clopper-Pearson interval [0.050, 0.160]" in note


@pytest.mark.parametrize("calibration", [None, {"target_fpr": 0.05, "n_genuine": 300}])
def test_a_report_calls_a_threshold_calibrated_only_when_the_model_records_a_calibration(tmp_path, calibration):
    from types import SimpleNamespace

    from inference.run_report import ReportRequest, labelled_report

    runtime = SimpleNamespace(
        name="noise_level", threshold=0.5, calibration=calibration, category_thresholds={}, target_fpr=0.05
    )
    rng = np.random.default_rng(0)
    truth = [
        {"path": f"{i}.png", "label": i % 2, "score": float(rng.random()), "category": "photo" if i < 10 else "chart"}
        for i in range(20)
    ]
    metrics, _ = labelled_report(ReportRequest(tmp_path / "scores.csv", "in/", 0.5), runtime, truth, None)
    report = (tmp_path / "scores_report" / "report.md").read_text()
    assert ("Calibrated threshold" in report) == (calibration is not None)
    assert ("was never calibrated" in report) == (calibration is None)
    assert ("target_tnr" in metrics) == (calibration is not None)  # no target to fall short of


def test_the_figures_against_the_truth_carry_their_bootstrap_intervals():
    from inference.html_parts import metrics_html

    metrics = {"auroc": 0.9, "tpr": 0.8, "intervals": {"auroc": [0.85, 0.95]}, "interval_confidence": 0.95}
    page = metrics_html(metrics, [])
    assert "Against the known truth (95% bootstrap intervals)" in page
    assert "<th>auroc</th><td>0.9000 [0.8500, 0.9500]</td>" in page and "<th>tpr</th><td>0.8000</td>" in page
    assert "interval_confidence" not in page
