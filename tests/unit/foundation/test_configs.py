"""Every config composes; mistyped names fail with Hydra's list of valid options."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import MissingConfigException

from tests.helpers import CONFIGS, compose_config

DETECTORS = sorted(p.stem for p in (CONFIGS / "detector").glob("*.yaml"))
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("name", DETECTORS)
def test_every_detector_config_composes_with_a_target_and_preprocessing(name):
    cfg = compose_config("train", [f"detector={name}"])
    assert cfg.detector.name == name
    assert cfg.detector.net._target_.startswith("detectors.")
    assert "preprocess" in cfg.detector.net


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes(name):
    cfg = compose_config("train", [f"experiment={name}"])
    assert cfg.detector.net._target_.startswith("detectors.")
    assert cfg.trainer._target_.endswith("Trainer")


@pytest.mark.parametrize("group", ["trainer", "logger", "callbacks", "data"])
def test_every_option_of_the_other_groups_composes(group):
    for option in sorted(p.stem for p in (CONFIGS / group).glob("*.yaml")):
        extra = {"manifest": ["data.manifest=m.csv"], "folder": ["data.root=."]}.get(option, [])
        cfg = compose_config("train", [f"{group}={option}", *extra])
        assert group in cfg


def test_the_embedded_default_trains_npr_on_its_own_image_size():
    cfg = compose_config("train", [])
    assert cfg.detector.name == "npr" and cfg.data.create._target_ == "synthesis.embedded.make_embedded_manifest"
    assert cfg.detector.net.preprocess.size == 96 and cfg.seed == 0


@pytest.mark.parametrize("override,group", [("detector=nrp", "detector"), ("data=imagenett", "data")])
def test_unknown_names_list_the_valid_options(override, group):
    with pytest.raises(MissingConfigException) as error:
        compose_config("train", [override])
    message = str(error.value)
    assert f"Available options in '{group}'" in message
    assert ("npr" if group == "detector" else "embedded") in message


@pytest.mark.parametrize("name", ["infer", "export", "generate"])
def test_entry_point_configs_compose(name):
    overrides = {"infer": ["model=m.ckpt", "input=x"], "export": ["model=m.ckpt"], "generate": []}[name]
    cfg = compose_config(name, overrides)
    assert Path(CONFIGS / f"{name}.yaml").is_file() and cfg
