"""Verdicts per review: max / mean / noisy_or of the images' scores, written beside the image rows,
with review-level metrics when labels are known, and the same file after a resumed run."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from datamodules.records import Record
from infer import infer
from inference.reviews import review_ids, review_rows, score_reviews
from tests.helpers import compose_config, write_images

RESULTS = [
    {"path": "a/1.png", "score": 0.2, "status": "ok"},
    {"path": "b/1.png", "score": 0.5, "status": "ok"},
    {"path": "a/2.png", "score": 0.9, "status": "ok"},
    {"path": "b/2.png", "score": 0.5, "status": "ok"},
    {"path": "b/3.png", "score": None, "status": "error"},
    {"path": "c/1.png", "score": 0.1, "status": "ok"},
]
IDS = {"a/1.png": "A", "a/2.png": "A", "b/1.png": "B", "b/2.png": "B", "b/3.png": "B", "c/1.png": ""}


@pytest.mark.parametrize(
    "method, expected",
    [
        ("max", {"A": 0.9, "B": 0.5}),
        ("mean", {"A": 0.55, "B": 0.5}),
        ("noisy_or", {"A": 1 - 0.8 * 0.1, "B": 1 - 0.5 * 0.5}),
    ],
)
def test_review_scores_from_a_hand_made_table(method, expected):
    rows = review_rows(
        RESULTS,
        IDS,
        method,
        threshold=0.6,
        labels={"a/1.png": 0, "a/2.png": 1, "b/1.png": 0, "b/2.png": 0, "c/1.png": 0},
    )
    by_id = {r["review"]: r for r in rows}
    assert [r["review"] for r in rows] == ["A", "B", "<no review> c/1.png"]  # order of first appearance
    for review, score in expected.items():
        assert by_id[review]["score"] == pytest.approx(score)
        assert by_id[review]["label"] == int(score >= 0.6)
    assert by_id["A"]["n_images"] == 2 and by_id["B"]["n_images"] == 2  # the unreadable b/3 does not count
    assert by_id["A"]["most_suspicious"] == "a/2.png" and by_id["A"]["true_label"] == 1
    assert by_id["B"]["true_label"] == 0 and by_id["<no review> c/1.png"]["n_images"] == 1


CATEGORY_CUTS = {"a/1.png": 0.1, "a/2.png": 0.95, "b/1.png": 0.6, "b/2.png": 0.6, "c/1.png": 0.05}


def test_a_review_of_images_with_thresholds_of_their_own_is_decided_as_its_images_are(caplog):
    """Calibrated by category: review A's photo (0.2 over its 0.1) is flagged though its chart (0.9
    under its 0.95) has the higher score; B's images share one threshold, and c's own is 0.05."""
    rows = {r["review"]: r for r in review_rows(RESULTS, IDS, "max", 0.6, own_threshold=CATEGORY_CUTS.get)}
    assert (rows["A"]["label"], rows["A"]["score"], rows["A"]["threshold"]) == (1, 0.2, 0.1)
    assert rows["A"]["most_suspicious"] == "a/1.png"
    assert (rows["B"]["label"], rows["B"]["threshold"]) == (0, 0.6)
    assert (rows["<no review> c/1.png"]["label"], rows["<no review> c/1.png"]["threshold"]) == (1, 0.05)
    mean = {r["review"]: r for r in review_rows(RESULTS, IDS, "mean", 0.6, own_threshold=CATEGORY_CUTS.get)}
    assert (mean["A"]["label"], mean["A"]["threshold"]) == (0, 0.6)  # 0.55: at the global threshold, said
    assert "1 review(s) hold images of categories with thresholds of their own: mean" in caplog.text


def labelled_reviews(n: int = 40) -> tuple[list[Record], list[dict]]:
    """Reviews of a photo (own threshold 0.2) and a chart (own threshold 0.9), random scores."""
    rng = np.random.default_rng(3)
    records, results = [], []
    for i in range(n):
        for kind in ("photo", "chart"):
            path = f"r{i}/{kind}.png"
            records.append(Record(path, label=int(rng.random() < 0.3), category=kind, review=f"r{i}"))
            results.append({"path": path, "score": float(rng.random()), "status": "ok"})
    return records, results


@pytest.mark.parametrize("per_category", [True, False])
def test_review_metrics_can_be_recomputed_from_the_written_reviews(tmp_path, monkeypatch, per_category):
    """The review-level metrics are those of the `decision_score` column: a review's score read against
    the threshold it was decided at (score - threshold + global threshold), which is the score itself
    where that is the global threshold; the report's histogram axis names it."""
    from evaluation import image_metrics, plots

    axes, save = {}, plots._save

    def keep(fig, path):  # each figure's first axes, by file name
        axes[Path(path).name] = fig.axes[0]
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    records, results = labelled_reviews()
    own = {r.path: {"photo": 0.2, "chart": 0.9}[r.category] for r in records}.get if per_category else None
    output = tmp_path / "scores.csv"
    done = score_reviews(output, records, results, "review", "max", 0.6, tmp_path, "npr", own_threshold=own)
    rows = list(csv.DictReader(open(output.with_suffix(".reviews.csv"))))
    decision = np.array([float(r["decision_score"]) for r in rows])
    score, cut = np.array([float(r["score"]) for r in rows]), np.array([float(r["threshold"]) for r in rows])
    np.testing.assert_allclose(decision, np.where(cut == 0.6, score, score - cut + 0.6))
    assert [int(d >= 0.6) for d in decision] == [int(r["label"]) for r in rows]
    recomputed = image_metrics([int(r["true_label"]) for r in rows], decision, threshold=0.6)
    for key in ("auroc", "tpr", "tnr", "tpr@fpr=0.05"):
        assert done["metrics"][key] == pytest.approx(recomputed[key]), key
    xlabel = axes["score_histogram.png"].get_xlabel()
    report = (tmp_path / "scores_reviews_report" / "report.md").read_text()
    if per_category:
        assert (cut != 0.6).any() and xlabel.startswith("decision_score") and "decision_score" in report
    else:  # nothing changes for a model without per-category thresholds: the written score is the one scored
        assert decision.tolist() == score.tolist() and xlabel == "score (probability of fake)"
        assert "decision_score" not in report


def test_review_ids_from_parent_folders_fields_and_other_manifest_columns(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("path,review,case_number\nx/1.png,r1,c7\ny/2.png,,c7\n")
    records = [Record(str(tmp_path / "x/1.png"), review="r1"), Record(str(tmp_path / "y/2.png"))]
    assert review_ids(records, "parent", manifest) == {r.path: str(tmp_path / d) for r, d in zip(records, "xy")}
    assert list(review_ids(records, "review", manifest).values()) == ["r1", ""]
    assert list(review_ids(records, "case_number", manifest).values()) == ["c7", "c7"]
    with pytest.raises(ValueError, match="no such column"):
        review_ids(records, "listing", manifest)


@pytest.mark.slow
@pytest.mark.ci  # in CI's slow phase: keeps the default run under 5 minutes
def test_infer_writes_reviews_and_their_metrics_and_a_resume_rewrites_the_same_file(tiny_model, tmp_path):
    paths = write_images(tmp_path / "in", [(30, 30 + i) for i in range(12)])
    manifest = tmp_path / "in" / "manifest.csv"
    with manifest.open("w", newline="") as handle:
        csv.writer(handle).writerows(
            [["path", "label", "review"]]
            + [[p.name, int(i % 4 == 3), f"listing-{i // 3}"] for i, p in enumerate(paths)]
        )
    overrides = [
        f"model={tiny_model['onnx']}",
        f"input={manifest}",
        "progress=false",
        "batch_size=4",
        "group_by=review",
        "review_aggregation=noisy_or",
    ]
    result = infer(compose_config("infer", [*overrides, f"output={tmp_path / 'scores.csv'}"]))
    reviews = list(csv.DictReader(open(tmp_path / "scores.reviews.csv")))
    assert [r["review"] for r in reviews] == ["listing-0", "listing-1", "listing-2", "listing-3"]
    assert all(r["n_images"] == "3" for r in reviews)
    metrics = json.loads((tmp_path / "scores.reviews.metrics.json").read_text())
    assert metrics["n_pos"] == 3 and metrics["n_neg"] == 1 and metrics["aggregation"] == "noisy_or"
    assert result["reviews"]["metrics"] == metrics
    assert (tmp_path / "scores_reviews_report" / "report.md").is_file()

    first = (tmp_path / "scores.reviews.csv").read_bytes()
    lines = (tmp_path / "scores.csv").read_text().splitlines(keepends=True)
    (tmp_path / "scores.csv").write_text("".join(lines[:5]) + lines[5][:12])  # interrupted mid-row
    infer(compose_config("infer", [*overrides, f"output={tmp_path / 'scores.csv'}", "resume=true"]))
    assert (tmp_path / "scores.reviews.csv").read_bytes() == first


def test_the_reports_groups_are_those_whose_verdicts_it_shows(tiny_model, tmp_path):
    """group_by=parent: each row's group on the page, and the group filter, are its folder, as the
    page's review verdicts are (the rows showed the manifest's review column, empty here)."""
    for folder in ("case-a", "case-b"):
        write_images(tmp_path / "in" / folder, [(30, 31), (32, 30)])
    infer(
        compose_config(
            "infer",
            [f"model={tiny_model['onnx']}", f"input={tmp_path / 'in'}", f"output={tmp_path / 'scores.csv'}"]
            + ["progress=false", "group_by=parent", "report=html"],
        )
    )
    page = (tmp_path / "scores_report.html").read_text()
    folders = [str(tmp_path / "in" / folder) for folder in ("case-a", "case-b")]
    assert sorted(re.findall(r'<td class="group">([^<]*)</td>', page)) == sorted(folders * 2)
    assert re.findall(r'<select id="f-group"><option value="">any</option>(.*?)</select>', page) == [
        "".join(f'<option value="{folder}">{folder}</option>' for folder in folders)
    ]
    assert "<th>folder</th>" in page  # the column says what it holds


def test_without_group_by_the_report_shows_the_inputs_review_ids_named_so_and_no_group_column_without_them(
    tiny_model, tmp_path
):
    """Not asked to group, the page's rows show the manifest's `review` ids under a `review` column
    (no verdicts are computed for them); a folder with no such ids gets no column, nor a group filter."""
    paths = write_images(tmp_path / "in", [(30, 31), (32, 30), (31, 33)])
    manifest = tmp_path / "in" / "manifest.csv"
    manifest.write_text("path,review\n" + "".join(f"{p.name},listing-{i % 2}\n" for i, p in enumerate(paths)))
    common = [f"model={tiny_model['onnx']}", "progress=false", "report=html"]
    infer(compose_config("infer", [*common, f"input={manifest}", f"output={tmp_path / 'listed.csv'}"]))
    listed = (tmp_path / "listed_report.html").read_text()
    assert "<th>review</th>" in listed and "<th>group</th>" not in listed
    cells = sorted(re.findall(r'<td class="group">([^<]*)</td>', listed))
    assert cells == ["listing-0", "listing-0", "listing-1"] and 'id="f-group"' in listed
    write_images(tmp_path / "plain", [(30, 31), (32, 30)])
    infer(compose_config("infer", [*common, f"input={tmp_path / 'plain'}", f"output={tmp_path / 'plain.csv'}"]))
    plain = (tmp_path / "plain_report.html").read_text()
    assert "<th>group</th>" not in plain and "<th>review</th>" not in plain
    assert 'class="group"' not in plain and 'id="f-group"' not in plain
