"""Merged part files give the rows of a one-process run: every input once, in input order (not in
path order), rows already in the output kept, and rows of no input kept after the rest."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.preprocess import Preprocess
from datamodules.records import Record
from inference.parts import Shard, merge_parts, part_path
from inference.runs import Processes, score_to_output
from inference.writer import COLUMNS, ResultWriter, read_rows
from tests.helpers import write_images

# input order deliberately unlike any sorting of the paths
NAMES = ["zeta.png", "alpha.png", "sub/m.png", "Beta.png", "10.png", "9.png", "a b.png"]


def row(path: str, score: float) -> dict:
    return {"path": path, "score": score, "label": int(score >= 0.5), "status": "ok", "error": ""}


def write_part(output, shard: Shard, rank: int, rows: list[dict]) -> None:
    with ResultWriter(part_path(output, shard, rank), COLUMNS) as writer:
        writer.write(rows)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_parts_merge_in_input_order_with_every_input_once(tmp_path, suffix, caplog):
    records = [Record(name) for name in NAMES]
    output = tmp_path / f"scores{suffix}"
    with ResultWriter(output, COLUMNS) as writer:  # a run that stopped after two rows
        writer.write([row("sub/m.png", 0.3), row("zeta.png", 0.1)])
    write_part(output, Shard(1, 2), 0, [row("9.png", 0.6), row("alpha.png", 0.2)])
    write_part(output, Shard(0, 2), 1, [row("a b.png", 0.7), row("Beta.png", 0.4), row("zeta.png", 0.99)])
    write_part(output, Shard(0, 2), 0, [row("10.png", 0.5), row("stray.png", 0.8)])
    with caplog.at_level("WARNING", logger="inference.parts"):
        assert merge_parts(output, records, COLUMNS) == {"rows": 8, "missing": 0}
    assert "1 rows belong to no input record" in caplog.text and "stray.png" in caplog.text
    merged = read_rows(output)
    assert [r["path"] for r in merged] == NAMES + ["stray.png"]
    scores = {r["path"]: float(r["score"]) for r in merged}
    assert scores["zeta.png"] == 0.1  # the row already in the output wins over a later duplicate
    assert scores["10.png"] == 0.5 and scores["a b.png"] == 0.7


def test_a_missing_input_is_counted_and_the_rest_stay_in_order(tmp_path):
    records = [Record(name) for name in NAMES]
    output = tmp_path / "scores.csv"
    write_part(
        output,
        Shard(0, 1),
        0,
        [row(name, 0.1 * i) for i, name in reversed(list(enumerate(NAMES))) if name != "Beta.png"],
    )
    assert merge_parts(output, records, COLUMNS) == {"rows": 6, "missing": 1}
    assert [r["path"] for r in read_rows(output)] == [n for n in NAMES if n != "Beta.png"]


class MeanBrightness:
    name, threshold, is_localizer = "mean", 0.5, False
    preprocess = Preprocess(size=16, mode="center_crop")

    def predict(self, images):
        return {"score": np.asarray(images).mean(axis=(1, 2, 3))}


def test_sharded_jobs_merge_into_the_single_process_file_for_unsorted_inputs(tmp_path):
    paths = write_images(tmp_path / "in", [(17 + i, 23) for i in range(len(NAMES))])
    renamed = []
    for path, name in zip(paths, NAMES):
        target = tmp_path / "in" / name.replace("/", "_")
        path.rename(target)
        renamed.append(Record(str(target)))

    def run(output, shard):
        return score_to_output(
            MeanBrightness(),
            renamed,
            output,
            COLUMNS,
            Processes(device="cpu"),
            Shard.parse(shard),
            resume=False,
            batch_size=2,
            num_workers=0,
            progress=False,
        )

    run(tmp_path / "single.csv", "")
    for index in (2, 0, 1):
        run(tmp_path / "sharded.csv", f"{index}/3")
    assert merge_parts(tmp_path / "sharded.csv", renamed, COLUMNS) == {"rows": len(NAMES), "missing": 0}
    assert (tmp_path / "sharded.csv").read_bytes() == (tmp_path / "single.csv").read_bytes()
    assert [r["path"] for r in read_rows(tmp_path / "single.csv")] == [r.path for r in renamed]
