"""What a training run's outcome depends on: the checkpoint it resumes, the seed, the calibration target.

Each test compares weights or calibration, not counters that a run ignoring the setting would
reach as well.
"""

from __future__ import annotations

import math

import lightning as L
import torch

from tests.helpers import prepare_train_config, small_train_overrides
from train import train

# one batch per epoch (the whole train split), no random flips, a constant learning rate: the
# outcome of an epoch does not depend on the order of the images or on the number of epochs planned
ORDER_FREE = [
    "data.batch_size=1000",
    "+data.augment.hflip=0",
    "detector.scheduler.warmup_fraction=0",
    "detector.scheduler.min_lr_ratio=1.0",
    "detector.optimizer.lr=2e-3",
    "test=false",
]


def last_checkpoint(run) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)


def assert_same_state(actual: dict, expected: dict, atol: float = 1e-5) -> None:
    assert actual["state_dict"].keys() == expected["state_dict"].keys()
    for key, value in expected["state_dict"].items():
        torch.testing.assert_close(actual["state_dict"][key], value, atol=atol, rtol=0, msg=key)
    for got, want in zip(actual["optimizer_states"], expected["optimizer_states"], strict=True):
        assert got["state"].keys() == want["state"].keys()
        for index, state in want["state"].items():
            for name, value in state.items():
                torch.testing.assert_close(
                    got["state"][index][name], value, atol=atol, rtol=0, msg=f"optimizer {index}.{name}"
                )


def test_resume_ends_where_the_uninterrupted_run_ends(small_dataset, tmp_path):
    """Two epochs, then `ckpt_path=last.ckpt` to three, ends with the weights and optimizer state of
    three uninterrupted epochs. The resumed call is given another seed: a run that ignored
    `ckpt_path` would start from other weights and end elsewhere."""
    common = [*small_train_overrides(small_dataset), *ORDER_FREE]
    train(prepare_train_config([*common, "trainer.max_epochs=3"], tmp_path / "straight"))
    train(prepare_train_config([*common, "trainer.max_epochs=2"], tmp_path / "first"))
    first = last_checkpoint(tmp_path / "first")
    train(
        prepare_train_config(
            [
                *common,
                "trainer.max_epochs=3",
                "seed=1",
                f"ckpt_path={tmp_path / 'first' / 'checkpoints' / 'last.ckpt'}",
            ],
            tmp_path / "resumed",
        )
    )
    straight, resumed = last_checkpoint(tmp_path / "straight"), last_checkpoint(tmp_path / "resumed")
    assert (first["epoch"], resumed["epoch"]) == (1, straight["epoch"]) == (1, 2)
    assert resumed["global_step"] == straight["global_step"] == first["global_step"] * 3 // 2
    assert_same_state(resumed, straight)
    moved = max(
        (resumed["state_dict"][k].float() - first["state_dict"][k].float()).abs().max().item()
        for k in first["state_dict"]
    )
    assert moved > 1e-4  # the third epoch did train


def test_a_resumed_run_draws_the_epochs_the_uninterrupted_run_draws(small_dataset, tmp_path):
    """Small shuffled batches with random flips: what an epoch teaches depends on its order and its
    draws. Resumed from the first epoch's checkpoint, the second epoch draws what the uninterrupted
    run's second epoch drew (the generator travels in the checkpoint), so both end in one state."""
    constant_rate = [o for o in ORDER_FREE if o.startswith(("detector.", "test="))]
    common = [*small_train_overrides(small_dataset), *constant_rate, "data.batch_size=4", "+data.augment.hflip=0.5"]
    train(prepare_train_config([*common, "trainer.max_epochs=2"], tmp_path / "straight"))
    train(prepare_train_config([*common, "trainer.max_epochs=1"], tmp_path / "first"))
    first = tmp_path / "first" / "checkpoints" / "last.ckpt"
    train(prepare_train_config([*common, "trainer.max_epochs=2", f"ckpt_path={first}"], tmp_path / "resumed"))
    assert_same_state(last_checkpoint(tmp_path / "resumed"), last_checkpoint(tmp_path / "straight"))


def test_seed_zero_seeds_the_run_and_target_fpr_sets_the_calibration(small_dataset, tmp_path):
    """`seed=0` (the default) seeds like any other seed: two runs started from different global
    random states end with identical weights. `target_fpr=` is the target the threshold is
    calibrated to: as many genuine validation images are flagged as it allows."""
    overrides = [*small_train_overrides(small_dataset), "test=false", "target_fpr=0.25"]
    runs = []
    for global_seed, name in ((123, "a"), (456, "b")):
        L.seed_everything(global_seed)
        cfg = prepare_train_config(overrides, tmp_path / name)
        assert cfg.seed == 0
        runs.append((train(cfg), last_checkpoint(tmp_path / name)))
    (metrics, checkpoint), (_, other) = runs
    for key, value in checkpoint["state_dict"].items():
        assert torch.equal(value, other["state_dict"][key]), key
    assert checkpoint["hyper_parameters"]["target_fpr"] == 0.25
    calibration = metrics["calibration"]
    assert calibration["target_fpr"] == 0.25
    assert calibration["false_positives"] == math.floor(0.25 * calibration["n_genuine"]) > 0


def test_a_missing_or_foreign_checkpoint_to_resume_is_refused_before_any_training(small_dataset, tmp_path):
    import pytest

    from detectors.blocks.released import IncompatibleWeightsError
    from detectors.blocks.weights import MissingWeightsError

    common = [*small_train_overrides(small_dataset), "test=false"]
    with pytest.raises(MissingWeightsError, match="ckpt_path .*nope.ckpt does not exist"):
        train(prepare_train_config([*common, f"ckpt_path={tmp_path / 'nope.ckpt'}"], tmp_path / "missing"))
    with pytest.raises(MissingWeightsError, match="is a folder: give a checkpoint file"):
        train(prepare_train_config([*common, f"ckpt_path={tmp_path}"], tmp_path / "folder"))
    (tmp_path / "scores.csv").write_text("path,score\na.png,0.5\n")
    with pytest.raises(IncompatibleWeightsError, match="scores.csv is not a checkpoint this toolkit reads: give a"):
        train(prepare_train_config([*common, f"ckpt_path={tmp_path / 'scores.csv'}"], tmp_path / "csv"))
    train(prepare_train_config(common, tmp_path / "npr"))
    wider = [*common, "detector.net.width=16", f"ckpt_path={tmp_path / 'npr' / 'checkpoints' / 'last.ckpt'}"]
    with pytest.raises(IncompatibleWeightsError, match="holds the weights of another detector or size"):
        train(prepare_train_config(wider, tmp_path / "wider"))
    assert not (tmp_path / "wider" / "checkpoints").exists()


def test_a_run_whose_validation_has_no_genuine_image_says_its_threshold_is_not_calibrated(
    small_dataset, tmp_path, caplog
):
    import logging

    import pandas as pd

    rows = pd.read_csv(small_dataset)
    rows["path"] = [str(small_dataset.parent / path) for path in rows["path"]]
    fakes_only = tmp_path / "fakes_only_val.csv"
    rows[(rows["split"] != "val") | (rows["label"] == 1)].to_csv(fakes_only, index=False)
    with caplog.at_level(logging.WARNING, logger="train"):
        metrics = train(prepare_train_config([*small_train_overrides(fakes_only), "test=false"], tmp_path / "run"))
    assert "calibration" not in metrics
    assert "no genuine validation image was scored, so the threshold 0.5 is the default" in caplog.text


def test_metrics_json_describes_the_checkpoint_it_keeps_not_the_last_epoch(small_dataset, tmp_path):
    """The kept checkpoint here is the epoch of the lowest validation AUROC (monitor_mode=min), so it
    is not the last one: the validation figures, threshold and calibration reported are its own."""
    import json

    common = [*small_train_overrides(small_dataset), *ORDER_FREE[:-1], "monitor_mode=min", "trainer.max_epochs=3"]
    for test in ("true", "false"):
        run = tmp_path / f"test_{test}"
        train(prepare_train_config([*common, f"test={test}"], run))
        best = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
        assert best["epoch"] != last_checkpoint(run)["epoch"]
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["val"] == best["val_metrics"] and metrics["checkpoint"] == str(run / "checkpoints" / "best.ckpt")
        assert metrics["val"]["threshold"] == float(best["state_dict"]["threshold"])
        assert metrics["calibration"] == best["calibration"]


def test_a_second_run_into_a_run_directory_is_refused_and_resuming_that_run_goes_on(small_dataset, tmp_path):
    """Two runs in one directory would replace each other's checkpoints and test them as their own."""
    import pytest

    from datamodules.records import LayoutError

    common = [*small_train_overrides(small_dataset), *ORDER_FREE, "trainer.max_epochs=1"]
    train(prepare_train_config(common, tmp_path / "run"))
    kept = (tmp_path / "run" / "checkpoints" / "best.ckpt").read_bytes()
    with pytest.raises(LayoutError, match="already holds a run"):
        train(prepare_train_config([*common, "seed=2"], tmp_path / "run"))
    assert (tmp_path / "run" / "checkpoints" / "best.ckpt").read_bytes() == kept
    resume = f"ckpt_path={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}"
    train(prepare_train_config([*common, "trainer.max_epochs=2", resume], tmp_path / "run"))
    assert last_checkpoint(tmp_path / "run")["epoch"] == 1


def test_a_run_resumed_into_a_new_directory_keeps_and_tests_the_best_epoch_of_the_whole_run(small_dataset, tmp_path):
    """The kept epoch is the lowest validation AUROC (monitor_mode=min): the first run's epoch 0.
    Resumed into a new directory, the run must still keep it, not its first epoch after the resume."""
    import json

    common = [*small_train_overrides(small_dataset), *ORDER_FREE[:-1], "monitor_mode=min"]
    train(prepare_train_config([*common, "trainer.max_epochs=2"], tmp_path / "first"))
    first_best = torch.load(tmp_path / "first" / "checkpoints" / "best.ckpt", weights_only=True)
    resume = f"ckpt_path={tmp_path / 'first' / 'checkpoints' / 'last.ckpt'}"
    train(prepare_train_config([*common, "trainer.max_epochs=3", resume], tmp_path / "resumed"))
    kept = torch.load(tmp_path / "resumed" / "checkpoints" / "best.ckpt", weights_only=True)
    assert last_checkpoint(tmp_path / "resumed")["epoch"] == 2 and kept["epoch"] == first_best["epoch"]
    assert json.loads((tmp_path / "resumed" / "metrics.json").read_text())["val"] == first_best["val_metrics"]


def test_a_finished_run_resumed_into_a_new_directory_leaves_its_last_and_best_checkpoints_there(
    small_dataset, tmp_path, caplog
):
    """A run that had trained all its epochs trains nothing more: the new directory still holds
    `last.ckpt` (the state the run ends in, to resume from again) and `best.ckpt`, and the run says
    it trained nothing."""
    common = [*small_train_overrides(small_dataset), *ORDER_FREE, "trainer.max_epochs=1"]
    train(prepare_train_config(common, tmp_path / "first"))
    resume = f"ckpt_path={tmp_path / 'first' / 'checkpoints' / 'last.ckpt'}"
    with caplog.at_level("WARNING"):
        train(prepare_train_config([*common, resume], tmp_path / "again"))
    assert (tmp_path / "again" / "checkpoints" / "last.ckpt").is_file()
    assert "had already ended" in caplog.text and "nothing was trained" in caplog.text
    kept, first = last_checkpoint(tmp_path / "again"), last_checkpoint(tmp_path / "first")
    assert kept["epoch"] == first["epoch"] == 0 and kept["global_step"] == first["global_step"]
    assert_same_state(kept, first, atol=0)
    assert (tmp_path / "again" / "checkpoints" / "best.ckpt").is_file()
    train(
        prepare_train_config(
            [*common, "trainer.max_epochs=2", f"ckpt_path={tmp_path / 'again' / 'checkpoints' / 'last.ckpt'}"],
            tmp_path / "on",
        )
    )
    assert last_checkpoint(tmp_path / "on")["epoch"] == 1  # resumed from the new directory, trained on


def test_a_resume_that_validates_otherwise_or_lacks_the_earlier_best_chooses_among_its_own_epochs(
    small_dataset, tmp_path, caplog
):
    """The earlier best was measured on other validation settings (here another target FPR, which
    also sets its threshold), or is not on this machine: the run tested the earlier run's checkpoint
    at the earlier threshold, unsaid, or the last epoch."""
    import shutil

    common = [*small_train_overrides(small_dataset), *ORDER_FREE[:-1], "monitor_mode=min"]
    train(prepare_train_config([*common, "trainer.max_epochs=2"], tmp_path / "first"))
    first_best = torch.load(tmp_path / "first" / "checkpoints" / "best.ckpt", weights_only=True)
    resume = f"ckpt_path={tmp_path / 'first' / 'checkpoints' / 'last.ckpt'}"
    with caplog.at_level("WARNING"):
        train(prepare_train_config([*common, "trainer.max_epochs=3", "target_fpr=0.1", resume], tmp_path / "other"))
    kept = torch.load(tmp_path / "other" / "checkpoints" / "best.ckpt", weights_only=True)
    assert kept["epoch"] == 2 != first_best["epoch"] and kept["calibration"]["target_fpr"] == 0.1
    assert "validates otherwise than the run it resumes (target_fpr changed)" in caplog.text
    shutil.move(tmp_path / "first" / "checkpoints" / "best.ckpt", tmp_path / "elsewhere.ckpt")
    with caplog.at_level("WARNING"):
        train(prepare_train_config([*common, "trainer.max_epochs=3", resume], tmp_path / "moved"))
    assert torch.load(tmp_path / "moved" / "checkpoints" / "best.ckpt", weights_only=True)["epoch"] == 2
    assert "best checkpoint" in caplog.text and "is not on this machine" in caplog.text


def test_a_run_resumed_in_its_own_directory_keeps_the_log_of_its_first_epochs(small_dataset, tmp_path):
    common = [*small_train_overrides(small_dataset), *ORDER_FREE, "trainer.max_epochs=1"]
    train(prepare_train_config(common, tmp_path / "run"))
    before = (tmp_path / "run" / "csv" / "metrics.csv").read_text()
    resume = f"ckpt_path={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}"
    train(prepare_train_config([*common, "trainer.max_epochs=2", resume], tmp_path / "run"))
    assert (tmp_path / "run" / "csv" / "metrics.before_resume_0.csv").read_text() == before  # it was replaced
    assert (tmp_path / "run" / "csv" / "metrics.csv").read_text() != before


def test_a_classifier_on_genuine_images_only_is_refused_and_frees_its_run_directory(small_dataset, tmp_path):
    """It trained on one class and reported n/a figures beside a calibrated threshold (exit 0)."""
    import pytest

    from datamodules.records import LayoutError

    lines = small_dataset.read_text().splitlines()
    label = lines[0].split(",").index("label")
    genuine = [line for line in lines[1:] if line.split(",")[label] == "0"]
    manifest = small_dataset.with_name("genuine_only.csv")
    manifest.write_text("\n".join([lines[0], *genuine]) + "\n")
    overrides = [*small_train_overrides(small_dataset), f"data.manifest={manifest}"]
    with pytest.raises(LayoutError, match="genuine images only, so a classifier has nothing to tell apart"):
        train(prepare_train_config(overrides, tmp_path / "run"))
    assert not (tmp_path / "run" / "checkpoints").exists()
    mended = [*small_train_overrides(small_dataset), *ORDER_FREE]  # the same run directory, once the data is mended
    train(prepare_train_config(mended, tmp_path / "run"))
    assert (tmp_path / "run" / "checkpoints" / "best.ckpt").is_file()
