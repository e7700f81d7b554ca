"""Leave-one-category-out splits: the held-out kind of genuine image is never seen in training, and
no photo straddles splits (phone photos made from a bundled photo go to test with it)."""

from __future__ import annotations

import pytest

from benchmarks.cross_generator import SplitError
from benchmarks.leave_one_category_out import category_split, experiment_settings, main, row
from datamodules.records import Record, read_manifest, write_manifest

KINDS = ("chart", "gel", "fluorescence")


def manifest() -> list[Record]:
    """Per kind 10 sources with two genuine panels, a latent_ae fake and a region edit each; plus
    phone photos sharing their source with a photograph."""
    records = []
    for kind in KINDS:
        for s in range(10):
            source = f"{kind}{s}"
            for p in range(2):
                records.append(Record(f"real/{source}_{p}.png", 0, group="genuine", category=kind, source=source))
            records.append(Record(f"fake/latent_ae/{source}.png", 1, group="latent_ae", category=kind, source=source))
            records.append(
                Record(f"fake/region/{source}.png", 1, group="ae_transposed_region", category=kind, source=source)
            )
    for s in range(4):
        records.append(Record(f"real/photo{s}.png", 0, group="genuine", category="photo", source=f"photo{s}"))
        records.append(Record(f"real/phone{s}.png", 0, group="genuine", category="phone_photo", source=f"photo{s}"))
        records.append(
            Record(f"fake/ddpm/photo{s}.png", 1, group="ddpm_pixel_sdedit_0.3", category="photo", source=f"photo{s}")
        )
    return records


@pytest.mark.parametrize("held_out", [*KINDS, "phone_photo"])
def test_the_held_out_category_is_only_in_test_and_no_photo_straddles_splits(held_out):
    out, summary = category_split(manifest(), held_out, seed=1)
    seen = {r.category for r in out if r.split in ("train", "val")}
    assert held_out not in seen and seen
    assert {r.split for r in out if r.category == held_out} == {"test"}
    split_of: dict = {}
    for r in out:
        assert split_of.setdefault(r.source, r.split) == r.split
    assert not any(r.group == "ae_transposed_region" for r in out)  # region edits: a localization task
    assert {r.group for r in out if r.label == 1} <= {"latent_ae", "ddpm_pixel"}
    assert summary["counts"]["val"]["genuine"] and summary["counts"]["train"]["fake"]
    for kind in set(KINDS) - {held_out}:  # each seen kind is cut by itself: it trains, calibrates and is tested
        assert {r.split for r in out if r.category == kind} == {"train", "val", "test"}


def test_unknown_category_is_refused_and_split_only_writes_the_manifests(tmp_path, capsys):
    with pytest.raises(SplitError, match="not in the manifest"):
        category_split(manifest(), "western_blot")
    path = tmp_path / "manifest.csv"
    write_manifest(manifest(), path)
    assert (
        main(["--manifest", str(path), "--categories", "gel", "--output-dir", str(tmp_path / "out"), "--split-only"])
        == 0
    )
    written = read_manifest(tmp_path / "out" / "holdout_gel" / "manifest.csv")
    assert {r.split for r in written if r.category == "gel"} == {"test"}
    assert main(["--manifest", str(path), "--categories", "western_blot", "--split-only"]) == 2
    assert "not in the manifest" in capsys.readouterr().err


def test_table_row_reads_the_held_out_category_beside_the_seen_ones():
    metrics = {
        "by_category": {
            "gel": {"tnr": 0.5, "n_neg": 20, "tpr": 0.9, "auroc": 0.8},
            "chart": {"tnr": 1.0, "n_neg": 30},
            "photo": {"tnr": 0.9, "n_neg": 10},
        }
    }
    cells = row("gel", metrics, None)
    assert cells[:4] == ["gel", "0.500 (20)", "0.900", "0.800"]
    assert cells[4] == "0.975 (40)" and cells[5] == "photo 0.900"
    assert row("gel", None, "train.py exited 1")[1] == "failed: train.py exited 1"


def test_an_experiment_gives_its_detector_epochs_and_levers_but_not_its_data_folder():
    """The recipe's levers reach each split's training; its own data folder and loader processes do
    not (each split is a manifest, read in the benchmark's one process)."""
    detector, epochs, overrides, left_out = experiment_settings("generated_kinds")
    assert (detector, epochs) == ("dct", 20)
    assert 'data.pseudo_fake_skip_categories=["fluorescence", "electron_micrograph", "blot", "gel"]' in overrides
    assert 'data.genuine_noise_model="shot"' in overrides
    assert {"++data.augment.transpose=0.5", "++data.augment.channel_shuffle=0.5"} <= set(overrides)
    assert {'calibration.by="category"', 'calibration.rule="bound"'} <= set(overrides)
    assert "++detector.net.preprocess.size=64" in overrides  # its detector settings too
    assert not [o for o in experiment_settings("generated_kinds", size=32)[2] if "preprocess.size" in o]  # --size's
    assert not [o for o in overrides if o.startswith(("data.root", "data.num_workers", "data.exclude_groups"))]
    assert left_out == ["data.exclude_groups"]  # a layout's option, named to the user; the folder is replaced


def test_a_recipe_setting_the_split_manifests_cannot_take_is_named_to_the_user(tmp_path, capsys):
    path = tmp_path / "manifest.csv"
    write_manifest(manifest(), path)
    arguments = ["--manifest", str(path), "--categories", "gel", "--output-dir", str(tmp_path / "out"), "--split-only"]
    assert main([*arguments, "--experiment", "generated_kinds"]) == 0
    assert "not passed to train.py, a manifest's data does not take data.exclude_groups" in capsys.readouterr().out
    assert main(arguments) == 0
    assert "not passed" not in capsys.readouterr().out


def test_a_category_held_out_with_the_one_asked_for_is_named_and_not_counted_as_seen():
    """Phone photos are made from the bundled photographs: holding out photo holds them out too."""
    _, summary = category_split(manifest(), "photo", seed=1)
    assert summary["held_with"] == ["phone_photo"]
    metrics = {
        "by_category": {
            "photo": {"tnr": 0.9, "n_neg": 4},
            "phone_photo": {"tnr": 0.5, "n_neg": 4},
            "chart": {"tnr": 1.0, "n_neg": 6},
        }
    }
    cells = row("photo", metrics, None, summary["held_with"])
    assert cells[0] == "photo (with phone_photo)" and cells[4] == "1.000 (6)" and cells[5] == "chart 1.000"


def test_a_resume_reuses_splits_and_runs_only_of_the_same_options(tmp_path, monkeypatch):
    import benchmarks.leave_one_category_out as loco

    path = tmp_path / "manifest.csv"
    write_manifest(manifest(), path)
    trained = []

    def train_detector(detector, split_manifest, run, epochs, size, seed, overrides, settings):
        trained.append((epochs, seed))
        run.mkdir(parents=True, exist_ok=True)
        (run / "metrics.json").write_text("{}")
        (run / "benchmark_settings.json").write_text(__import__("json").dumps(settings))
        return {}, 0.0, None

    monkeypatch.setattr(loco, "train_detector", train_detector)
    common = ["--manifest", str(path), "--categories", "gel", "--output-dir", str(tmp_path / "out"), "--resume"]
    split = tmp_path / "out" / "holdout_gel" / "manifest.csv"
    assert main([*common, "--epochs", "1"]) == 0
    first = split.read_bytes()
    assert main([*common, "--epochs", "1"]) == 0  # the same options: reused
    assert main([*common, "--epochs", "2"]) == 0  # other epochs: trained again
    assert main([*common, "--epochs", "2", "--seed", "5"]) == 0  # another seed: another split, trained again
    assert trained == [(1, 0), (2, 0), (2, 5)] and split.read_bytes() != first
    write_manifest([r for r in manifest() if r.source != "gel3"], path)  # the same path, other contents
    assert main([*common, "--epochs", "2", "--seed", "5"]) == 0  # reused the old split and run before
    assert trained[-1] == (2, 5) and len(trained) == 4 and b"gel3" not in split.read_bytes()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--experiment", "nosuch"], "no such recipe"),
        (["--epochs", "0"], "at least 1"),
        (["--size", "-5"], "at least 1"),
        (["--fractions", "0", "0", "0"], "add up to more than 0"),
    ],
)
def test_a_mistyped_recipe_or_count_is_refused_in_one_line(arguments, message, tmp_path, capsys):
    path = tmp_path / "manifest.csv"
    write_manifest(manifest(), path)
    with pytest.raises(SystemExit) as refused:
        main(["--manifest", str(path), "--output-dir", str(tmp_path / "out"), *arguments])
    assert refused.value.code == 2 and message in capsys.readouterr().err
