"""A key that no constructor takes (`+data.<typo>=...`) is a setting to fix: train.py refuses it in one
line naming the key, before any data is made, instead of a traceback from inside training."""

from __future__ import annotations

import pytest

from datamodules.records import SettingError
from tests.helpers import prepare_train_config


@pytest.mark.parametrize(
    "override, message",
    [
        ("+data.augment.hflpi=0.5", r"^data: unknown augment options \['hflpi'\] \(did you mean augment\.hflip\?\)"),
        ("+data.foo=1", r"^data\.foo is not a setting of ManifestDataModule: check its spelling$"),
        ("+trainer.foo=1", r"^trainer\.foo is not a setting of Trainer: check its spelling$"),
        ("+callbacks.model_checkpoint.foo=1", r"^callbacks\.model_checkpoint\.foo is not a setting of RunCheckpoint"),
        ("+logger.csv.foo=1", r"^logger\.csv\.foo is not a setting of CSVLogger: check its spelling$"),
    ],
)
def test_a_key_no_constructor_takes_is_refused_by_name_before_any_data_is_made(tmp_path, override, message):
    from train import train

    cfg = prepare_train_config(["detector=npr_tiny", override, f"paths.data_dir={tmp_path / 'data'}"], tmp_path / "run")
    with pytest.raises(SettingError, match=message):
        train(cfg)
    assert not (tmp_path / "data").exists()


def test_an_augment_option_that_does_not_exist_is_refused_when_the_data_is_set_up(tmp_path):
    from datamodules.classification import ManifestDataModule

    with pytest.raises(ValueError, match=r"unknown augment options \['jpg'\] \(did you mean augment\.jpeg\?\)"):
        ManifestDataModule(manifest=str(tmp_path / "m.csv"), augment={"hflip": 0.5, "jpg": 0.5})
    assert ManifestDataModule(manifest=str(tmp_path / "m.csv"), augment={"jpeg": 0.5}).augment == {"jpeg": 0.5}


@pytest.mark.parametrize(
    "detector, override, message",
    [
        (
            "noise_level_tiny data=localization",
            "+data.foo=1",
            r"^data\.foo is not a setting of \w+: check its spelling$",
        ),
        ("noise_level_tiny data=localization", "+trainer.foo=1", r"^trainer\.foo is not a setting of Trainer: check"),
        (
            "dup_sift_tiny data=duplication_pairs",
            "+data.foo=1",
            r"^data\.foo is not a setting of \w+: check its spelling$",
        ),
    ],
)
def test_a_training_free_detector_refuses_a_key_no_constructor_takes_by_name_too(tmp_path, detector, override, message):
    """Training-free detectors build their data and trainer on their own path (fit and calibrate
    only), with the same refusal."""
    from train import train

    detector, data = detector.split()
    overrides = [f"detector={detector}", data, override]
    if data == "data=localization":  # a folder it would read, were the key taken
        overrides.append(f"data.root={tmp_path / 'data'}")
    with pytest.raises(SettingError, match=message):
        train(prepare_train_config(overrides, tmp_path / "run"))
