"""A CSV cell the toolkit writes that a spreadsheet would run as a formula (a path, folder or review
id starting with `=`, `+`, `-`, `@`, a tab or a carriage return) is written as text, with a leading
`'`; the toolkit's own readers give back the value as it was, so resume, merge and matching rows by
path work on such names."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datamodules.records import Record
from detectors.training_free import save_checkpoint
from infer import infer
from inference.csv_cells import escape_cell, unescape_cell
from inference.recalibration import calibrate_model
from inference.reviews import score_reviews
from inference.writer import ResultWriter, read_results, read_rows
from tests.duplication_helpers import hand_set_pair_module
from tests.helpers import compose_config, write_images

FORMULAS = ["=1+1.png", "+cmd.png", "-x.png", "@SUM(1)", "\tx.png", "\rx.png", '=HYPERLINK("https://e","x")']
COLUMNS = ("path", "score", "label", "status", "error")
NAMES = [*FORMULAS, "'q.png", "a\rb.png"]


@pytest.mark.parametrize("text", FORMULAS)
def test_a_text_a_spreadsheet_would_run_is_written_with_a_leading_quote_and_read_back_as_it_was(text):
    assert escape_cell(text) == "'" + text
    assert unescape_cell(escape_cell(text)) == text


@pytest.mark.parametrize("text", ["'", "'=1", "''x", "'plain.png"])
def test_a_text_starting_with_a_quote_gets_one_more_so_it_reads_back_as_it_was(text):
    assert escape_cell(text) == "'" + text
    assert unescape_cell(escape_cell(text)) == text


@pytest.mark.parametrize("value", [-0.25, 3, 1e-9, "-0.25", "+1", "-1e-05", ".5", "a/=b.png", "/in/-x.png", "", None])
def test_numbers_and_text_no_spreadsheet_runs_are_written_as_they_are(value):
    assert escape_cell(value) == value
    assert unescape_cell(value) == value


def test_a_quote_the_writer_did_not_add_is_kept_on_reading():
    """A file written before cells were escaped (or by hand) keeps a `'` the escape would not add."""
    assert unescape_cell("'plain.png") == "'plain.png"
    assert unescape_cell("'-0.25") == "'-0.25"


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_result_rows_named_as_formulas_are_text_in_csv_and_resume_by_their_own_paths(tmp_path, suffix):
    rows = [{"path": p, "score": -0.25, "label": 0, "status": "ok", "error": ""} for p in NAMES]
    output = tmp_path / f"scores{suffix}"
    with ResultWriter(output, COLUMNS) as writer:
        writer.write(rows[:3])
    with ResultWriter(output, COLUMNS, resume=True) as writer:
        assert list(writer.done) == NAMES[:3]
        writer.write(rows[3:])
    assert [r["path"] for r in read_results(output)] == [r["path"] for r in rows]
    if suffix == ".csv":
        cells = list(csv.reader(output.open(newline="", encoding="utf-8")))[1:]
        assert [c[0] for c in cells] == [escape_cell(r["path"]) for r in rows]
        assert [c[0][0] for c in cells][:-1] == ["'"] * (len(rows) - 1)  # all but the plain a\rb.png
        assert {c[1] for c in cells} == {"-0.25"}  # a number stays one
    else:  # no spreadsheet opens JSONL: written as given
        assert [json.loads(line)["path"] for line in output.read_text().splitlines()] == [r["path"] for r in rows]


def test_a_name_holding_a_carriage_return_stays_one_row_and_forges_no_other(tmp_path):
    """Python's csv leaves a bare carriage return unquoted with "\\n" line ends: the row is quoted."""
    forged = "x.png\r/evidence/real.png,0.01,0,ok,"
    output = tmp_path / "scores.csv"
    with ResultWriter(output, COLUMNS) as writer:
        writer.write([{"path": forged, "score": 0.9, "label": 1, "status": "ok", "error": ""}])
    assert [(r["path"], r["score"]) for r in read_results(output)] == [(forged, 0.9)]
    records = [Record(forged, review="r\r1"), Record("b.png", review="r\r1")]
    results = [{"path": r.path, "score": s, "status": "ok"} for r, s in zip(records, (0.9, 0.1))]
    score_reviews(tmp_path / "s.csv", records, results, "review", "max", 0.5, tmp_path, "t")
    reviews = list(csv.DictReader((tmp_path / "s.reviews.csv").open(newline="", encoding="utf-8")))
    assert [(r["review"], r["most_suspicious"]) for r in reviews] == [("r\r1", forged)]


def test_review_ids_and_paths_named_as_formulas_are_text_in_the_reviews_file(tmp_path):
    records = [Record("=1+1.png", review="@SUM(1)"), Record("-x.png", review="=cmd|'/c calc'!A1")]
    results = [{"path": r.path, "score": s, "status": "ok"} for r, s in zip(records, (0.9, 0.1))]
    score_reviews(tmp_path / "s.csv", records, results, "review", "max", 0.5, tmp_path, "t")
    cells = list(csv.DictReader((tmp_path / "s.reviews.csv").open(newline="")))
    assert [(c["review"], c["most_suspicious"]) for c in cells] == [
        ("'@SUM(1)", "'=1+1.png"),
        ("'=cmd|'/c calc'!A1", "'-x.png"),
    ]


def write_folder(root: Path) -> list[str]:
    """Images and folders whose names a spreadsheet would run, as `input=.` from `root` names them."""
    names = ["=1+1.png", "-x.png", "+cmd.png", "'q.png", "@SUM(1)/=2.png", "@SUM(1)/a.png", "-dir/@b.png"]
    rng = np.random.default_rng(0)
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 44, 3), dtype=np.uint8)).save(root / name)
    return names


def infer_here(model: Path, output: Path, *extra: str) -> dict:
    overrides = [f"model={model}", "input=.", f"output={output}", "progress=false", "batch_size=2", *extra]
    return infer(compose_config("infer", overrides))


def raw_column(path: Path, column: str) -> list[str]:
    return [row[column] for row in csv.DictReader(path.open(newline="", encoding="utf-8"))]


def test_infer_on_names_a_spreadsheet_would_run_writes_text_cells_and_resumes_a_partial_run(
    tiny_model, tmp_path, monkeypatch
):
    root = tmp_path / "in"
    names = write_folder(root)
    monkeypatch.chdir(root)
    output = tmp_path / "scores.csv"
    infer_here(tiny_model["onnx"], output, "group_by=parent")
    complete = {r["path"]: r["score"] for r in read_results(output)}
    assert sorted(complete) == sorted(names)
    reviews = (tmp_path / "scores.reviews.csv").read_bytes()
    lines = output.read_text(encoding="utf-8").splitlines(keepends=True)
    output.write_text("".join(lines[:3]) + lines[3][:9], encoding="utf-8")  # stopped mid-row
    result = infer_here(tiny_model["onnx"], output, "group_by=parent", "resume=true")
    assert result["counts"]["skipped"] == 2  # the rows written before the stop are kept, found by path
    assert {r["path"]: r["score"] for r in read_results(output)} == complete
    assert all(cell.startswith("'") for cell in raw_column(output, "path") if cell != "a.png")
    assert (tmp_path / "scores.reviews.csv").read_bytes() == reviews  # the same reviews as before the stop
    assert {"'@SUM(1)", "'-dir"} <= set(raw_column(tmp_path / "scores.reviews.csv", "review"))


def test_shards_of_names_a_spreadsheet_would_run_merge_into_the_one_process_file(tiny_model, tmp_path, monkeypatch):
    root = tmp_path / "in"
    write_folder(root)
    monkeypatch.chdir(root)
    infer_here(tiny_model["onnx"], tmp_path / "single.csv")
    for shard in ("1/2", "0/2"):
        infer_here(tiny_model["onnx"], tmp_path / "sharded.csv", f"shard={shard}")
    infer_here(tiny_model["onnx"], tmp_path / "sharded.csv", "merge=true")
    assert (tmp_path / "sharded.csv").read_bytes() == (tmp_path / "single.csv").read_bytes()
    assert "'=1+1.png" in raw_column(tmp_path / "sharded.csv", "path")


def test_calibrate_on_names_a_spreadsheet_would_run_writes_text_cells_and_calibrates_on_every_image(
    tiny_model, tmp_path, monkeypatch
):
    paths = write_images(tmp_path / "own", [(30 + i % 7, 34) for i in range(35)])
    for path in paths:
        path.rename(path.with_name(f"={path.name}"))
    monkeypatch.chdir(tmp_path / "own")
    record = calibrate_model(str(tiny_model["onnx"]), ".", tmp_path / "c.onnx", target_fpr=0.1, progress=False)
    assert record["n_genuine"] == 35  # each scored row found again by its path
    cells = raw_column(tmp_path / "c.calibration_scores.csv", "path")
    assert sorted(cells) == sorted(f"'={p.name}" for p in paths)


def test_a_pair_run_on_names_a_spreadsheet_would_run_writes_text_cells_and_resumes(tmp_path, monkeypatch):
    model = save_checkpoint(hand_set_pair_module(), tmp_path / "dup.ckpt", None)
    root = tmp_path / "in"
    write_folder(root)
    monkeypatch.chdir(root)
    output = tmp_path / "pairs.csv"
    infer_here(model, output)
    complete = {r["path"]: r["score"] for r in read_rows(output)}
    assert set(raw_column(output, "group")) == {".", "'@SUM(1)"}  # -dir holds one image: no pair
    assert all(cell.startswith("'") for cell in raw_column(output, "path_a"))
    lines = output.read_text(encoding="utf-8").splitlines(keepends=True)
    output.write_text("".join(lines[:2]), encoding="utf-8")
    result = infer_here(model, output, "resume=true")
    assert result["counts"]["skipped"] == 1
    assert {r["path"]: r["score"] for r in read_rows(output)} == complete
