"""THEMIS-style block scoring of localizer maps on hand-made maps with known answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import tools.themis_blocks
from evaluation.protocols.themis import block_localization, grid_partition
from tools.themis_blocks import THEMIS_MLLM, main, score_images, summarize, table, task_of


def square(shape=(90, 90), top=0, left=0, side=30) -> np.ndarray:
    mask = np.zeros(shape, np.float32)
    mask[top : top + side, left : left + side] = 1
    return mask


def test_a_map_that_covers_exactly_the_forged_block_scores_one():
    truth = square(top=30, left=30)  # the centre block of a 3x3 grid: region 5
    [answer] = score_images([{"map": truth, "truth": truth, "task": "SPL", "path": "a.png"}])
    assert answer["predicted"] == answer["true"] == [5]
    assert answer["iou"] == answer["f1"] == 1.0


def test_half_right_answer_gets_partial_credit():
    truth = square(top=0, left=0, side=30) + square(top=0, left=30, side=30)  # regions 1 and 2
    prediction = square(top=0, left=0, side=30) + square(top=60, left=60, side=30)  # regions 1 and 9
    [answer] = score_images([{"map": prediction, "truth": truth, "task": "CM"}])
    assert answer["predicted"] == [1, 9] and answer["true"] == [1, 2]
    assert answer["iou"] == pytest.approx(1 / 3) and answer["f1"] == pytest.approx(0.5)


def test_a_block_is_flagged_only_when_enough_of_it_is_above_threshold():
    prediction = np.zeros((90, 90), np.float32)
    prediction[0:30, 0:12] = 0.9  # 40 % of block 1
    truth = square()
    strict = score_images([{"map": prediction, "truth": truth, "task": "SPL"}], pred_coverage=0.5)[0]
    lenient = score_images([{"map": prediction, "truth": truth, "task": "SPL"}], pred_coverage=0.3)[0]
    assert strict["predicted"] == [] and strict["iou"] == 0.0
    assert lenient["predicted"] == [1] and lenient["iou"] == 1.0
    below = score_images([{"map": prediction * 0.5, "truth": truth, "task": "SPL"}], pred_coverage=0.3)[0]
    assert below["predicted"] == []  # 0.45 < the 0.5 pixel threshold


def test_given_partition_replaces_the_grid(tmp_path):
    labels = np.zeros((40, 60), np.uint8)
    labels[:, :20], labels[:, 20:] = 1, 2  # two numbered regions of unequal size
    Image.fromarray(labels).save(tmp_path / "panel.png")
    truth = np.zeros((40, 60), np.float32)
    truth[:, 25:] = 1
    [answer] = score_images(
        [{"map": truth, "truth": truth, "task": "AIG", "path": "/data/panel.png"}], partitions=tmp_path
    )
    assert answer["predicted"] == answer["true"] == [2]


def test_summary_means_over_manipulated_images_and_counts_flagged_genuines():
    answers = score_images(
        [
            {"map": square(), "truth": square(), "task": "SPL"},
            {"map": np.zeros((90, 90)), "truth": square(), "task": "SPL"},
            {"map": square(), "truth": None, "task": None},
            {"map": np.zeros((90, 90)), "truth": None, "task": None},
        ]
    )
    summary = summarize(answers)
    assert summary["SPL"] == {"n": 2, "iou": 50.0, "f1": 50.0}
    assert summary["genuine"] == {"n": 2, "flagged": 50.0}
    text = table({"trufor": summary})
    assert "| trufor | ours | 50.00 (n=2) | 50.00 |" in text
    assert "| Gemini 2.5 Flash | THEMIS | 56.72 | 65.08 | 46.98 | 57.90 | 38.87 | 44.76 | - |" in text
    assert len(THEMIS_MLLM) == 16 and "different images" in text


def test_groups_map_to_tasks_by_substring():
    assert task_of("ae_bilinear_conv_region", {"region": "AIG"}) == "AIG"
    assert task_of("copy_move", {"splicing": "SPL", "copy_move": "CM"}) == "CM"
    assert task_of("inpainting", {"splicing": "SPL"}) is None


def test_command_reads_infer_results_and_the_manifest(tmp_path):
    rows, results = ["path,label,mask,group"], ["path,score,label,status,error,mask"]
    for name, label, group, predicted in (("a", 1, "splicing", square()), ("b", 0, "genuine", np.zeros((90, 90)))):
        Image.fromarray(np.zeros((90, 90, 3), np.uint8)).save(tmp_path / f"{name}.png")
        Image.fromarray((predicted * 255).astype(np.uint8)).save(tmp_path / f"{name}_map.png")
        if label:
            Image.fromarray((square() * 255).astype(np.uint8)).save(tmp_path / f"{name}_mask.png")
        rows.append(f"{name}.png,{label},{name + '_mask.png' if label else ''},{group}")
        results.append(f"{tmp_path / (name + '.png')},0.9,1,ok,,{tmp_path / (name + '_map.png')}")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "scores.csv").write_text("\n".join(results) + "\n")
    assert (
        main(
            [
                str(tmp_path / "scores.csv"),
                "--manifest",
                str(tmp_path / "manifest.csv"),
                "--output",
                str(tmp_path / "table.md"),
            ]
        )
        == 0
    )
    text = (tmp_path / "table.md").read_text()
    assert "| scores | ours | 100.00 (n=1) | 100.00 |" in text
    assert "| (every block flagged) | ours | 11.11 (n=1) | 20.00 |" in text  # 1 true block of 9


def test_images_of_no_task_are_counted_aloud_and_an_unknown_task_refused(tmp_path, capsys):
    rows, results = ["path,label,mask,group"], ["path,score,label,status,error,mask"]
    for name, group in (("a", "splicing"), ("b", "damage")):  # THEMIS localizes no damage task
        Image.fromarray(np.zeros((90, 90, 3), np.uint8)).save(tmp_path / f"{name}.png")
        Image.fromarray((square() * 255).astype(np.uint8)).save(tmp_path / f"{name}_map.png")
        Image.fromarray((square() * 255).astype(np.uint8)).save(tmp_path / f"{name}_mask.png")
        rows.append(f"{name}.png,1,{name}_mask.png,{group}")
        results.append(f"{tmp_path / (name + '.png')},0.9,1,ok,,{tmp_path / (name + '_map.png')}")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "scores.csv").write_text("\n".join(results) + "\n")
    arguments = [str(tmp_path / "scores.csv"), "--manifest", str(tmp_path / "manifest.csv")]
    assert main(arguments) == 0
    assert "left out, their group matching no --task: {'damage': 1}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*arguments, "--task", "photos=XYZ"])
    assert "--task GROUP=TASK takes THEMIS's tasks ['AIG', 'CM', 'SPL'], got ['XYZ']" in capsys.readouterr().err


def test_a_manipulated_image_whose_mask_marks_no_pixel_is_left_out_and_counted_aloud(tmp_path, capsys):
    """An all-black mask of a manipulated image is a missing mask (as in infer.py's pixel metrics),
    not a truth that an empty answer matches perfectly."""
    rows, results = ["path,label,mask,group"], ["path,score,label,status,error,mask"]
    for name, mask in (("found", square()), ("blank", np.zeros((90, 90), np.float32))):
        Image.fromarray(np.zeros((90, 90, 3), np.uint8)).save(tmp_path / f"{name}.png")
        Image.fromarray(np.zeros((90, 90), np.uint8)).save(tmp_path / f"{name}_map.png")  # finds nothing
        Image.fromarray((mask * 255).astype(np.uint8)).save(tmp_path / f"{name}_mask.png")
        rows.append(f"{name}.png,1,{name}_mask.png,splicing")
        results.append(f"{tmp_path / (name + '.png')},0.9,1,ok,,{tmp_path / (name + '_map.png')}")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "scores.csv").write_text("\n".join(results) + "\n")
    out = tmp_path / "table.md"
    assert main([str(tmp_path / "scores.csv"), "--manifest", str(tmp_path / "manifest.csv"), "--output", str(out)]) == 0
    assert "left out, their mask marking no pixel: {'SPL': 1}" in capsys.readouterr().err
    assert "| scores | ours | 0.00 (n=1) | 0.00 |" in out.read_text()  # the empty answer to "found" only


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--task", "nonsense"], "--task takes GROUP=TASK"),  # a traceback (dictionary update sequence)
        (["--threshold", "2"], "fractions between 0 and 1"),  # the every-block baseline read IoU 0 at 2
    ],
)
def test_a_malformed_task_or_a_threshold_past_one_is_refused_in_one_line(arguments, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main([str(tmp_path / "scores.csv"), "--manifest", str(tmp_path / "manifest.csv"), *arguments])
    assert refused.value.code == 2 and message in capsys.readouterr().err


def test_true_coverage_is_said_as_the_code_applies_it():
    """A block covered by exactly `true_coverage` is truly forged: the docs say "at least", not "more than"."""
    truth = square(side=15)  # a quarter of block 1 of the 3x3 grid
    nothing = np.zeros((90, 90), np.float32)
    assert block_localization(truth, nothing, grid_partition((90, 90), 3, 3), true_coverage=0.25)["true"] == [1]
    assert block_localization(truth, nothing, grid_partition((90, 90), 3, 3), true_coverage=0.26)["true"] == []
    for text in (" ".join(block_localization.__doc__.split()), " ".join(tools.themis_blocks.__doc__.split())):
        assert "covers at least" in text and "covers more than" not in text


def test_a_themis_tree_is_read_as_the_scored_input_and_every_image_left_out_or_resized_is_said(tmp_path, capsys):
    """The fraud type comes from the tree's sub-folders (`ai_generated/...` is THEMIS's AIG task); a
    whole-image fake without a mask is counted aloud, a mask of another size is scored resized, and said."""
    tree, results = tmp_path / "themis", ["path,score,label,status,error,mask"]
    forged = {"splicing/p1": 90, "ai_generated/tre/p2": 45, "ai_generated/iif/p3": None}  # mask side
    for name, side in forged.items():
        for role in ("original", "forged"):
            (tree / role / name).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.zeros((90, 90, 3), np.uint8)).save(tree / role / f"{name}.png")
        if side:
            (tree / "mask" / name).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray((square()[:: 90 // side, :: 90 // side] * 255).astype(np.uint8)).save(
                tree / "mask" / f"{name}.png"
            )
        Image.fromarray((square() * 255).astype(np.uint8)).save(tmp_path / f"{Path(name).name}_map.png")
        results.append(f"{tree / 'forged' / name}.png,0.9,1,ok,,{tmp_path / (Path(name).name + '_map.png')}")
    (tmp_path / "scores.csv").write_text("\n".join(results) + "\n")
    out = tmp_path / "table.md"
    assert main([str(tmp_path / "scores.csv"), "--manifest", str(tree), "--output", str(out), "--no-baseline"]) == 0
    err = capsys.readouterr().err
    assert (
        "left out, no true mask: {'AIG': 1}" in err and "scored with their mask resized to the image: {'AIG': 1}" in err
    )
    assert "| scores | ours | 100.00 (n=1) | 100.00 | 100.00 (n=1) | 100.00 |" in out.read_text().replace(
        " - | - |", ""
    )
