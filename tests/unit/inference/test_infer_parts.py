"""Runs split into shards or processes: part files, resume from what is on disk, merge in input order."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import inference.writer as writer_module
from datamodules.preprocess import Preprocess
from datamodules.records import Record
from inference.parts import Shard, done_paths, merge_parts, part_files, part_path
from inference.runs import Processes, score_to_output
from inference.writer import COLUMNS, SIGNATURE_COLUMN, TRUTH_COLUMN, ResultWriter, read_results, read_rows
from tests.helpers import write_images


class MeanBrightness:
    """A runtime double: the score is the mean pixel value, so every image gets its own score."""

    name, threshold, is_localizer = "mean", 0.5, False
    preprocess = Preprocess(size=16, mode="center_crop")

    def predict(self, images):
        return {"score": np.asarray(images).mean(axis=(1, 2, 3))}


@pytest.fixture
def records(tmp_path) -> list[Record]:
    paths = write_images(tmp_path / "in", [(20 + i, 24) for i in range(11)])
    paths[4].write_bytes(b"broken")
    return [Record(str(p)) for p in paths]


def run(records, output, shard="", resume=False, batch_size=3):
    return run_scored(records, output, shard, resume, batch_size).counts


def run_scored(records, output, shard="", resume=False, batch_size=3):
    return score_to_output(
        MeanBrightness(),
        records,
        output,
        COLUMNS,
        Processes(device="cpu"),
        Shard.parse(shard),
        resume=resume,
        batch_size=batch_size,
        num_workers=2,
        progress=False,
    )


def test_shard_parsing_and_selection():
    assert Shard.parse(None) == Shard() and Shard.parse("2/4") == Shard(2, 4)
    for bad in ("4/4", "1", "a/b", "-1/2"):
        with pytest.raises(ValueError, match="i/n"):
            Shard.parse(bad)
    records = [Record(f"{i}.png") for i in range(7)]
    assert [i for i, _ in Shard(1, 3).items(records)] == [1, 4]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_job_array_shards_merge_into_the_one_process_file_byte_for_byte(records, tmp_path, suffix):
    single = tmp_path / f"single{suffix}"
    assert run(records, single) == {"ok": 10, "error": 1, "skipped": 0}
    output = tmp_path / f"sharded{suffix}"
    for index in (2, 0, 1):  # jobs finish in any order
        counts = run(records, output, f"{index}/3", batch_size=2)
        assert counts["ok"] + counts["error"] == len(Shard(index, 3).items(records))
    assert not output.exists() and len(part_files(output)) == 3
    assert merge_parts(output, records, COLUMNS) == {"rows": 11, "missing": 0}
    assert output.read_bytes() == single.read_bytes()
    assert not part_files(output) and not (tmp_path / f"sharded{suffix}.parts").exists()


def test_a_merge_before_every_shard_ran_says_what_is_missing_and_resume_completes_it(records, tmp_path):
    output = tmp_path / "scores.csv"
    run(records, output, "0/2")
    assert merge_parts(output, records, COLUMNS) == {"rows": 6, "missing": 5}
    run(records, output, "1/2")
    assert merge_parts(output, records, COLUMNS)["missing"] == 0
    run(records, tmp_path / "single.csv")
    assert output.read_bytes() == (tmp_path / "single.csv").read_bytes()


def test_a_killed_process_loses_no_finished_row_and_a_torn_line_is_not_a_row(records, tmp_path):
    """What a rank killed mid-write leaves: complete rows and one torn line in its part file."""
    single = tmp_path / "single.csv"
    run(records, single)
    output = tmp_path / "scores.csv"
    lines = single.read_text().splitlines(keepends=True)
    part = part_path(output, Shard(), rank=1)
    part.parent.mkdir()
    part.write_text(lines[0] + "".join(lines[3:6]) + lines[6][:9])  # 3 rows scored, the 4th torn mid-line
    assert done_paths(output) == {row["path"] for row in read_rows(single)[2:4]}  # not the error row of 004.png
    counts = run(records, output, resume=True)  # a one-process resume folds the parts in first
    assert counts == {"ok": 8, "error": 1, "skipped": 2}  # the unreadable 004.png, among the 3, tried again
    assert output.read_bytes() == single.read_bytes() and not part_files(output)


@pytest.mark.parametrize("shard", ["", "0/1", "0/2"])
def test_a_resume_tries_unreadable_images_again_and_scores_those_repaired_since(records, tmp_path, shard):
    """An error row is not a finished row: the image may have been repaired (or the disk come back)."""
    output = tmp_path / "scores.csv"
    run(records, output, shard)
    if shard == "0/2":
        merge_parts(output, records, COLUMNS)  # merged early: the error row is in the output, the new one in a part
    Image.fromarray(np.full((24, 24, 3), 7, np.uint8)).save(records[4].path, format="PNG")  # 004.png repaired
    counts = run(records, output, shard, resume=True)
    assert counts["ok"] == 1 and counts["error"] == 0
    if shard == "0/2":  # 004.png's shard; the other one's rows are still to come
        run(records, output, "1/2")
    merge_parts(output, records, COLUMNS)
    rows = {Path(r["path"]).name: r for r in read_results(output)}
    assert len(rows) == 11 and rows["004.png"]["status"] == "ok"
    assert rows["004.png"]["score"] == pytest.approx(7 / 255, abs=1e-6)


def test_a_merge_keeps_the_read_row_over_an_error_row_of_the_same_unchanged_file(records, tmp_path):
    """A read that failed for a while (a disk away, a lock) and then worked: the file did not change."""
    output = tmp_path / "scores.csv"
    run(records, output)
    unreadable = records[4].path
    assert read_results(output)[4]["status"] == "error"
    with ResultWriter(part_path(output, Shard(), rank=1), COLUMNS) as part:
        part.write([{"path": unreadable, "score": 0.25, "label": 0, "status": "ok", "error": ""}])
    merge_parts(output, records, COLUMNS)
    row = read_results(output)[4]
    assert row["status"] == "ok" and row["score"] == 0.25


def replace_image(path: str, value: int) -> None:
    """Another image at the same path, as a user replacing a file leaves it (a later modification time)."""
    before = os.stat(path)
    Image.fromarray(np.full((24, 24, 3), value, np.uint8)).save(path, format="PNG")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))


@pytest.mark.parametrize("shard", ["", "0/1", "0/2"])
def test_a_resume_scores_again_an_image_replaced_since_its_row_was_written(records, tmp_path, shard):
    """A row is the score of the file as it was: a replaced image gets the score a fresh run gives it."""
    output = tmp_path / "scores.csv"
    run(records, output, shard)
    if shard == "0/2":
        merge_parts(output, records, COLUMNS)  # merged early: the old row is in the output, the new one in a part
    replace_image(records[2].path, 200)  # 002.png, in shard 0 of 2
    counts = run(records, output, shard, resume=True)
    assert counts["ok"] == 1 and counts["error"] == 1  # the replaced image, and the unreadable one tried again
    if shard == "0/2":
        run(records, output, "1/2")
    merge_parts(output, records, COLUMNS)
    run(records, tmp_path / "fresh.csv")
    assert output.read_bytes() == (tmp_path / "fresh.csv").read_bytes()
    assert {Path(r["path"]).name: r for r in read_results(output)}["002.png"]["score"] == pytest.approx(200 / 255)


def test_rows_written_before_they_carried_the_file_signature_are_resumed_as_they_are(records, tmp_path):
    output = tmp_path / "scores.csv"
    old_columns = [c for c in COLUMNS if c != SIGNATURE_COLUMN]
    score_to_output(MeanBrightness(), records[:4], output, old_columns, Processes(device="cpu"))
    replace_image(records[2].path, 200)  # nothing recorded says it changed: its row stays
    counts = run(records, output, resume=True)
    assert counts["skipped"] == 4
    rows = {Path(r["path"]).name: r for r in read_results(output)}
    assert rows["002.png"]["score"] != pytest.approx(200 / 255) and rows["005.png"][SIGNATURE_COLUMN]


def test_without_resume_stale_parts_are_dropped(records, tmp_path):
    output = tmp_path / "scores.csv"
    part = part_path(output, Shard(), rank=3)
    part.parent.mkdir()
    part.write_text("path,score,label,status,error\n/elsewhere.png,0.9,1,ok,\n")
    run(records, output)
    assert len(read_rows(output)) == 11 and not part_files(output)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_run_holds_its_rows_and_reads_its_output_only_to_resume(records, tmp_path, monkeypatch, suffix):
    """The rows a report needs come from memory, equal to the file's; a resumed run reads the
    output once (to know what is done) and rewrites it in input order without reading it again."""
    reads = []
    read = writer_module.read_rows
    monkeypatch.setattr(writer_module, "read_rows", lambda path: reads.append(Path(path)) or read(path))
    output = tmp_path / f"scores{suffix}"
    complete = run_scored(records, output)
    assert reads == []
    assert complete.rows == read_results(output) and len(complete.rows) == 11
    whole = output.read_bytes()
    lines = whole.decode().splitlines(keepends=True)
    output.write_text("".join(lines[:5]))  # stopped after a few rows
    reads.clear()
    resumed = run_scored(records, output, resume=True)
    assert reads == [output]
    assert resumed.counts["skipped"] == 4  # the JSONL's 5th row, the unreadable 004.png, is tried again
    assert resumed.rows == complete.rows and output.read_bytes() == whole


@pytest.mark.parametrize("shard", ["", "0/2"])
def test_labelled_inputs_get_their_own_label_beside_the_decision(records, tmp_path, shard):
    labelled = [Record(r.path, label=i % 2) for i, r in enumerate(records)]
    columns = [*COLUMNS, TRUTH_COLUMN]
    output = tmp_path / "scores.csv"

    def score(shard):
        return score_to_output(
            MeanBrightness(), labelled, output, columns, Processes(device="cpu"), Shard.parse(shard), num_workers=0
        )

    score(shard)
    if shard:  # the other shard, then the merge of both parts
        score("1/2")
        merge_parts(output, labelled, columns)
    rows = read_results(output)
    assert len(rows) == len(labelled)
    # `label` is the decision at the threshold, `true_label` the input's: the broken file's error row too
    assert [r[TRUTH_COLUMN] for r in rows] == [r.label for r in labelled]
    assert all(r["label"] == int(r["score"] >= 0.5) for r in rows if r["status"] == "ok")


def test_a_file_written_before_rows_carried_the_truth_resumes_and_gets_it(records, tmp_path):
    labelled = [Record(r.path, label=i % 2) for i, r in enumerate(records)]
    output = tmp_path / "scores.csv"
    run(labelled[:4], output)  # the columns of a run without `true_label`
    score_to_output(MeanBrightness(), labelled, output, [*COLUMNS, TRUTH_COLUMN], Processes(device="cpu"), resume=True)
    rows = read_results(output)
    assert [r[TRUTH_COLUMN] for r in rows] == [r.label for r in labelled]  # the first four rows too


def test_a_resume_that_would_write_other_columns_is_refused_with_the_reason(records, tmp_path):
    output = tmp_path / "scores.csv"
    run(records[:3], output)
    with pytest.raises(ValueError, match="resume with the options it was started with"):
        ResultWriter(output, [*COLUMNS, "mask"], resume=True)
    assert len(read_rows(output)) == 3  # the file is left as it was


def test_the_runs_own_maps_and_report_pictures_inside_the_input_are_not_scored(tmp_path):
    from datamodules.records import Record
    from infer import without_own_outputs
    from tests.helpers import compose_config

    output = tmp_path / "scores.csv"
    paths = ["photo.png", "scores_masks/0000000_photo.png", "scores_report_files/thumbs/strip-000000.jpg", "x/a.png"]
    records = [Record(path=str(tmp_path / p)) for p in paths]
    for path in paths:  # the files on disk, as an earlier run left them
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).touch()
    cfg = compose_config("infer", ["model=m.ckpt", f"input={tmp_path}", f"output={output}"])
    assert [r.path for r in without_own_outputs(records, cfg, output)] == [
        str(tmp_path / "photo.png"),
        str(tmp_path / "x/a.png"),
    ]
    cfg = compose_config(
        "infer", ["model=m.ckpt", f"input={tmp_path}", f"output={output}", f"masks_dir={tmp_path / 'x'}"]
    )
    assert len(without_own_outputs(records, cfg, output)) == 2  # the maps folder named by masks_dir instead


def test_a_batch_scored_image_by_image_keeps_its_unreadable_rows_in_input_order():
    import numpy as np

    from inference.batches import collate_samples, single_image_batches

    samples = [
        {"path": "0.png", "index": 0, "error": "unreadable"},
        {"path": "1.png", "index": 1, "image": np.zeros((8, 8, 3), np.uint8), "size": (8, 8)},
        {"path": "2.png", "index": 2, "error": "unreadable"},
        {"path": "3.png", "index": 3, "image": np.zeros((8, 8, 3), np.uint8), "size": (8, 8)},
        {"path": "4.png", "index": 4, "error": "unreadable"},
    ]
    singles = single_image_batches(collate_samples(samples))
    order = [sorted([*single["index"], *single["error_index"]]) for single in singles]
    assert order == [[0, 1, 2], [3, 4]]  # each batch's rows are sorted, and the batches come in order
