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
