"""A setting Lightning or a loader would take and fail on mid-run (a word for a number, a batch of
none, BatchNorm synced on the CPU, a monitored figure nobody logs) is refused in one line naming it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.trainer.states import TrainerFn
from omegaconf import OmegaConf

from datamodules.datasets import check_batch_size
from datamodules.records import SettingError
from detectors.run_checkpoint import RunCheckpoint
from detectors.run_config import check_setting_types, check_trainer, data_config
from tests.helpers import CONFIGS, compose_config, prepare_train_config


@pytest.fixture(autouse=True)
def hydra_config_cleared():
    yield
    HydraConfig.instance().cfg = None


def composed(overrides: list[str]):
    cfg = compose_config("train", overrides)
    HydraConfig().set_config(cfg)  # as a real run: `${hydra:...}` paths resolve
    return cfg


def trainer_of(overrides: list[str]):
    return composed(overrides).trainer


def test_a_word_where_the_trainer_takes_a_number_is_refused_naming_what_it_takes():
    with pytest.raises(SettingError, match=r"trainer.max_epochs='two': it takes a whole number or null"):
        check_trainer(trainer_of(["trainer.max_epochs=two"]))
    with pytest.raises(SettingError, match=r"trainer.deterministic='maybe': it takes true or false or 'warn'"):
        check_trainer(trainer_of(["trainer.deterministic=maybe"]))
    with pytest.raises(SettingError, match=r"trainer.precision='fp16'"):
        check_trainer(trainer_of(["trainer.precision=fp16"]))


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONFIGS / "trainer").glob("*.yaml")))
def test_every_shipped_trainer_and_the_usual_values_pass(name):
    cfg = trainer_of([f"trainer={name}", "trainer.max_epochs=3", "trainer.precision=bf16-mixed"])
    check_setting_types("trainer", cfg)
    check_setting_types("trainer", trainer_of([f"trainer={name}", "+trainer.limit_train_batches=0.5"]))


def test_batchnorm_synced_between_cpu_processes_is_refused_with_the_cpu_recipe():
    with pytest.raises(SettingError, match="use trainer=ddp_cpu"):
        check_trainer(trainer_of(["trainer=ddp", "trainer.accelerator=cpu", "trainer.precision=32-true"]))
    check_trainer(trainer_of(["trainer=ddp_cpu"]))


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONFIGS / "data").glob("*.yaml")))
@pytest.mark.parametrize("localizer", [False, True])
def test_every_shipped_data_config_passes_and_a_word_for_one_of_its_numbers_does_not(name, localizer):
    data = data_config(composed([f"data={name}"]).data, localizer)
    check_setting_types("data", data)
    plain = OmegaConf.to_container(data, resolve=True)  # `???` paths left unread
    objects = {"": plain, **{k: v for k, v in plain.items() if isinstance(v, dict) and "_target_" in v}}
    group, number = next(  # a number of the data module, or of an object it is given (pair data's pair sets)
        (group, key)
        for group, settings in objects.items()
        for key, value in settings.items()
        if isinstance(value, int) and not isinstance(value, bool)
    )
    settings = data[group] if group else data
    settings[number] = "four"
    with pytest.raises(SettingError, match=rf"data.{group}.?{number}='four': it takes a whole number"):
        check_setting_types("data", data)


@pytest.mark.parametrize("value", [0, -2, 2.5, True])
def test_a_batch_size_of_less_than_one_whole_image_is_refused(value):
    with pytest.raises(ValueError, match="batch_size must be a whole number of at least 1"):
        check_batch_size("batch_size", value)
    assert check_batch_size("batch_size", 3) == 3 and check_batch_size("eval_batch_size", None) is None


def test_a_monitored_figure_the_validation_does_not_give_is_named_with_those_it_gives():
    state = SimpleNamespace(fn=TrainerFn.FITTING)
    trainer = SimpleNamespace(
        sanity_checking=False, fast_dev_run=False, state=state, callback_metrics={"val/auroc": 0.9}
    )
    with pytest.raises(SettingError, match=r"monitor=val/bogus is not a figure .* it gives val/auroc$"):
        RunCheckpoint(monitor="val/bogus").on_validation_end(trainer, None)
    trainer.state.fn = TrainerFn.VALIDATING  # a training-free detector's calibration: no checkpoint is chosen
    RunCheckpoint(monitor="val/bogus").on_validation_end(trainer, None)


def test_train_refuses_them_before_any_data_is_made(tmp_path: Path):
    from train import train

    cfg = prepare_train_config(["trainer.max_epochs=two", f"paths.data_dir={tmp_path / 'data'}"], tmp_path)
    with pytest.raises(SettingError, match="trainer.max_epochs"):
        train(cfg)
    assert not (tmp_path / "data").exists()
