"""FraudBench's detector table from one command, on a hand-made tree with known counts."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from detectors.module import DetectorModule
from detectors.registry import net_config
from exporting.onnx_export import export_onnx
from inference.writer import ResultWriter
from tools.fraudbench_table import main

# category -> subset -> images with the score a detector gave them
TREE = {
    "Receipts": {
        "Negative/Review_001": {"a.png": 0.1, "b.png": 0.2},
        "Negative/Review_002": {"c.png": 0.6, "d.png": 0.95},
        "DeepFake/GenA/Review_001": {"a.png": 0.7},
        "DeepFake/GenA/Review_002": {"c.png": 0.4},
        "DeepFake/GenB/Review_001": {"a.png": 0.92},
        "DeepFake/GenB/Review_002": {"c.png": 0.8},
    },
    "Cars": {
        "Negative/Review_010": {"e.png": 0.3, "f.png": 0.55},
        "DeepFake/GenA/Review_010": {"e.png": 0.99, "f.png": 0.6},
    },
}
GENUINE = [0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95]  # FPR 0.1 -> threshold 0.9


def make_tree(root: Path) -> dict[str, float]:
    rng = np.random.default_rng(0)
    scores = {}
    for category, subsets in TREE.items():
        (root / category / "Positive").mkdir(parents=True, exist_ok=True)
        for subset, images in subsets.items():
            folder = root / category / subset
            folder.mkdir(parents=True, exist_ok=True)
            for name, score in images.items():
                Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(folder / name)
                scores[str(folder / name)] = score
    return scores


def write_scores(path: Path, scores: dict[str, float]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "score", "label", "status", "error"])
        writer.writeheader()
        for image, score in scores.items():
            writer.writerow({"path": image, "score": score, "label": int(score >= 0.5), "status": "ok", "error": ""})
    return path


def test_table_from_scores_has_the_hand_counted_figures_at_both_thresholds(tmp_path, caplog):
    data = write_scores(tmp_path / "scores.csv", make_tree(tmp_path / "tree"))
    genuine = write_scores(tmp_path / "genuine.csv", {f"/g/{i}.png": s for i, s in enumerate(GENUINE)})
    output = tmp_path / "out" / "table.md"
    main(
        [
            "--data",
            str(tmp_path / "tree"),
            "--scores",
            f"det={data}",
            "--genuine-scores",
            f"det={genuine}",
            "--target-fpr",
            "0.1",
            "--output",
            str(output),
        ]
    )
    table = json.loads(output.with_suffix(".json").read_text())
    assert table["generators"] == ["GenA", "GenB"]
    assert "det: its threshold is calibrated on 10 genuine images; a target FPR of 0.1 needs at least 29" in (
        caplog.text
    )
    fixed, calibrated = table["rows"]
    # at 0.5: Receipts TNR 2/4, GenA 1/2, GenB 2/2, BA (3/4 + 1/2) / 2, F1 6/9; Cars TNR 1/2, GenA 2/2, BA 3/4, F1 4/5
    assert fixed["threshold"] == 0.5 and fixed["threshold_kind"] == "fixed"
    assert fixed["tpr_by_generator"] == pytest.approx({"GenA": 0.75, "GenB": 1.0})
    assert fixed["tnr"] == pytest.approx(0.5)
    assert fixed["balanced_accuracy"] == pytest.approx((0.625 + 0.75) / 2)
    assert fixed["f1"] == pytest.approx((6 / 9 + 0.8) / 2)
    # calibrated on 10 genuine scores at FPR 0.1: between 0.85 and 0.95
    assert calibrated["threshold"] == pytest.approx(0.9) and calibrated["n_calibration_genuine"] == 10
    assert calibrated["tpr_by_generator"] == pytest.approx({"GenA": 0.25, "GenB": 0.5})
    assert calibrated["tnr"] == pytest.approx((0.75 + 1.0) / 2)
    assert calibrated["balanced_accuracy"] == pytest.approx((0.5 + 0.75) / 2)
    assert calibrated["f1"] == pytest.approx((1 / 3 + 2 / 3) / 2)
    markdown = output.read_text()
    assert "| det | 0.5 (fixed) | 0.750 | 1.000 | 0.500 |" in markdown
    assert "FPR <= 0.1 on 10 genuine" in markdown
    with output.with_suffix(".csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["threshold_kind"] for r in rows] == ["fixed", "calibrated"] and float(rows[1]["tpr_GenB"]) == 0.5


@pytest.mark.slow  # trains and scores a model (~15 s)
def test_table_scores_the_tree_with_a_model_and_calibrates_on_a_genuine_folder(tmp_path):
    make_tree(tmp_path / "tree")
    rng = np.random.default_rng(1)
    (tmp_path / "genuine").mkdir()
    for index in range(20):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp_path / "genuine" / f"{index}.png")
    torch.manual_seed(0)
    module = DetectorModule(net=net_config("cospy_progan_tiny"), name="cospy_progan_tiny")
    checkpoint = tmp_path / "cospy.ckpt"
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}, checkpoint)
    export_onnx(module.eval(), tmp_path / "cospy.onnx")
    output = tmp_path / "table.md"
    table = main(
        [
            "--data",
            str(tmp_path / "tree"),
            "--model",
            f"cospy={checkpoint}",
            "--model",
            f"cospy_onnx={tmp_path / 'cospy.onnx'}",
            "--genuine",
            str(tmp_path / "genuine"),
            "--target-fpr",
            "0.1",
            "--output",
            str(output),
            "--workers",
            "0",
            "--device",
            "cpu",
        ]
    )
    with (tmp_path / "table_scores" / "cospy_onnx.csv").open() as handle:
        onnx_scores = {row["path"]: float(row["score"]) for row in csv.DictReader(handle)}
    with (tmp_path / "table_scores" / "cospy.csv").open() as handle:
        scored = {row["path"]: float(row["score"]) for row in csv.DictReader(handle)}
    assert len(scored) == sum(len(images) for subsets in TREE.values() for images in subsets.values())
    gen_a = [s for path, s in scored.items() if "/GenA/" in path]
    assert max(abs(onnx_scores[p] - s) for p, s in scored.items()) <= 1e-4  # the torch-free path agrees
    assert [r["detector"] for r in table["rows"]] == ["cospy", "cospy", "cospy_onnx", "cospy_onnx"]
    fixed, calibrated = table["rows"][:2]
    per_category = [np.mean([s >= 0.5 for p, s in scored.items() if f"/{c}/DeepFake/GenA/" in p]) for c in TREE]
    assert len(gen_a) == 4 and fixed["tpr_by_generator"]["GenA"] == pytest.approx(np.mean(per_category))
    with (tmp_path / "table_scores" / "cospy_genuine.csv").open() as handle:
        genuine = np.array([float(row["score"]) for row in csv.DictReader(handle)])
    assert len(genuine) == 20 and np.mean(genuine >= calibrated["threshold"]) <= 0.1


def test_scores_without_genuine_scores_are_refused_when_calibration_is_asked(tmp_path):
    data = write_scores(tmp_path / "scores.csv", make_tree(tmp_path / "tree"))
    with pytest.raises(SystemExit, match="genuine-scores"):
        main(
            [
                "--data",
                str(tmp_path / "tree"),
                "--scores",
                f"det={data}",
                "--genuine",
                str(tmp_path / "tree"),
                "--output",
                str(tmp_path / "t.md"),
            ]
        )
    with pytest.raises(SystemExit, match="NAME=PATH"):
        main(["--data", str(tmp_path / "tree"), "--model", "no-name", "--output", str(tmp_path / "t.md")])


def test_scores_kept_for_a_name_are_made_again_when_the_name_points_at_another_model(tmp_path, monkeypatch):
    import tools.fraudbench_table as table
    from datamodules.records import Record

    def fake_scoring(runtime, records, writer, **_):
        writer.write([{"path": r.path, "score": runtime, "status": "ok"} for r in records if r.path not in writer.done])
        return {}

    monkeypatch.setattr(table, "load_runtime", lambda model, device: {"a": 0.1, "b": 0.9}[Path(model).stem])
    monkeypatch.setattr(table, "score_records", fake_scoring)
    (tmp_path / "a.ckpt").write_bytes(b"model a")
    (tmp_path / "b.ckpt").write_bytes(b"model b")
    records = [Record(path=f"{i}.png") for i in range(3)]
    output = tmp_path / "scores" / "npr.csv"
    first = table.score_to_file(str(tmp_path / "a.ckpt"), records, output, 1, "cpu", 0)
    again = table.score_to_file(str(tmp_path / "a.ckpt"), records, output, 1, "cpu", 0)  # resumed: kept
    other = table.score_to_file(str(tmp_path / "b.ckpt"), records, output, 1, "cpu", 0)
    assert [r["score"] for r in first] == [r["score"] for r in again] == [0.1] * 3
    assert [r["score"] for r in other] == [0.9] * 3


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--target-fpr", "1.5"], "--target-fpr must lie in (0, 1)"),  # a traceback after scoring every model
        (["--threshold", "7"], "--threshold in [0, 1]"),  # a table of TPR 0 everywhere
        ([], "fraudbench_table: input"),  # a missing --data: a LayoutError traceback
        (["--output", "t.csv"], "must end in .md, got t.csv"),  # the CSV table was written over the Markdown
    ],
)
def test_bad_settings_and_missing_data_are_one_line(arguments, message, tmp_path):
    base = ["--data", str(tmp_path / "nope"), "--model", f"m={tmp_path / 'm.ckpt'}", "--output", str(tmp_path / "t.md")]
    with pytest.raises(SystemExit, match=re.escape(message)):
        main([*base, *arguments])


@pytest.mark.parametrize("name", ["../../victim", "ours/v1", "/etc/x", ".."])
def test_a_detector_name_that_would_place_its_scores_outside_the_tables_folder_is_refused(name, tmp_path):
    """The name names the file its scores are kept in: `../../victim` replaced a file of the user's."""
    victim = tmp_path / "victim.csv"
    victim.write_text("keep")
    arguments = ["--data", str(tmp_path), "--model", f"{name}=m.ckpt", "--output", str(tmp_path / "a" / "b" / "t.md")]
    with pytest.raises(SystemExit, match="must be a plain name"):
        main(arguments)
    assert victim.read_text() == "keep" and not (tmp_path / "a").exists()


def test_a_rerun_scores_again_the_images_that_could_not_be_read_before(tmp_path, monkeypatch):
    import tools.fraudbench_table as table
    from datamodules.records import Record

    readable = {"0.png"}

    def scoring(runtime, records, writer, **_):
        todo = [r.path for r in records if r.path not in writer.done]
        writer.write(
            [
                {"path": p, "score": 0.3, "status": "ok"} if p in readable else {"path": p, "status": "error"}
                for p in todo
            ]
        )
        return {}

    monkeypatch.setattr(table, "load_runtime", lambda model, device: None)
    monkeypatch.setattr(table, "score_records", scoring)
    (tmp_path / "m.ckpt").write_bytes(b"model")
    records = [Record(path=f"{i}.png") for i in range(2)]
    output = tmp_path / "scores" / "m.csv"
    first = table.score_to_file(str(tmp_path / "m.ckpt"), records, output, 1, "cpu", 0)
    readable.add("1.png")  # repaired
    again = table.score_to_file(str(tmp_path / "m.ckpt"), records, output, 1, "cpu", 0)
    assert [r["status"] for r in first] == ["ok", "error"]
    assert sorted((r["path"], r["status"]) for r in again) == [("0.png", "ok"), ("1.png", "ok")]


def table_arguments(tmp_path: Path, *extra: str) -> list[str]:
    return ["--data", str(tmp_path / "tree"), "--output", str(tmp_path / "out" / "t.md"), *extra]


def test_results_written_with_relative_paths_match_the_tree_given_by_its_absolute_path(tmp_path, monkeypatch):
    scores = make_tree(tmp_path / "tree")
    monkeypatch.chdir(tmp_path)
    relative = write_scores(tmp_path / "rel.csv", {str(Path(p).relative_to(tmp_path)): s for p, s in scores.items()})
    table = main(table_arguments(tmp_path, "--scores", f"det={relative}"))
    assert table["rows"][0]["tpr_by_generator"] == pytest.approx({"GenA": 0.75, "GenB": 1.0})


def test_results_whose_paths_a_spreadsheet_would_run_match_the_tree_and_the_tables_csv_keeps_names_text(
    tmp_path, monkeypatch
):
    """infer.py writes `=tree/...` as `'=tree/...` (kept text in a spreadsheet); `--scores` reads it back."""
    scores = make_tree(tmp_path / "=tree")
    monkeypatch.chdir(tmp_path)
    with ResultWriter(tmp_path / "rel.csv", ("path", "score", "label", "status", "error")) as writer:
        writer.write([{"path": os.path.relpath(p), "score": s, "status": "ok"} for p, s in scores.items()])
    assert "\n'=tree/" in (tmp_path / "rel.csv").read_text()
    output = tmp_path / "out" / "t.md"
    table = main(["--data", "=tree", "--output", str(output), "--scores", f"@det={tmp_path / 'rel.csv'}"])
    assert table["rows"][0]["tpr_by_generator"] == pytest.approx({"GenA": 0.75, "GenB": 1.0})
    assert [row[0] for row in csv.reader(output.with_suffix(".csv").open(newline=""))] == ["detector", "'@det"]


def test_results_of_other_images_are_refused_in_one_line(tmp_path):
    make_tree(tmp_path / "tree")
    other = write_scores(tmp_path / "other.csv", {"/elsewhere/a.png": 0.4})
    with pytest.raises(SystemExit, match="det: none of the 12 images of --data has a score"):
        main(table_arguments(tmp_path, "--scores", f"det={other}"))


def test_genuine_scores_of_a_labelled_input_calibrate_on_its_genuine_rows_only(tmp_path, caplog):
    data = write_scores(tmp_path / "scores.csv", make_tree(tmp_path / "tree"))
    genuine = tmp_path / "genuine.csv"
    with genuine.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "score", "label", "status", "error", "true_label"])
        writer.writeheader()
        for i, score in enumerate(GENUINE):
            writer.writerow({"path": f"/g/{i}.png", "score": score, "status": "ok", "true_label": 0})
        writer.writerow({"path": "/g/fake.png", "score": 0.99, "status": "ok", "true_label": 1})
    table = main(table_arguments(tmp_path, "--scores", f"det={data}", "--genuine-scores", f"det={genuine}"))
    assert table["rows"][1]["n_calibration_genuine"] == 10
    assert "1 rows of images labelled fake are left out" in caplog.text


def test_a_genuine_set_with_nothing_to_calibrate_on_and_a_folder_as_output_are_refused_before_scoring(
    tmp_path, monkeypatch
):
    import tools.fraudbench_table as table

    make_tree(tmp_path / "tree")
    (tmp_path / "empty").mkdir()
    (tmp_path / "unreadable").mkdir()
    (tmp_path / "unreadable" / "a.png").write_text("not an image")
    scored = []
    monkeypatch.setattr(table, "load_runtime", lambda model, device: None)
    monkeypatch.setattr(
        table,
        "score_records",
        lambda runtime, records, writer, **_: (
            scored.append(len(records)) or writer.write([{"path": r.path, "status": "error"} for r in records])
        ),
    )
    model = ["--model", f"m={tmp_path / 'tree' / 'Cars' / 'Negative' / 'Review_010' / 'e.png'}"]
    with pytest.raises(SystemExit, match="no genuine images there"):
        main(table_arguments(tmp_path, *model, "--genuine", str(tmp_path / "empty")))
    with pytest.raises(SystemExit, match="m: none of the genuine images has a score"):
        main(table_arguments(tmp_path, *model, "--genuine", str(tmp_path / "unreadable")))
    assert scored == [1]  # the genuine image only: the data was not scored
    with pytest.raises(SystemExit, match="is a folder: give the table's file"):
        main(["--data", str(tmp_path / "tree"), *model, "--output", str(tmp_path)])
    assert scored == [1]


def test_a_calibrated_threshold_above_every_score_does_not_read_as_1():
    from evaluation.protocols.fraudbench import fraudbench_table, fraudbench_table_markdown

    records = [
        {"score": 1.0, "label": 0, "group": "real", "category": "c"},
        {"score": 1.0, "label": 1, "group": "GenA", "category": "c"},
    ]
    table = fraudbench_table({"det": records}, {"det": [1.0] * 20}, target_fpr=0.05)
    assert table["rows"][1]["threshold"] > 1.0  # every genuine score is 1: only a threshold above flags none
    assert "| det | above 1 (FPR <= 0.05 on 20 genuine) |" in fraudbench_table_markdown(table)
