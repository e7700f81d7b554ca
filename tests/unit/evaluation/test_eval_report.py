import json

import numpy as np
import pytest
from PIL import Image

from evaluation import calibrate_threshold, image_metrics, pixel_metrics
from evaluation.bootstrap import bootstrap_image_ci
from evaluation.records import by_category, by_group
from evaluation.report import to_jsonable, write_metrics_json, write_report


def strict_load(path):
    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture
def evaluation_inputs():
    rng = np.random.default_rng(0)
    n = 400
    y = rng.integers(0, 2, n)
    s = np.clip(rng.random(n) * 0.7 + 0.3 * y, 0, 1)
    table = {
        "label": y,
        "score": s,
        "group": np.where(y == 1, rng.choice(["sd", "gan"], n), "real"),
        "category": rng.choice(["a", "b"], n),
    }
    return y, s, table


def test_full_report(tmp_path, evaluation_inputs):
    y, s, table = evaluation_inputs
    metrics = image_metrics(y, s)
    masks = [np.pad(np.ones((8, 8), bool), 4), None]
    probs = [np.pad(np.full((8, 8), 0.8, np.float32), 4), np.zeros((16, 16), np.float32)]
    metrics.update(pixel_metrics(masks, probs))
    calibrated = calibrate_threshold(s[y == 0], 0.05)
    robustness = {
        "clean": metrics,
        "curves": {
            "jpeg": {
                "levels": [95.0, 30.0],
                "metrics": {"auroc": [0.9, 0.7], "tpr@fpr=0.05": [0.5, float("nan")], "balanced_accuracy": [0.8, 0.6]},
            }
        },
    }
    image = np.zeros((16, 16, 3), np.uint8)
    written = write_report(
        tmp_path / "run",
        metrics,
        labels=y,
        scores=s,
        threshold=0.5,
        calibrated_threshold=calibrated,
        intervals=bootstrap_image_ci(y, s, n_resamples=50),
        groups={"by_group": by_group(table), "by_category": by_category(table)},
        robustness=robustness,
        contact_sheet=[(image, masks[0], probs[0], "fake 1"), (image, None, probs[1])],
    )
    assert set(written) == {"roc", "histogram", "robustness_plot", "contact_sheet", "metrics", "report"}
    data = strict_load(written["metrics"])
    for key in ["auroc", "pauroc@0.1", "tpr@fpr=0.001", "n_pos", "pixel_f1", "n_masks"]:
        assert key in data
    assert data["auroc"] == pytest.approx(metrics["auroc"])
    assert data["pixel_auroc"] == 1.0 and data["pixel_fpr_genuine"] == 0.0
    assert set(data["by_group"]) == {"sd", "gan"} and set(data["by_category"]) == {"a", "b"}
    assert data["calibrated_threshold"] == calibrated and data["threshold"] == 0.5
    assert data["robustness"]["curves"]["jpeg"]["metrics"]["tpr@fpr=0.05"][1] is None
    lo, hi = data["intervals"]["auroc"]
    assert lo <= data["auroc"] <= hi
    md = written["report"].read_text()
    assert "| auroc |" in md and "95% bootstrap interval" in md and "oracle" in md
    assert "### by group" in md and "| sd |" in md and "### jpeg" in md and "![ROC curve](roc.png)" in md
    for name in ("roc", "histogram", "robustness_plot", "contact_sheet"):
        with Image.open(written[name]) as im:
            assert im.format == "PNG" and im.size[0] > 100
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_minimal_report_without_figures(tmp_path):
    with pytest.warns(UserWarning):
        metrics = image_metrics([1, 1], [0.2, 0.9])
    written = write_report(tmp_path, metrics)
    assert set(written) == {"metrics", "report"}
    data = strict_load(written["metrics"])
    assert data["auroc"] is None and data["tpr"] == 0.5
    assert "| auroc | – |" in written["report"].read_text()


def test_metrics_json_is_atomic_and_overwrites(tmp_path):
    path = tmp_path / "m.json"
    write_metrics_json(path, {"a": np.float32(0.5), "b": np.int64(3), "c": float("inf"), "d": {1, 2}})
    write_metrics_json(path, {"a": 1.0})
    assert strict_load(path) == {"a": 1.0}
    assert to_jsonable({"x": (np.nan, np.bool_(True))}) == {"x": [None, True]}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_package_import_is_light_and_respects_dependency_rule():
    import subprocess
    import sys

    code = (
        "import sys, evaluation; from evaluation import write_report, robustness_curves;"
        "heavy = [m for m in ('detectors', 'datamodules', 'torch', 'matplotlib.pyplot') if m in sys.modules];"
        "print(heavy)"
    )
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo)
    assert out.stdout.strip() == "[]"


def test_without_matplotlib_the_report_leaves_its_figures_out_saying_so_in_one_line(
    tmp_path, evaluation_inputs, monkeypatch, caplog
):
    import sys

    import evaluation

    y, s, _ = evaluation_inputs
    for name in ["matplotlib", *(m for m in sys.modules if m.startswith("matplotlib."))]:
        monkeypatch.setitem(sys.modules, name, None)  # import fails as when it is not installed
    monkeypatch.delitem(sys.modules, "evaluation.plots", raising=False)
    monkeypatch.delattr(evaluation, "plots", raising=False)
    with caplog.at_level("WARNING"):
        written = write_report(tmp_path, image_metrics(y, s), labels=y, scores=s, threshold=0.5)
    assert sorted(written) == ["metrics", "report"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json", "report.md"]
    assert "## Figures" not in (tmp_path / "report.md").read_text()
    assert strict_load(tmp_path / "metrics.json")["auroc"] == pytest.approx(image_metrics(y, s)["auroc"])
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [
        "the report's figures are left out: matplotlib is not installed (pip install matplotlib); "
        "metrics.json and report.md are written without them"
    ]
