"""Every config composes; mistyped names fail with Hydra's list of valid options; every detector
is a full config and a tiny one, each named as its file."""

from __future__ import annotations

import pytest
from hydra.errors import MissingConfigException
from hydra.utils import get_method
from omegaconf import OmegaConf

from detectors.registry import TINY_SUFFIX, detector_class, detector_config, list_detectors
from detectors.run_config import apply_data_preprocess
from synthesis.genuine_kinds import GRAINY_KINDS
from tests.helpers import CONFIGS, compose_config

DETECTORS = list_detectors()
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("name", DETECTORS)
def test_every_detector_config_composes_with_a_target_and_preprocessing(name):
    cfg = compose_config("train", [f"detector={name}"])
    assert cfg.detector.net._target_.startswith("detectors.")
    matcher = getattr(detector_class(name), "is_pair_detector", False) and "max_side" in cfg.detector.net
    assert "preprocess" in cfg.detector.net or matcher  # a pair matcher takes each panel up to its max_side


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
        entries = [cfg[group]] if "_target_" in cfg[group] else [e for e in cfg[group].values() if "_target_" in e]
        for entry in entries:  # a misspelled class path fails here, not at the start of a long run
            assert callable(get_method(entry._target_)), f"{group}={option}: {entry._target_}"


@pytest.mark.parametrize(
    "option, where", [("folder", "data.root=."), ("layout", "data.root=."), ("manifest", "data.manifest=m.csv")]
)
def test_every_classification_data_config_takes_the_shared_loading_and_training_levers(option, where):
    shared = OmegaConf.to_container(OmegaConf.load(CONFIGS / "data_shared" / "classification.yaml"))
    data = OmegaConf.to_container(compose_config("train", [f"data={option}", where]).data)
    assert {key: data.get(key, "missing") for key in shared} == shared


def test_the_genuine_kinds_recipe_builds_on_the_generated_one_and_sets_its_own_calibration():
    generated = compose_config("train", ["experiment=generated"])
    kinds = compose_config("train", ["experiment=generated_kinds"])
    assert kinds.calibration.by == "category" and generated.calibration.by is None  # an experiment may set it
    assert kinds.calibration.rule == "bound" and generated.calibration.rule == "quantile"
    assert kinds.detector.name == "dct" and kinds.detector.net.preprocess.size == 64
    assert set(kinds.data.pseudo_fake_skip_categories) == set(GRAINY_KINDS)
    assert kinds.data.pseudo_fakes == generated.data.pseudo_fakes
    assert list(kinds.data.exclude_groups) == list(generated.data.exclude_groups)
    # genuine fluorescence draws get photon grain and stay genuine; the generated recipe adds none
    assert kinds.data.genuine_noise > 0 and generated.data.genuine_noise == 0
    assert kinds.data.genuine_noise_model == "shot" and list(kinds.data.genuine_noise_categories) == ["fluorescence"]
    # orientation and colour order vary in both classes' draws; the generated recipe keeps flips only
    assert dict(kinds.data.augment) == {"transpose": 0.5, "channel_shuffle": 0.5} and not generated.data.augment
    # a command-line value still wins over the recipe's
    assert compose_config("train", ["experiment=generated_kinds", "calibration.by=null"]).calibration.by is None


def test_the_genuine_kinds_preset_draws_many_sources_of_every_kind_at_few_crops_each():
    cfg = compose_config("generate", ["preset=cpu_kinds"])
    # a test source moves all its crops at once: 64 sources a kind at 6 crops, not 32 at 12
    assert cfg.panels.crops_per_photo == 6
    assert min(cfg.genuine_kinds.values()) == 64 and cfg.genuine_kinds.chart == 128
    # the 22 bundled photographs keep 12 crops each, or their kind has a few dozen test panels
    assert cfg.panels.crops_by_category == {"photo": 12}


def test_a_category_s_crop_count_is_set_from_the_command_line():
    from generate import spec_from_config

    assert spec_from_config(compose_config("generate", [])).crops_by_category == {}
    cfg = compose_config("generate", ["panels.crops_by_category={chart: 2, photo: 12}"])
    assert spec_from_config(cfg).crops_by_category == {"chart": 2, "photo": 12}


def test_the_embedded_default_trains_npr_on_its_own_image_size():
    cfg = compose_config("train", [])
    apply_data_preprocess(cfg)  # what train.py does before it builds the detector
    assert cfg.detector.name == "npr" and cfg.data.create._target_ == "synthesis.embedded.ensure_embedded_manifest"
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
    missing = OmegaConf.missing_keys(OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"]))
    assert missing == set(), f"{name} needs more than {overrides}"  # these overrides suffice to run


@pytest.mark.parametrize("name", DETECTORS)
def test_a_detector_config_is_named_as_its_file(name):
    assert detector_config(name).name == name  # metrics, reports and ONNX metadata carry this name


def test_every_detector_has_a_full_and_a_tiny_config():
    full = set(list_detectors(tiny=False))
    tiny = {name.removesuffix(TINY_SUFFIX) for name in list_detectors(tiny=True)}
    assert full and full == tiny, (
        f"without a tiny config: {sorted(full - tiny)}; without a full one: {sorted(tiny - full)}"
    )
    assert all("slow" in detector_config(name).cpu_checks for name in list_detectors(tiny=True))
