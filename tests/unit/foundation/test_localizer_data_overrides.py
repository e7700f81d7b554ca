"""A localizer on the default data trains on its `localizers` settings: an override of the other
data keys would go unused, so it is refused with the key to give instead."""

from __future__ import annotations

import pytest
from hydra.core.hydra_config import HydraConfig

from datamodules.records import LayoutError
from detectors.run_config import check_data_overrides
from tests.helpers import compose_config


def checked(overrides: list[str], localizer: bool) -> None:
    cfg = compose_config("train", overrides)
    HydraConfig().set_config(cfg)  # as a real run: the command line is in Hydra's config
    try:
        check_data_overrides(cfg.data, localizer)
    finally:
        HydraConfig.instance().cfg = None


def test_a_classifiers_data_key_given_to_a_localizer_is_refused_with_the_key_it_reads():
    with pytest.raises(LayoutError, match="data.batch_size: .* give data.localizers.batch_size=... instead"):
        checked(["detector=seg_tiny", "data.batch_size=4"], localizer=True)


def test_a_key_the_localizer_settings_lack_is_named_with_the_plus_that_adds_it():
    with pytest.raises(LayoutError, match=r"give \+data.localizers.augment=... instead"):
        checked(["detector=evidence_tiny", "+data.augment={hflip: 0.5}"], localizer=True)
    checked(["detector=evidence_tiny", "+data.localizers.augment={hflip: 0.5}"], localizer=True)  # as said


def test_the_localizer_keys_and_a_classifiers_own_overrides_pass():
    checked(["detector=seg_tiny", "data.localizers.batch_size=4"], localizer=True)
    checked(["data.batch_size=4"], localizer=False)
    checked(["detector=seg_tiny", "data=localization", "data.batch_size=4"], localizer=True)  # no variant there


def test_train_refuses_it_before_any_data_is_made(tmp_path):
    from tests.helpers import prepare_train_config
    from train import train

    cfg = prepare_train_config(
        ["detector=seg_tiny", "data.batch_size=4", f"paths.data_dir={tmp_path / 'data'}"], tmp_path
    )
    try:
        with pytest.raises(LayoutError, match="give data.localizers.batch_size=... instead"):
            train(cfg)
    finally:
        HydraConfig.instance().cfg = None
    assert not (tmp_path / "data").exists()
