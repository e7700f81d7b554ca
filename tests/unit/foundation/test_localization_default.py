"""`python train.py detector=<a localizer>` with no data argument gets the embedded localization set."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hydra.core.global_hydra import GlobalHydra
from PIL import Image

import benchmarks.localization_default as default_benchmark
from benchmarks.localization_default import training_length
from datamodules.localization import LocalizationDataModule
from detectors.run_config import apply_data_preprocess, data_config
from tests.helpers import compose_config


def test_localizers_get_the_localization_variant_of_the_default_data_and_classifiers_do_not(tmp_path):
    cfg = compose_config("train", ["detector=seg_tiny", f"paths.root_dir={tmp_path}"])
    GlobalHydra.instance().clear()
    localizer = data_config(cfg.data, localizer=True)
    assert localizer._target_ == "datamodules.localization.LocalizationDataModule"
    assert localizer.create._target_ == "synthesis.localization.make_embedded_localization_manifest"
    classifier = data_config(cfg.data, localizer=False)
    assert classifier._target_ == "datamodules.classification.ManifestDataModule" and "localizers" not in classifier
    # interpolations into the rest of the config (paths.data_dir) still resolve
    assert classifier.manifest == f"{tmp_path}/data/embedded/manifest.csv"
    assert localizer.root == f"{tmp_path}/data/embedded_localization"
    cropped = compose_config("train", ["detector=seg_tiny", "data.localizers.eval_whole=false"])  # as the guide says
    GlobalHydra.instance().clear()
    assert localizer.eval_whole is True and cropped.data.localizers.eval_whole is False
    explicit = compose_config("train", ["detector=seg_tiny", "data=localization"])
    GlobalHydra.instance().clear()
    assert data_config(explicit.data, localizer=True) is explicit.data  # a chosen data config is used as it is


def size_trained(overrides: list[str]) -> int:
    cfg = compose_config("train", ["paths.root_dir=/nowhere", *overrides])
    GlobalHydra.instance().clear()
    apply_data_preprocess(cfg)
    assert "detector_preprocess" not in data_config(cfg.data, localizer=False)  # no DataModule setting
    return cfg.detector.net.preprocess.size


def test_the_quickstart_crop_size_is_the_classifiers_and_localizers_keep_their_own():
    assert size_trained(["detector=npr_tiny"]) == 96  # the 96 px crops whole, not cut to 64
    assert size_trained(["detector=npr_tiny", "detector.net.preprocess.size=32"]) == 32  # the command line wins
    assert size_trained(["detector=npr_tiny", "detector.net.preprocess={size: 40, mode: resize}"]) == 40  # so does this
    # self-matching resized to 96 px found nothing; a learned localizer keeps the size it was built for
    assert size_trained(["detector=copy_move_selfmatch_tiny"]) == 384
    assert size_trained(["detector=seg_tiny"]) == 64


def write_tiny_localization_set(folder: Path, seed: int, split_fractions) -> Path:
    rng = np.random.default_rng(seed)
    (folder / "masks").mkdir(parents=True)
    rows = []
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        row = {
            "path": f"{i}.png",
            "label": i % 2,
            "mask": "",
            "source": f"photo{i // 2}",
            "split": ("train", "val", "test")[i % 3],
        }
        if i % 2:
            mask = np.zeros((40, 40), np.uint8)
            mask[5:15, 5:15] = 255
            Image.fromarray(mask).save(folder / "masks" / f"{i}.png")
            row["mask"] = f"masks/{i}.png"
        rows.append(row)
    with open(folder / "manifest.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder / "manifest.csv"


def test_the_datamodule_makes_a_missing_dataset_once_with_the_maker_it_is_handed(tmp_path):
    calls = []

    def maker(folder, seed, split_fractions):
        calls.append((Path(folder), seed, tuple(split_fractions)))
        return write_tiny_localization_set(Path(folder), seed, split_fractions)

    root = tmp_path / "embedded_localization"
    module = LocalizationDataModule(
        root=str(root),
        create=maker,
        batch_size=4,
        num_workers=0,
        seed=3,
        preprocess={"size": 32, "mode": "center_crop"},
    )
    module.prepare_data()
    module.prepare_data()  # the manifest exists now: nothing is made again
    assert calls == [(root, 3, (0.8, 0.1, 0.1))]
    module.setup("fit")
    batch = next(iter(module.train_dataloader()))
    assert batch["mask"].shape[1:] == (1, 32, 32) and "edge" in batch


def test_the_default_localization_benchmark_reads_a_training_free_checkpoint_as_trained_for_nothing():
    assert training_length({"hyper_parameters": {}, "state_dict": {}, "calibration": {}}) == {"epochs": 0, "steps": 0}
    assert training_length({"epoch": 29, "global_step": 600}) == {"epochs": 30, "steps": 600}


def test_the_benchmark_scores_the_split_it_is_asked_for_so_settings_are_chosen_on_validation(tmp_path, monkeypatch):
    from detectors.registry import create_module
    from tools.released import save_checkpoint

    manifest = write_tiny_localization_set(tmp_path / "set", 0, None)
    checkpoint = save_checkpoint(create_module("noise_level_tiny").eval(), tmp_path / "noise_level.ckpt")
    scored = {}

    class Scored(Exception):
        pass

    def record(net, records, perturbation):
        scored[perturbation] = sorted(Path(r.path).name for r in records)
        raise Scored

    monkeypatch.setattr(default_benchmark, "score_split", record)
    for split, rows in (("val", [1, 4, 7, 10]), ("test", [2, 5, 8, 11])):
        with pytest.raises(Scored):
            default_benchmark.per_operation(checkpoint, manifest, split)
        assert scored == {"clean": sorted(f"{i}.png" for i in rows)}


def test_a_set_made_with_another_seed_is_refused_not_trained_on_as_if_it_were_the_one_asked_for(tmp_path):
    import json

    from datamodules.records import LayoutError

    root = tmp_path / "embedded_localization"
    write_tiny_localization_set(root, 0, None)
    (root / ".items").mkdir()
    (root / ".items" / "spec.json").write_text(json.dumps({"seed": 0, "split_fractions": [0.8, 0.1, 0.1]}))
    made = LocalizationDataModule(root=str(root), create=lambda *a, **k: pytest.fail("made again"), seed=0)
    made.prepare_data()  # the set asked for: used as it is
    other = LocalizationDataModule(root=str(root), create=lambda *a, **k: pytest.fail("made again"), seed=1)
    with pytest.raises(LayoutError, match="holds the set made with seed 0 .* this run asks for seed 1"):
        other.prepare_data()


def test_the_benchmark_gives_a_set_drawn_with_another_seed_its_own_folder_runs_and_results(tmp_path, monkeypatch):
    trained = []

    def run_train(detector, data_dir, run_dir, overrides):
        trained.append((data_dir.name, run_dir.name))
        return {"train_py_metrics": {"checkpoint": str(run_dir / "best.ckpt")}}

    monkeypatch.setattr(default_benchmark, "run_train", run_train)
    monkeypatch.setattr(default_benchmark, "per_operation", lambda *a: {})
    monkeypatch.setattr(default_benchmark, "markdown", lambda *a: "table")
    out = ["--detector", "noise_level_tiny", "--output-dir", str(tmp_path)]
    default_benchmark.main(out)
    default_benchmark.main([*out, "data.localizers.seed=2"])
    assert trained == [("data", "noise_level_tiny_seed0"), ("data_seed2", "noise_level_tiny_seed0_data_seed2")]
    assert {p.name for p in tmp_path.glob("results_*.json")} == {
        "results_noise_level_tiny.json",
        "results_noise_level_tiny_seed2.json",
    }
    with pytest.raises(SystemExit):
        default_benchmark.main([*out, "--runs", "0"])


def test_a_recipe_on_the_default_data_keeps_its_detector_s_size():
    """An experiment sets what it trains at: the quickstart's 96 px would override a user's recipe."""
    from omegaconf import open_dict

    cfg = compose_config("train", ["paths.root_dir=/nowhere", "detector=npr_tiny"])
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.hydra.overrides.task.append("experiment=mine")  # as `python train.py experiment=mine` records it
    apply_data_preprocess(cfg)
    assert cfg.detector.net.preprocess.size == 64


def test_a_resume_compares_what_validation_reads_not_the_training_draws():
    from omegaconf import OmegaConf

    from detectors.run_config import evaluation_settings

    def settings(**data):
        cfg = OmegaConf.create({"monitor": "val/auroc", "target_fpr": 0.01, "calibration": {"by": None}})
        return evaluation_settings(cfg, OmegaConf.create({"manifest": "m.csv", "seed": 0, **data}))

    assert settings(augment={"hflip": 0.5}, batch_size=8, pseudo_fakes=0.3) == settings()  # the best stays
    assert settings(manifest="other.csv") != settings() and settings(seed=1) != settings()
