"""infer.py with a pair detector: all pairs of a folder, pair manifests with truth, bad panels, resume."""

from __future__ import annotations

import json
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


def test_a_resumed_run_scores_only_the_missing_pairs(model, panels, tmp_path):
    output = tmp_path / "pairs.csv"
    run(model, panels / "pairs.csv", output)
    lines = output.read_text().splitlines()
    output.write_text("\n".join(lines[:2]) + "\n")  # as if stopped after the first pair
    result = run(model, panels / "pairs.csv", output, "resume=true")
    assert result["counts"]["skipped"] == 1 and len(read_results(output)) == 3


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
    ],
)
def test_a_bad_pair_manifest_is_refused_with_its_row_before_any_pair_is_scored(model, tmp_path, content, message):
    (tmp_path / "pairs.csv").write_text(content)
    with pytest.raises(InferenceFailed, match=message):
        run(model, tmp_path / "pairs.csv", tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()
