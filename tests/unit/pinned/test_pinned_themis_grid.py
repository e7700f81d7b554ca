"""A ROWSxCOLS block grid means ROWS rows and COLS columns, numbered row-major, on non-square,
odd-sized images: from the command line (`--grid 2x3`) to the scored blocks."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tools.themis_blocks import DEFAULT_TASKS, load_items, main, parse_grid, score_images, table

HEIGHT, WIDTH = 41, 67  # a 2 x 3 grid: rows 0-20 | 21-40, columns 0-22 | 23-44 | 45-66


def bottom_right_block() -> np.ndarray:
    """Block 6 of the 2 x 3 grid (row 2, column 3); of a 3 x 2 grid it would cover parts of 4
    and 6."""
    mask = np.zeros((HEIGHT, WIDTH), np.float32)
    mask[21:, 45:] = 1
    return mask


def test_grid_text_is_rows_by_columns():
    assert parse_grid("2x3") == (2, 3) and parse_grid("5X1") == (5, 1) and parse_grid("1x4") == (1, 4)


@pytest.mark.parametrize("text", ["0x3", "3x0", "3", "axb"])
def test_a_grid_without_a_row_or_a_column_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="--grid"):
        parse_grid(text)


@pytest.mark.parametrize(
    "grid, rows, cols, block",
    [
        ((2, 3), (21, 41), (45, 67), 6),
        ((1, 3), (0, 41), (45, 67), 3),
        ((2, 1), (21, 41), (0, 67), 2),
        ((3, 2), (14, 28), (0, 34), 3),
    ],
)
def test_blocks_are_numbered_row_major_over_rows_then_columns(grid, rows, cols, block):
    truth = np.zeros((HEIGHT, WIDTH), np.float32)
    truth[slice(*rows), slice(*cols)] = 1
    [answer] = score_images([{"map": truth, "truth": truth, "task": "SPL"}], grid=grid)
    assert answer["true"] == answer["predicted"] == [block]


def test_middle_of_the_top_row_is_block_two_of_a_two_by_three_grid():
    truth = np.zeros((HEIGHT, WIDTH), np.float32)
    truth[:21, 23:45] = 1
    [answer] = score_images([{"map": truth, "truth": truth, "task": "CM"}], grid=(2, 3))
    assert answer["predicted"] == [2] and answer["iou"] == 1.0


def test_command_scores_a_two_by_three_grid_on_non_square_images(tmp_path):
    manifest, results = ["path,label,mask,group"], ["path,score,label,status,error,mask"]
    Image.fromarray(np.zeros((HEIGHT, WIDTH, 3), np.uint8)).save(tmp_path / "a.png")
    Image.fromarray((bottom_right_block() * 255).astype(np.uint8)).save(tmp_path / "a_mask.png")
    Image.fromarray((bottom_right_block() * 255).astype(np.uint8)).save(tmp_path / "a_map.png")
    manifest.append("a.png,1,a_mask.png,splicing")
    results.append(f"{tmp_path / 'a.png'},0.9,1,ok,,{tmp_path / 'a_map.png'}")
    (tmp_path / "manifest.csv").write_text("\n".join(manifest) + "\n")
    (tmp_path / "scores.csv").write_text("\n".join(results) + "\n")
    assert (
        main(
            [
                str(tmp_path / "scores.csv"),
                "--manifest",
                str(tmp_path / "manifest.csv"),
                "--grid",
                "2x3",
                "--output",
                str(tmp_path / "table.md"),
            ]
        )
        == 0
    )
    text = (tmp_path / "table.md").read_text()
    assert "| scores | ours | 100.00 (n=1) | 100.00 |" in text
    assert "| (every block flagged) | ours | 16.67 (n=1) | 28.57 |" in text  # 1 true block of 6
    assert "Grid 2x3" in text


def test_a_genuine_map_exactly_at_the_threshold_flags_its_block():
    prob = np.zeros((HEIGHT, WIDTH), np.float32)
    prob[:21, :23] = 0.5  # all of block 1 of the 2 x 3 grid, exactly on the threshold
    [answer] = score_images([{"map": prob, "truth": None, "task": None}], grid=(2, 3))
    assert answer["task"] == "genuine" and answer["predicted"] == [1]
    below = np.nextafter(prob, np.float32(0))
    [answer] = score_images([{"map": below, "truth": None, "task": None}], grid=(2, 3))
    assert answer["predicted"] == []


def test_only_genuine_images_and_masked_fakes_of_a_task_are_scored(tmp_path):
    manifest, results = ["path,label,mask,group"], ["path,score,label,status,error,mask"]
    cases = [
        ("spliced", 1, True, "splicing"),
        ("unmasked", 1, False, "splicing"),
        ("duplicated", 1, True, "duplication"),
        ("real", 0, False, "real"),
    ]
    for name, label, masked, group in cases:
        Image.fromarray(np.zeros((HEIGHT, WIDTH, 3), np.uint8)).save(tmp_path / f"{name}.png")
        Image.fromarray((bottom_right_block() * 255).astype(np.uint8)).save(tmp_path / f"{name}_map.png")
        if masked:
            Image.fromarray((bottom_right_block() * 255).astype(np.uint8)).save(tmp_path / f"{name}_m.png")
        manifest.append(f"{name}.png,{label},{name + '_m.png' if masked else ''},{group}")
        results.append(f"{tmp_path / (name + '.png')},0.9,1,ok,,{tmp_path / (name + '_map.png')}")
    (tmp_path / "manifest.csv").write_text("\n".join(manifest) + "\n")
    (tmp_path / "scores.csv").write_text("\n".join(results) + "\n")
    items = load_items(tmp_path / "scores.csv", tmp_path / "manifest.csv", DEFAULT_TASKS)
    assert [(Path(i["path"]).stem, i["task"]) for i in items] == [("spliced", "SPL"), ("real", "genuine")]
    assert items[1]["truth"] is None and items[0]["truth"].shape == (HEIGHT, WIDTH)


def test_the_table_separator_has_a_cell_per_column():
    text = table({"m": {"SPL": {"n": 1, "iou": 50.0, "f1": 50.0}}})
    header, separator = text.splitlines()[:2]
    assert separator.count("---") == header.count("|") - 1 == 9
