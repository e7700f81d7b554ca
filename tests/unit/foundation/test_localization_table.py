"""The held-out localization table: kinds reported apart, levers chosen on validation only, maps of
perturbed images compared at the original size, and the table says when a target fails."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from benchmarks import localization_table as table
from benchmarks.localization_table_markdown import markdown
from datamodules.io import write_image
from datamodules.records import Record, write_manifest
from synthesis.genuine_kinds import GENUINE_KINDS


def square_mask(size: int = 32) -> np.ndarray:
    mask = np.zeros((size, size), np.uint8)
    mask[8:24, 8:24] = 1
    return mask


def item(op, kind, prob, mask=None, score=0.5):
    return {"op": op, "kind": kind, "mask": mask, "prob": np.asarray(prob, np.float32), "score": score}


def test_every_generated_kind_of_genuine_image_belongs_to_a_reported_kind_group():
    for category in ("photo", *GENUINE_KINDS):
        assert table.kind_group(category) in table.KIND_GROUPS
    assert table.kind_group("my_own_category") == "other"
    assert table.kind_group("gel") == "figure" and table.kind_group("histology") == "micrograph"


def test_a_kind_that_fails_is_reported_beside_the_mean_over_kinds():
    mask = square_mask()
    scored = [
        item("copy_move", "photograph", mask * 0.9, mask, 0.9),
        item("copy_move", "figure", np.zeros((32, 32)), mask, 0.1),
        item(None, "photograph", np.zeros((32, 32)), score=0.2),
        item(None, "figure", np.full((32, 32), 0.7), score=0.3),
    ]
    found = table.split_metrics(scored)["copy_move"]
    assert found["photograph"]["pixel_f1"] == pytest.approx(1.0)
    assert found["figure"]["pixel_f1"] == pytest.approx(0.0)
    assert found["all"]["pixel_f1"] == pytest.approx(0.5)
    assert found["figure"]["pixel_fpr_genuine"] == pytest.approx(1.0)  # its genuine image is all marked
    assert found["photograph"]["pixel_fpr_genuine"] == pytest.approx(0.0)
    assert (found["all"]["n_masks"], found["all"]["n_genuine"]) == (2, 2)
    assert "splicing" not in table.split_metrics(scored)  # no forgery of it: no row, not a row of NaNs


def test_the_validation_threshold_is_the_best_f1_that_keeps_genuine_pixels_unmarked():
    mask = square_mask()
    inside = np.where(mask, 0.42, 0.1)
    genuine_low = [item(None, "photograph", np.full((32, 32), 0.1))]
    chosen = table.choose_threshold([item("splicing", "photograph", inside, mask), *genuine_low])
    assert 0.1 < chosen["threshold"] <= 0.42 and chosen["val_pixel_f1"] == pytest.approx(1.0)
    # a genuine image at 0.3 everywhere forbids every threshold that would mark it
    genuine_high = [item(None, "photograph", np.full((32, 32), 0.3))]
    chosen = table.choose_threshold([item("splicing", "photograph", inside, mask), *genuine_high])
    assert 0.3 < chosen["threshold"] <= 0.42 and chosen["val_pixel_fpr_genuine"] == 0.0


def result(val_f1: float, test_f1: float, fpr: float = 0.0, val_fpr: float = 0.0) -> dict:
    row = lambda f1, marked: {"all": {"pixel_f1": f1, "pixel_fpr_genuine": marked}}  # noqa: E731
    return {"val": {"splicing": row(val_f1, val_fpr)}, "test": {"clean": {"splicing": row(test_f1, fpr)}}}


def test_the_best_entry_is_chosen_on_validation_and_the_target_needs_a_low_genuine_fpr():
    best = table.best_entries({"a": result(0.8, 0.55), "b": result(0.4, 0.9)})["splicing"]
    assert best["localizer"] == "a" and best["test"]["all"]["pixel_f1"] == 0.55 and not best["holds"]
    assert table.best_entries({"a": result(0.8, 0.65)})["splicing"]["holds"]
    assert not table.best_entries({"a": result(0.8, 0.65, fpr=0.2)})["splicing"]["holds"]


def test_a_localizer_that_marks_genuine_validation_images_cannot_be_the_best_entry():
    marks_everything = result(0.45, 0.3, fpr=0.99, val_fpr=0.99)
    best = table.best_entries({"everything": marks_everything, "b": result(0.3, 0.35, val_fpr=0.04)})["splicing"]
    assert best["localizer"] == "b" and best["val_pixel_f1"] == 0.3
    # when none keeps to the bound, the best F1 is still reported (and cannot hold)
    best = table.best_entries({"everything": marks_everything, "c": result(0.3, 0.35, val_fpr=0.2)})["splicing"]
    assert best["localizer"] == "everything" and not best["holds"]


def test_an_operation_with_no_target_gets_a_best_entry_that_neither_holds_nor_fails():
    row = lambda f1: {"all": {"pixel_f1": f1, "pixel_fpr_genuine": 0.0}}  # noqa: E731
    damage = {"val": {"damage": row(0.8)}, "test": {"clean": {"damage": row(0.9)}}}
    best = table.best_entries({"a": damage})["damage"]
    assert best["localizer"] == "a" and best["target"] is None and best["holds"] is None
    summary = {"n_val": 1, "n_test": 1, "best": {"damage": best}, "localizers": {}}
    assert "| Damage | a | 0.800 | 0.900 | 0.000 | none set | - |" in markdown(summary)


def test_a_region_edit_named_after_its_generator_is_scored_as_an_ai_region_edit(tmp_path):
    from detectors.registry import create_detector

    write_image(tmp_path / "a.png", np.full((32, 32, 3), 128, np.uint8))
    write_image(tmp_path / "m.png", square_mask()[..., None].repeat(3, 2) * 255)
    edit = Record(str(tmp_path / "a.png"), 1, str(tmp_path / "m.png"), "ae_nearest_conv_region", "photo")
    scored, _ = table.score_split(create_detector("noise_level_tiny").eval(), [edit], "clean")
    assert scored[0]["op"] == "region_edit" and "region_edit" in table.OPERATIONS
    assert "damage" in table.OPERATIONS and table.dataset_spec()["ops"]["damage"] > 0


def test_a_set_made_with_other_settings_is_refused_rather_than_scored_as_this_one(tmp_path):
    from benchmarks.localization_quality import make_data

    folder = tmp_path / "data"
    manifest = write_tiny_set(folder)
    with pytest.raises(ValueError, match="made with other settings .*none recorded.*delete it"):
        make_data(folder, table.dataset_spec())  # an earlier version's set: no settings recorded
    (folder / "dataset_spec.json").write_text(json.dumps({**table.dataset_spec(), "ops": {"copy_move": 0.75}}))
    with pytest.raises(ValueError, match="made with other settings"):
        make_data(folder, table.dataset_spec())
    (folder / "dataset_spec.json").write_text(json.dumps(table.dataset_spec()))
    assert make_data(folder, table.dataset_spec()) == manifest  # the same settings: reused, not made again


def test_a_rescaled_image_is_scored_and_its_map_brought_back_to_the_original_size(tmp_path):
    from detectors.registry import create_detector

    rng = np.random.default_rng(0)
    write_image(tmp_path / "a.png", rng.integers(0, 255, (48, 40, 3), dtype=np.uint8))
    records = [Record(str(tmp_path / "a.png"), 0, group="genuine", category="gel")]
    net = create_detector("noise_level_tiny").eval()
    for condition in table.CONDITIONS:
        scored, seconds = table.score_split(net, records, condition)
        assert scored[0]["prob"].shape == (48, 40) and scored[0]["kind"] == "figure" and seconds > 0


def write_tiny_set(folder, named_by_photo: bool = False):
    """Per split three photographs: a genuine one and a copy-move forgery of it with its mask, of
    category `photo` (or, `named_by_photo`, named after the photo, as a set of photos only is)."""
    rng = np.random.default_rng(1)
    records = []
    for split in ("train", "val", "test"):
        for index in range(3):
            source = f"{split}{index}"
            pixels = rng.integers(60, 200, (48, 48, 3), dtype=np.uint8)
            write_image(folder / f"real/{source}.png", pixels)
            category = source if named_by_photo else "photo"
            genuine = Record(str(folder / f"real/{source}.png"), 0, group="genuine", category=category, source=source)
            records.append(replace(genuine, split=split))
            forged = pixels.copy()
            forged[8:24, 8:24] = pixels[24:40, 24:40]
            write_image(folder / f"fake/{source}.png", forged)
            write_image(folder / f"mask/{source}.png", square_mask(48)[..., None].repeat(3, 2) * 255)
            records.append(
                Record(
                    str(folder / f"fake/{source}.png"),
                    1,
                    str(folder / f"mask/{source}.png"),
                    "copy_move",
                    category,
                    source=source,
                    split=split,
                )
            )
    write_manifest(records, folder / "manifest.csv")
    return folder / "manifest.csv"


def test_each_learned_run_is_trained_with_its_own_epochs_and_minutes(tmp_path, monkeypatch):
    calls = {}

    def record(spec, data, run, epochs, minutes, reuse):
        calls[spec] = (run.name, epochs, minutes, reuse)
        return run / "checkpoints" / "best.ckpt", {}

    monkeypatch.setattr(table, "train", record)
    specs = ["seg_tiny", "evidence_tiny"]
    minutes, epochs = table.per_spec(["30"], specs), table.per_spec(["150", "evidence_tiny=100"], specs, "--epochs", 30)
    table.learned_checkpoints(specs, tmp_path, tmp_path / "out", minutes, epochs)
    assert calls == {"seg_tiny": ("seg_tiny", 150, 30.0, True), "evidence_tiny": ("evidence_tiny", 100, 30.0, True)}


def test_the_script_writes_the_table_into_the_docs_between_its_markers(tmp_path, monkeypatch):
    manifest = write_tiny_set(tmp_path / "data")
    monkeypatch.setattr(table, "make_data", lambda folder, spec: manifest)
    docs = tmp_path / "page.md"
    docs.write_text(f"before\n{table.MARKERS[0]}\nlast run's table\n{table.MARKERS[1]}\nafter\n")
    arguments = ["--localizers", "noise_level_tiny", "--output-dir", str(tmp_path / "out"), "--docs", str(docs)]
    assert table.main(arguments) == 0
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    assert (summary["n_val"], summary["n_test"]) == (6, 6)
    found = summary["localizers"]["noise_level_tiny"]
    assert set(found["test"]) == set(table.CONDITIONS) and found["test"]["clean"]["copy_move"]["all"]["n_masks"] == 3
    text = docs.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "last run's" not in text
    assert "#### Copy-move" in text and "noise_level_tiny" in text and "F1 JPEG 75" in text
    assert "#### Splicing" not in text  # no splice in the set: no empty table
    assert markdown(summary) in text


def test_the_summary_names_the_set_it_scored_when_learned_localizers_are_in_it(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import inference.runtime
    from detectors.registry import create_detector

    manifest = write_tiny_set(tmp_path / "data")
    monkeypatch.setattr(table, "make_data", lambda folder, spec: manifest)
    budget = {"seconds": 60.0, "steps": 10, "epochs": 1}
    monkeypatch.setattr(
        table, "learned_checkpoints", lambda specs, *_: {s: (tmp_path / "best.ckpt", budget) for s in specs}
    )
    trained = SimpleNamespace(net=create_detector("noise_level_tiny"))
    monkeypatch.setattr(inference.runtime, "load_checkpoint", lambda path: trained)
    arguments = ["--localizers", "--learned", "seg_tiny", "--output-dir", str(tmp_path / "out")]
    assert table.main(arguments) == 0
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    assert summary["spec"] == json.loads(json.dumps(table.dataset_spec()))  # not the last learned run's name
    assert summary["localizers"]["seg_tiny"]["learned"] and summary["localizers"]["seg_tiny"]["budget"] == budget


def test_a_set_drawn_with_another_seed_or_size_gets_its_own_folder_and_spec(tmp_path):
    default = table.data_folder(tmp_path)
    fresh = table.data_folder(tmp_path, kinds_per=24, seed=1)
    assert default == tmp_path / "data" and fresh != default
    assert table.data_folder(tmp_path, seed=2) not in (default, fresh)
    spec = table.dataset_spec(24, seed=1)
    assert spec["seed"] == 1 and set(spec["genuine_kinds"].values()) == {24}


def test_each_learned_localizer_trains_for_the_default_budget_and_epochs_unless_given_its_own():
    specs = ["seg_tiny", "evidence_tiny", "seg_tiny:evidence={noise_level: {}}"]
    assert table.per_spec(["3"], specs) == dict.fromkeys(specs, 3.0)
    given = table.per_spec(["evidence_tiny=10", "2.5"], specs)
    assert given == {"seg_tiny": 2.5, "evidence_tiny": 10.0, "seg_tiny:evidence={noise_level: {}}": 2.5}
    assert table.per_spec(["seg_tiny:evidence={noise_level: {}}=4"], specs)[specs[2]] == 4.0
    epochs = table.per_spec(["evidence_tiny=100"], specs, "--epochs", 30)
    assert epochs == {"seg_tiny": 30, "evidence_tiny": 100, "seg_tiny:evidence={noise_level: {}}": 30}
    with pytest.raises(ValueError, match="--minutes 'mvss_tiny=10' names 'mvss_tiny', which is not among --learned"):
        table.per_spec(["mvss_tiny=10"], specs)
    with pytest.raises(ValueError, match="--epochs 'ten': expected a number or SPEC=NUMBER"):
        table.per_spec(["ten"], specs, "--epochs", 30)


def test_each_generated_set_has_its_own_learned_runs(tmp_path, monkeypatch):
    runs = []
    monkeypatch.setattr(table, "train", lambda spec, data, run, *_, **__: runs.append(run) or (run, {}))
    for seed in (0, 1):
        folder = table.data_folder(tmp_path, seed=seed)
        table.learned_checkpoints(["seg_tiny"], folder, tmp_path, {"seg_tiny": 1.0}, {"seg_tiny": 1})
    assert runs[0] != runs[1] and runs[1].parent.name == table.data_folder(tmp_path, seed=1).name


def test_localizers_scored_by_an_earlier_invocation_on_the_same_set_stay_in_the_table(tmp_path, monkeypatch):
    manifest = write_tiny_set(tmp_path / "data")
    monkeypatch.setattr(table, "make_data", lambda folder, spec: manifest)
    out = ["--output-dir", str(tmp_path / "out")]
    assert table.main(["--localizers", "noise_level_tiny", *out]) == 0
    assert table.main(["--localizers", "jpeg_grid_tiny", *out]) == 0
    results = tmp_path / "out" / "results.json"
    assert set(json.loads(results.read_text())["localizers"]) == {"noise_level_tiny", "jpeg_grid_tiny"}
    assert table.main(["--localizers", "jpeg_grid_tiny", "--seed", "1", *out]) == 0  # another set: its own only
    assert set(json.loads(results.read_text())["localizers"]) == {"jpeg_grid_tiny"}


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--localizers", "nosuch"], "unknown detector 'nosuch'"),
        (["--localizers"], "nothing to score"),
        (["--localizers", "seg_tiny"], "--localizers seg_tiny: not training-free; give it to --learned"),
        (["--kinds-per", "-1"], "--kinds-per must be 0 or more"),
        (["--learned", "seg_tiny", "--epochs", "0"], "must be above 0"),
        (["--learned", "seg_tiny", "--minutes", "abc"], "expected a number"),
        (["--docs", "README.md"], "needs a file holding the markers"),
    ],
)
def test_a_mistyped_or_empty_run_is_refused_in_one_line_before_any_data_is_made(
    arguments, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(table, "make_data", lambda *_: pytest.fail("data made for a refused run"))
    with pytest.raises(SystemExit) as refused:
        table.main([*arguments, "--output-dir", str(tmp_path)])
    assert refused.value.code == 2 and message in capsys.readouterr().err


def test_a_set_of_photographs_only_is_reported_as_photographs(tmp_path, monkeypatch):
    manifest = write_tiny_set(tmp_path / "data", named_by_photo=True)
    monkeypatch.setattr(table, "make_data", lambda folder, spec: manifest)
    table.main(["--localizers", "noise_level_tiny", "--kinds-per", "0", "--output-dir", str(tmp_path / "out")])
    scored = json.loads((tmp_path / "out" / "results.json").read_text())["localizers"]["noise_level_tiny"]
    assert set(scored["test"]["clean"]["copy_move"]) == {"all", "photograph"}
