"""What the report's figures say agrees with metrics.json: the marked operating point is the one
the decisions were made at, and a figure that cannot be drawn says why instead of showing NaN."""

import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from evaluation import plots
from evaluation.summary import report_records


@pytest.fixture
def drawn(monkeypatch):
    """Each figure written, by file name, kept to read its legends."""
    figures = {}
    save = plots._save

    def keep(fig, path):
        figures[Path(path).name] = fig
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return figures


def legend_texts(fig) -> list[str]:
    return [text.get_text() for ax in fig.axes if ax.get_legend() for text in ax.get_legend().get_texts()]


def two_category_rows() -> list[dict]:
    rng = np.random.default_rng(1)
    rows = []
    for category in ("photo", "chart"):
        for label in (0, 1):
            for score in rng.random(60) * 0.6 + 0.35 * label:
                rows.append({"path": f"{len(rows)}.png", "label": label, "score": score, "category": category})
    return rows


def test_roc_marks_the_operating_point_of_the_per_category_decisions(tmp_path, drawn):
    report = report_records(
        tmp_path, two_category_rows(), threshold=0.5, category_thresholds={"photo": 0.8}, n_resamples=0
    )
    fpr, tpr = 1 - report.metrics["tnr"], report.metrics["tpr"]
    roc = legend_texts(drawn["roc.png"])
    assert f"per-category thresholds: FPR {fpr:.3g}, TPR {tpr:.3g}" in roc
    assert not [text for text in roc if text.startswith("threshold ")]  # the global point alone is not what was decided
    histogram = legend_texts(drawn["score_histogram.png"])
    assert [text for text in histogram if text.startswith("global threshold 0.5")]


def test_roc_marks_the_threshold_when_no_category_has_its_own(tmp_path, drawn):
    report = report_records(tmp_path, two_category_rows(), threshold=0.5, n_resamples=0)
    fpr, tpr = 1 - report.metrics["tnr"], report.metrics["tpr"]
    assert f"threshold 0.5: FPR {fpr:.3g}, TPR {tpr:.3g}" in legend_texts(drawn["roc.png"])
    assert "threshold 0.5" in legend_texts(drawn["score_histogram.png"])


@pytest.mark.parametrize("label", [0, 1])
def test_one_class_report_says_what_it_cannot_show(tmp_path, drawn, label):
    rows = [
        {"path": f"{i}.png", "label": label, "score": i / 20, "group": "real" if label == 0 else "sd"}
        for i in range(20)
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report_records(tmp_path, rows, threshold=0.5, n_resamples=0)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]  # numpy's "Mean of empty slice"
    roc = drawn["roc.png"]
    assert not [text for text in legend_texts(roc) if "nan" in text.lower()]
    notes = [text.get_text() for ax in roc.axes for text in ax.texts]
    assert notes and all("both genuine and fake" in note for note in notes)
    md = (tmp_path / "report.md").read_text()
    lines = md.splitlines()
    for i, line in enumerate(lines):  # every table header is followed by its rule and at least one row
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            assert i + 2 < len(lines) and lines[i + 2].startswith("| "), f"empty table under {line!r}"
    if label == 0:
        assert "### by group" in md and "no group here holds a fake" in md


def test_contact_sheet_caption_of_a_long_name_fits_its_panel(tmp_path, drawn):
    image, prob = np.zeros((32, 32, 3), np.uint8), np.zeros((32, 32), np.float32)
    name = "scan_" + "x" * 170 + "_page12.png  pixel F1 0.42"
    plots.plot_contact_sheet(tmp_path / "long.png", [(image, None, prob, name)])
    plots.plot_contact_sheet(tmp_path / "short.png", [(image, None, prob, "a.png")])
    caption = drawn["long.png"].axes[0].get_title()
    assert len(caption) <= 40 and caption.startswith("scan_") and caption.endswith("12.png  pixel F1 0.42")
    assert "…" in caption  # the cut is visible, not silent
    with Image.open(tmp_path / "long.png") as long, Image.open(tmp_path / "short.png") as short:
        assert long.size == short.size  # the caption no longer widens the figure
    plots.plot_contact_sheet(tmp_path / "fits.png", [(image, None, prob, "b" * 30)])
    assert drawn["fits.png"].axes[0].get_title() == "b" * 30  # a name that fits is shown whole
