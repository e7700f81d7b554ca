"""infer.py with a pair detector: all pairs of a folder, pair manifests with truth, bad panels, resume."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from datamodules.io import read_image, read_mask, write_image
from detectors.training_free import save_checkpoint
from infer import InferenceFailed, infer
from inference.writer import read_results
from synthesis.duplication import global_duplication, local_duplication
from synthesis.figure_panels import chart_panel
from tests.duplication_helpers import hand_set_pair_module
from tests.helpers import compose_config


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return save_checkpoint(hand_set_pair_module(), tmp_path_factory.mktemp("dup") / "best.ckpt", None)


@pytest.fixture(scope="module")
def panels(tmp_path_factory) -> Path:
    """One figure's panels: a photo, its mirrored copy, another photo, two different charts, a flat
    panel and a file no decoder reads; and a pair manifest with operations and masks."""
    from synthesis.embedded import bundled_photo_paths

    folder = tmp_path_factory.mktemp("figure")
    photos = {p.name: read_image(p) for p in bundled_photo_paths() if p.name in ("coffee.png", "astronaut.png")}
    rng = np.random.default_rng(0)
    coffee = photos["coffee.png"][:240, :320]
    copy = global_duplication(coffee, rng, geometric="hflip", parameters=[])
    write_image(folder / "fig" / "a.png", coffee)
    write_image(folder / "fig" / "b.png", copy.panel_b)
    write_image(folder / "fig" / "c.png", photos["astronaut.png"][::2, ::2])
    write_image(folder / "fig" / "chart1.png", chart_panel(rng))
    write_image(folder / "fig" / "chart2.png", chart_panel(rng))
    write_image(folder / "fig" / "flat.png", np.full((80, 80, 3), 200, np.uint8))
    (folder / "fig" / "broken.png").write_bytes(b"no image here")
    local = local_duplication(photos["astronaut.png"], rng, geometric=["rotate180"], parameters=["brightness"])
    write_image(folder / "pairs" / "la.png", local.panel_a)
    write_image(folder / "pairs" / "lb.png", local.panel_b)
    write_image(folder / "pairs" / "la_mask.png", local.mask_a.astype(np.uint8) * 255)
    write_image(folder / "pairs" / "lb_mask.png", local.mask_b.astype(np.uint8) * 255)
    (folder / "pairs.csv").write_text(
        "path_a,path_b,operations,mask_a,mask_b\n"
        "pairs/la.png,pairs/lb.png,rotate180;brightness,pairs/la_mask.png,pairs/lb_mask.png\n"
        "fig/a.png,fig/c.png,,,\n"
        "fig/a.png,fig/missing.png,,,\n"
    )
    return folder


def run(model: Path, input: Path, output: Path, *extra: str) -> dict:
    return infer(
        compose_config("infer", [f"model={model}", f"input={input}", f"output={output}", "progress=false", *extra])
    )


def test_every_pair_of_a_folder_is_scored_and_bad_panels_are_error_rows(model, panels, tmp_path):
    result = run(model, panels / "fig", tmp_path / "pairs.csv")
    rows = {(Path(r["path_a"]).name, Path(r["path_b"]).name): r for r in read_results(tmp_path / "pairs.csv")}
    assert len(rows) == 21 and result["counts"]["error"] == 6
    assert rows[("a.png", "b.png")]["label"] == 1 and rows[("a.png", "b.png")]["operations"] == "flip"
    assert "recognised" in rows[("a.png", "broken.png")]["error"]
    assert rows[("chart1.png", "chart2.png")]["label"] == 0  # shared axes and labels are not reuse
    assert rows[("a.png", "flat.png")]["reason"] == "no keypoints in panel B"
    duplicated = [key for key, row in rows.items() if row["label"] == 1]
    assert duplicated == [("a.png", "b.png")]


def test_a_pair_manifest_with_truth_gets_masks_and_duplication_metrics(model, panels, tmp_path):
    output = tmp_path / "pairs.jsonl"
    run(model, panels / "pairs.csv", output)
    rows = read_results(output)
    assert [r["status"] for r in rows] == ["ok", "ok", "error"] and "not found" in rows[2]["error"]
    assert set(rows[0]["operations"].split(";")) == {"rotation", "parameter"}
    assert read_mask(rows[0]["mask_a"]).mean() > 0.2 and read_mask(rows[0]["mask_b"]).mean() > 0.2
    metrics = json.loads(output.with_suffix(".metrics.json").read_text())
    assert metrics["operations"]["exact_match"] == 1.0 and metrics["pair_f1"] == 1.0
    assert metrics["pixel_f1"] > 0.8 and "BioFors" in metrics["pixel_protocol"]


def test_each_row_names_the_group_of_its_pair_and_the_truth_beside_the_decision(model, panels, tmp_path):
    run(model, panels, tmp_path / "grouped.csv")  # the figure's folder and the pairs' folder are two groups
    grouped = read_results(tmp_path / "grouped.csv")
    assert {(Path(r["path_a"]).parent.name, Path(r["group"]).name) for r in grouped} == {
        ("fig", "fig"),
        ("pairs", "pairs"),
    }
    assert "true_label" not in grouped[0]  # a folder says nothing of duplication
    run(model, panels / "pairs.csv", tmp_path / "truth.csv")
    rows = read_results(tmp_path / "truth.csv")
    assert [r["true_label"] for r in rows] == [1, 0, 0] and [r["label"] for r in rows[:2]] == [1, 0]
    assert "group" not in rows[0]  # a pair manifest names its pairs one by one


def pair_metrics(model: Path, panels: Path, manifest: str, output: Path) -> dict:
    """The metrics of a run over a pair manifest of `panels` holding `manifest` (CSV text)."""
    (panels / "truth.csv").write_text(manifest)
    run(model, panels / "truth.csv", output)
    return json.loads(output.with_suffix(".metrics.json").read_text())


def test_a_pair_manifest_with_masks_only_is_scored_by_what_its_masks_mark(model, panels, tmp_path):
    masks_only = "path_a,path_b,mask_a,mask_b\npairs/la.png,pairs/lb.png,pairs/la_mask.png,pairs/lb_mask.png\n"
    metrics = pair_metrics(model, panels, masks_only, tmp_path / "pairs.csv")
    assert metrics["n_pairs"] == 1 and metrics["pair_f1"] == 1.0 and metrics["pixel_f1"] > 0.8
    assert "operations" not in metrics  # no operation was given, none is scored


def test_a_duplicated_pair_without_its_operations_counts_as_a_pair_not_in_the_operation_sets(model, panels, tmp_path):
    labelled = "path_a,path_b,label,operations\npairs/la.png,pairs/lb.png,1,\nfig/a.png,fig/b.png,1,hflip\n"
    metrics = pair_metrics(model, panels, labelled, tmp_path / "pairs.csv")
    assert metrics["n_pairs"] == 2 and metrics["pair_f1"] == 1.0
    assert metrics["operations"]["n"] == 1 and metrics["operations"]["exact_match"] == 1.0


def test_a_resumed_run_scores_only_the_missing_pairs(model, panels, tmp_path):
    output = tmp_path / "pairs.csv"
    run(model, panels / "pairs.csv", output)
    lines = output.read_text().splitlines()
    output.write_text("\n".join(lines[:2]) + "\n")  # as if stopped after the first pair
    result = run(model, panels / "pairs.csv", output, "resume=true")
    assert result["counts"]["skipped"] == 1 and len(read_results(output)) == 3


def test_a_resume_tries_a_pair_with_an_unreadable_panel_again(model, panels, tmp_path):
    """The panel found since is read: the pair gets its score, and its error row is gone."""
    folder = tmp_path / "in"
    for name in ("a.png", "c.png"):
        write_image(folder / name, read_image(panels / "fig" / name))
    (folder / "b.png").write_bytes(b"not yet")
    output = tmp_path / "pairs.csv"
    assert run(model, folder, output)["counts"]["error"] == 2
    write_image(folder / "b.png", read_image(panels / "fig" / "b.png"))
    result = run(model, folder, output, "resume=true")
    assert result["counts"]["skipped"] == 1 and result["counts"]["error"] == 0 and result["counts"]["ok"] == 2
    assert [r["status"] for r in read_results(output)] == ["ok"] * 3


def rows_by_pair(path: Path) -> dict[str, dict]:
    return {row["path"]: row for row in read_results(path)}


def test_a_resume_scores_again_the_pairs_of_a_panel_replaced_since(model, panels, tmp_path):
    """A row is the score of the panels as they were: replacing b.png re-scores its two pairs only."""
    folder = tmp_path / "in"
    for name in ("a.png", "b.png", "c.png"):
        write_image(folder / name, read_image(panels / "fig" / name))
    output = tmp_path / "pairs.csv"
    run(model, folder, output)
    before = os.stat(folder / "b.png")
    write_image(folder / "b.png", read_image(panels / "fig" / "c.png"))  # b.png is now a copy of c.png
    os.utime(folder / "b.png", ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))
    result = run(model, folder, output, "resume=true")
    assert result["counts"]["skipped"] == 1 and result["counts"]["ok"] == 2
    run(model, folder, tmp_path / "fresh.csv")
    assert rows_by_pair(output) == rows_by_pair(tmp_path / "fresh.csv")


def test_a_resume_with_another_input_reports_only_the_pairs_of_this_input(model, panels, tmp_path, monkeypatch, caplog):
    import logging

    import inference.pairs as pairs_module

    shown = []
    monkeypatch.setattr(pairs_module, "pair_page", lambda cfg, runtime, results, *_: shown.append(results))
    fig, output = panels / "fig", tmp_path / "pairs.csv"
    for name, other in (("first", "b"), ("second", "c")):
        (tmp_path / f"{name}.csv").write_text(f"path_a,path_b\n{fig}/a.png,{fig}/{other}.png\n")
    run(model, tmp_path / "first.csv", output, "report=html")
    with caplog.at_level(logging.WARNING):
        run(model, tmp_path / "second.csv", output, "resume=true", "report=html")
    assert len(read_results(output)) == 2  # the earlier row stays in the file
    assert [(Path(r["path_a"]).name, Path(r["path_b"]).name) for r in shown[1]] == [("a.png", "c.png")]
    assert "1 rows of" in caplog.text and "no pair of this input" in caplog.text


def test_a_resume_with_another_threshold_is_refused_before_any_pair_is_scored(model, panels, tmp_path):
    output = tmp_path / "pairs.csv"
    run(model, panels / "pairs.csv", output)
    written = output.read_bytes()
    with pytest.raises(InferenceFailed, match="another model, threshold or scoring option .* would mix"):
        run(model, panels / "pairs.csv", output, "resume=true", "threshold=0.1")
    assert output.read_bytes() == written


def test_an_input_without_pairs_fails_with_the_reason(model, tmp_path):
    write_image(tmp_path / "alone" / "one.png", np.zeros((32, 32, 3), np.uint8))
    with pytest.raises(InferenceFailed, match="no pairs"):
        run(model, tmp_path / "alone", tmp_path / "out.csv")


@pytest.mark.parametrize(
    "content, message",
    [
        ("path_a,label\na.png,1\n", "names path_a but not path_b: a pair manifest needs both"),
        (
            "path_a,path_b,label\na.png,b.png,yes\n",
            "row 2: label must be 0 \\(no duplication\\) or 1 \\(duplication\\), got 'yes'",
        ),
        ("path_a,path_b,operations\na.png,b.png,mirror\n", "row 2: unknown duplication operations \\['mirror'\\]"),
        (
            "path_a,path_b,label,operations\na.png,b.png,0,hflip\n",
            "row 2: label 0 says no duplication, operations say flip",
        ),
        (
            "path_a,path_b,label,operations\na.png,b.png,1,none\n",
            "row 2: label 1 says duplication, operations say 'none'",
        ),
    ],
)
def test_a_bad_pair_manifest_is_refused_with_its_row_before_any_pair_is_scored(model, tmp_path, content, message):
    (tmp_path / "pairs.csv").write_text(content)
    with pytest.raises(InferenceFailed, match=message):
        run(model, tmp_path / "pairs.csv", tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"path_a": "a.png", "path_b": "b.png"}\n["x"]\n', "pairs.jsonl:2: each line must be a JSON object"),
        ("5\n", "pairs.jsonl:1: each line must be a JSON object"),
        ('{"path_a": "a.png", "path_b": "b.png"}\n{"path_a": \n', "pairs.jsonl:2: not JSON"),
        (
            '{"path_a": "a.png", "path_b": "b.png"}\n{"path_a": "a.png", "path_b": "c.png", "label": 3}\n',
            "row 2: label",
        ),
    ],
)
def test_a_jsonl_pair_manifest_with_a_line_that_is_no_object_is_refused_by_its_line(model, tmp_path, content, message):
    (tmp_path / "pairs.jsonl").write_text(content)
    with pytest.raises(InferenceFailed, match=message):
        run(model, tmp_path / "pairs.jsonl", tmp_path / "out.csv")


def test_each_panels_mask_has_a_name_of_its_own_that_an_added_input_does_not_take(model, panels, tmp_path):
    """Masks are named by their pair and panel: names with dots kept apart (fig.1 / fig.2 wrote one
    file), and a resume after an input was added does not write over an earlier pair's mask."""
    folder = tmp_path / "in" / "fig"
    folder.mkdir(parents=True)
    for name, source in (("fig.1.png", "a.png"), ("fig.2.png", "b.png"), ("other.png", "c.png")):
        (folder / name).write_bytes((panels / "fig" / source).read_bytes())
    output = tmp_path / "pairs.csv"
    run(model, tmp_path / "in", output, "save_masks=true")
    first = {r["path"]: r for r in read_results(output)}
    copied = next(r for r in first.values() if r["label"] == 1)
    assert copied["mask_a"] != copied["mask_b"] and read_mask(copied["mask_a"]).mean() > 0.5
    before = {side: Path(copied[f"mask_{side}"]).read_bytes() for side in "ab"}
    (folder / "added.png").write_bytes((panels / "fig" / "chart1.png").read_bytes())
    run(model, tmp_path / "in", output, "save_masks=true", "resume=true")
    rows = read_results(output)
    assert len(rows) == 6 and len({r["mask_a"] for r in rows}) == 6
    assert {side: Path(copied[f"mask_{side}"]).read_bytes() for side in "ab"} == before


def test_a_run_inside_its_input_folder_pairs_no_file_of_its_own_and_no_image_with_itself(model, panels, tmp_path):
    folder = tmp_path / "fig"
    folder.mkdir()
    for name in ("a.png", "b.png", "c.png"):
        (folder / name).write_bytes((panels / "fig" / name).read_bytes())
    for _ in range(2):  # the second run finds the first one's masks in the folder
        result = run(model, tmp_path, folder / "pairs.csv", "save_masks=true")
        assert result["counts"]["ok"] == 3
    (tmp_path / "twice.csv").write_text("path,review\nfig/a.png,r1\nfig/c.png,r1\nfig/a.png,r1\n")
    rows = read_results(
        run(model, tmp_path / "twice.csv", tmp_path / "twice_scores.csv") and tmp_path / "twice_scores.csv"
    )
    assert [(Path(r["path_a"]).name, Path(r["path_b"]).name) for r in rows] == [("a.png", "c.png")]


# devices=2 is refused by the same check; it is not run here, where it would start processes in the test worker
@pytest.mark.parametrize("option", ["shard=0/2", "robustness=true", "tiles=true", "overlays=true"])
def test_options_of_image_runs_that_pairs_do_not_take_are_refused(model, panels, tmp_path, option):
    with pytest.raises(InferenceFailed, match="a pair detector scores its pairs in one process"):
        run(model, panels / "pairs.csv", tmp_path / "out.csv", option)
    assert not (tmp_path / "out.csv").exists()


def test_each_panel_of_a_group_larger_than_the_default_cache_is_described_once(monkeypatch):
    import inference.pairs as pairs_module

    paths = [f"fig/{i}.png" for i in range(70)]
    pairs = [{"path_a": a, "path_b": b, "group": "fig"} for i, a in enumerate(paths) for b in paths[i + 1 :]]
    described = []

    class Counting:
        def describe(self, image):
            described.append(image)
            return image

    monkeypatch.setattr(pairs_module, "read_image", lambda path: path)
    cache = pairs_module.PanelCache(Counting(), pairs_module.cache_size(pairs))
    for pair in pairs:
        cache.get(pair["path_a"]), cache.get(pair["path_b"])
    assert len(described) == 70 and pairs_module.cache_size(pairs[:3]) == 64


def test_a_pair_listed_twice_is_scored_once_and_an_image_alone_in_its_group_is_said(model, panels, tmp_path, caplog):
    import logging

    fig = panels / "fig"
    (tmp_path / "twice.csv").write_text(f"path_a,path_b\n{fig}/a.png,{fig}/b.png\n{fig}/a.png,{fig}/b.png\n")
    with caplog.at_level(logging.INFO):
        result = run(model, tmp_path / "twice.csv", tmp_path / "twice_scores.csv")
    assert result["counts"]["ok"] == 1 and result["counts"]["skipped"] == 0
    assert "lists 1 pair(s) more than once" in caplog.text
    (tmp_path / "groups.csv").write_text(f"path,review\n{fig}/a.png,r1\n{fig}/b.png,r1\n{fig}/c.png,r2\n")
    with caplog.at_level(logging.INFO):
        run(model, tmp_path / "groups.csv", tmp_path / "group_scores.csv")
    assert "1 image(s) have no other image in their review: they are in no pair" in caplog.text


def test_an_image_sent_in_two_reviews_is_paired_inside_each_and_a_pair_both_hold_is_scored_once(panels, tmp_path):
    from inference.pair_inputs import group_pairs

    fig = panels / "fig"
    listed = [("a", "R1"), ("b", "R1"), ("a", "R2"), ("c", "R2"), ("b", "R2")]
    (tmp_path / "claims.csv").write_text("path,review\n" + "".join(f"{fig}/{n}.png,{r}\n" for n, r in listed))
    pairs = [(Path(p["path_a"]).stem, Path(p["path_b"]).stem, p["group"]) for p in group_pairs(tmp_path / "claims.csv")]
    assert pairs == [("a", "b", "R1"), ("a", "c", "R2"), ("c", "b", "R2")]  # a was R2's only: R1's a-b went unscored


def test_the_masks_of_two_panels_of_one_name_in_two_folders_are_two_files(model, panels, tmp_path):
    for folder, source in (("x", "a.png"), ("y", "b.png")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "panel.png").write_bytes((panels / "fig" / source).read_bytes())
    (tmp_path / "pairs.csv").write_text("path_a,path_b\nx/panel.png,y/panel.png\n")
    run(model, tmp_path / "pairs.csv", tmp_path / "out.csv", "save_masks=true")
    (row,) = read_results(tmp_path / "out.csv")
    assert row["label"] == 1 and row["mask_a"] != row["mask_b"]
    assert Path(row["mask_a"]).is_file() and Path(row["mask_b"]).is_file()
