"""What a training run's config says before anything trains: the data config a detector gets (a
default data config's `localizers` variant, the preprocessing it sets), the command-line overrides
that would go unused, the pairs a pair detector needs, the settings a recipe requires, what a
validation score is measured on (compared when a run is resumed), settings of a type the class
they go to does not take."""

from __future__ import annotations

import types
import typing
from typing import Any

import torch
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from datamodules.records import LayoutError, SettingError
from detectors.build import resolve_detector_class


def variant_of(data: DictConfig, localizer: bool) -> DictConfig:
    """The data config a detector trains on: a localizer gets a default data config's `localizers`
    variant (with masks) where it has one."""
    variants = data.get("localizers")
    return variants if variants is not None and localizer else data


def data_config(data: DictConfig, localizer: bool, augment: DictConfig | None = None) -> DictConfig:
    """The DataModule config; a default data config may carry a `localizers` variant (with masks),
    which localizers get instead, so `python train.py detector=<a localizer>` needs no data argument.
    `augment`: the detector's own training augmentation (its config's `augment`), used when the data
    config sets none."""
    chosen = variant_of(data, localizer)
    needs_augment = augment is not None and chosen.get("augment") is None
    if data.get("localizers") is None and not needs_augment and "detector_preprocess" not in data:
        return data
    # Resolved while `data` still sits in the whole config, so `${paths.data_dir}` and the like resolve.
    plain = OmegaConf.to_container(chosen, resolve=True)
    plain.pop("localizers", None)
    plain.pop("detector_preprocess", None)
    if needs_augment:
        plain["augment"] = OmegaConf.to_container(augment, resolve=True)
    return OmegaConf.create(plain)


def command_line_keys(cfg: DictConfig | None = None) -> list[str]:
    """The keys the command line sets: Hydra's record of it (in `cfg` where it was composed in code
    with its Hydra config); none for a config composed without one."""
    from hydra.core.hydra_config import HydraConfig

    if cfg is not None and "hydra" in cfg:
        overrides = cfg.hydra.overrides.task
    elif HydraConfig.initialized():
        overrides = HydraConfig.get().overrides.task
    else:
        return []
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides]


def apply_data_preprocess(cfg: DictConfig) -> None:
    """A data config may say how detectors take its images (`detector_preprocess`: the quickstart's
    96 px crops whole, not cropped to a tiny classifier's 48 px or padded to a full one's 384): set
    on `detector.net.preprocess` unless the command line or an experiment sets that key. A localizer
    trained on the data's `localizers` variant keeps its own sizes (the variant's images are 96-256
    px; self-matching resized to 96 px found nothing)."""
    if "preprocess" not in cfg.detector.net:  # a pair matcher takes each panel up to its own max_side
        return
    localizer = resolve_detector_class(cfg.detector.net._target_).is_localizer
    wanted = variant_of(cfg.data, localizer).get("detector_preprocess") or {}
    given = command_line_keys(cfg)
    if "experiment" in given:
        return
    values = [g for g in given if g.startswith("detector.")]  # `detector=` picks a config, sets no value
    for key, value in wanted.items():  # `detector.net.preprocess={...}` sets it too
        setting = f"detector.net.preprocess.{key}"
        if not any(setting == g or setting.startswith(f"{g}.") for g in values):
            cfg.detector.net.preprocess[key] = value


def check_data_overrides(data: DictConfig, localizer: bool) -> None:
    """A localizer on a data config with a `localizers` variant trains on that variant: a command-line
    override of the other data keys would go unused, so it is refused, naming the key to give."""
    if not localizer or data.get("localizers") is None:
        return
    unused = [key for key in command_line_keys() if key.startswith("data.") and not key.startswith("data.localizers.")]
    if unused:
        key = unused[0][len("data.") :]
        add = "" if OmegaConf.select(data.localizers, key) is not None else "+"  # a key the variant lacks is added
        raise LayoutError(
            f"{', '.join(unused)}: a localizer trains on this data's `localizers` settings, which do not read "
            f"{'it' if len(unused) == 1 else 'them'}; give {add}data.localizers.{key}=... instead"
        )


LOCALIZATION_DATA = "datamodules.localization.LocalizationDataModule"  # the data config that reads masks
# the pair data configs, by the target that makes them
PAIR_DATA = {
    "duplication_pairs": "synthesis.pair_set.pair_splits",
    "duplication_pair_images": "datamodules.pairs.PairDataModule",
}


def check_localizer_data(data: DictConfig, net: Any) -> None:
    """A localizer learns and is measured from masks: a data config that gives none (data=manifest,
    folder, layout read images and labels only) is refused, naming the one that reads masks (the run
    ended in a KeyError 'mask' in its first validation step)."""
    if net.learns_from_masks and data.get("_target_") != LOCALIZATION_DATA and data.get("localizers") is None:
        raise LayoutError(
            f"a localizer trains on images with masks: data=localization data.root=<your set> reads them (from a "
            f"manifest's mask column or a mask layout); {data.get('_target_')} gives images and labels only"
        )


def check_pair_data(data: DictConfig, net: Any) -> None:
    """A detector of pairs needs pairs of panels, and one of images images: said before anything runs."""
    pairs = data.get("_target_") in PAIR_DATA.values()
    if getattr(net, "is_pair_detector", False) and not pairs:
        raise LayoutError(
            "this detector compares pairs of panels: train it on pairs, data=duplication_pairs (dup_sift) "
            "or data=duplication_pair_images (pairnet)"
        )
    if pairs and not getattr(net, "is_pair_detector", False):
        raise LayoutError(
            f"the data config makes pairs of panels ({data.get('_target_')}); this detector scores single "
            "images: choose an image data config (data=manifest, folder, layout, localization)"
        )
    wanted = getattr(net, "pair_data", None)
    if pairs and wanted and PAIR_DATA[wanted] != data.get("_target_"):
        made_by = {target: name for name, target in PAIR_DATA.items()}[data.get("_target_")]
        raise LayoutError(f"{type(net).__name__} trains on data={wanted}, not data={made_by}")


def check_required(cfg: DictConfig) -> None:
    """The settings a recipe lists in `requires` (a stage-1 checkpoint, say), and those the detector
    says its config needs to train (`settings_to_train`: CO-SPY's fusion stage, its branches), are
    set: unset, the run would train on random modules meant to be loaded. A resumed run has them in
    its checkpoint."""
    detector = resolve_detector_class(cfg.detector.net._target_)
    needed = getattr(detector, "settings_to_train", lambda net: [])(cfg.detector.net)
    required = [*(cfg.get("requires") or ()), *needed]
    missing = list(dict.fromkeys(key for key in required if OmegaConf.select(cfg, key, default=None) is None))
    if missing and not cfg.get("ckpt_path"):
        raise LayoutError(f"this run trains from files it is given: set {', '.join(f'{k}=<path>' for k in missing)}")
    if unset := sorted(OmegaConf.missing_keys(cfg.detector)):  # `???` in a recipe: read as a file name otherwise
        raise LayoutError(f"this recipe needs {', '.join(unset)}: give {unset[0]}=<path> on the command line")


# the names detector configs give their weights settings (a file, a folder, a cache name or a tag)
WEIGHTS_KEYS = {"pretrained", "clip_pretrained", "encoder_weights", "clip", "vae", "weights", "init_from"}


def weights_settings(net: DictConfig, prefix: str = "detector.net.") -> str:
    """The settings of this detector's config that name weights, with their values: what a user who
    lacks a file changes (the loaders that say a file is missing do not know the setting's name)."""
    plain = OmegaConf.to_container(net, resolve=True)
    found = []

    def walk(node: Any, path: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{path}{key}.")
            elif key in WEIGHTS_KEYS and not isinstance(value, (list, bool, int, float)):
                found.append(f"{path}{key}={'null' if value is None else value}")

    walk(plain, prefix)
    return f"This detector's settings naming weights: {', '.join(found)}" if found else ""


# data settings validation does not read: loading, and what the training draws are made of
TRAINING_ONLY_DATA = frozenset(
    "num_workers batch_size eval_batch_size augment balanced with_groups pseudo_fakes pseudo_fake_noise "
    "pseudo_fake_skip_categories noise_match noise_match_categories genuine_noise genuine_noise_std "
    "genuine_noise_categories genuine_noise_model".split()
)


def evaluation_settings(cfg: DictConfig, data: DictConfig) -> dict[str, Any]:
    """What a validation score depends on: the data (but its loading and training draws), the
    monitored metric, the target FPR and the calibration settings."""
    plain = OmegaConf.to_container(data, resolve=True)
    return {
        "data": {key: value for key, value in plain.items() if key not in TRAINING_ONLY_DATA},
        "monitor": cfg.get("monitor"),
        "target_fpr": cfg.get("target_fpr"),
        "calibration": OmegaConf.to_container(cfg.get("calibration") or {}, resolve=True),
    }


def fits(value: Any, hint: Any) -> bool:
    """Whether a config value can be what a type hint of plain values (int, float, bool, str, None,
    a Literal, a Union of them) says; any other hint (a container, a class) is left to its receiver."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(fits(value, member) for member in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:
        return any(value == choice and type(value) is type(choice) for choice in typing.get_args(hint))
    if hint is bool or hint is str or hint is type(None):
        return isinstance(value, hint)
    if hint is int or hint is float:
        return isinstance(value, (int, hint)) and not isinstance(value, bool)
    return True


def hint_text(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(hint_text(member) for member in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:
        return " or ".join(repr(choice) for choice in typing.get_args(hint))
    plain = {int: "a whole number", float: "a number", bool: "true or false", str: "a word", type(None): "null"}
    return plain.get(hint, getattr(hint, "__name__", str(hint)))


def check_setting_types(group: str, settings: DictConfig) -> None:
    """A setting of a type its class does not take (`trainer.max_epochs=two`, `data.batch_size=2.5`)
    is refused before the run, naming what it takes; Lightning and the loaders would take it and fail
    mid-run (after an epoch), with a traceback."""
    plain = OmegaConf.to_container(settings, resolve=True)
    target = plain.pop("_target_", None)
    if target is None:
        return
    made_by = get_object(target)
    hints: dict[str, Any] = {}
    # a class's own hints, then its bases' (a subclass passes `**kwargs` on); a function's
    for receiver in [k.__init__ for k in made_by.__mro__] if isinstance(made_by, type) else [made_by]:
        try:
            own = typing.get_type_hints(receiver)
        except Exception:  # hints that do not evaluate here: the constructor checks alone
            continue
        for key, hint in own.items():
            hints.setdefault(key, hint)
    for key, value in plain.items():
        if isinstance(value, dict) and "_target_" in value:  # a nested object (the pair sets of pair data)
            check_setting_types(f"{group}.{key}", OmegaConf.create(value))
        elif key in hints and not fits(value, hints[key]):
            raise SettingError(f"{group}.{key}={value!r}: it takes {hint_text(hints[key])}")


def check_trainer(trainer: DictConfig) -> None:
    """The trainer settings Lightning would fail on mid-run: of another type, or BatchNorm synced
    between processes on the CPU (`trainer=ddp trainer.accelerator=cpu`)."""
    check_setting_types("trainer", trainer)
    on_cpu = trainer.get("accelerator") == "cpu" or (
        trainer.get("accelerator", "auto") == "auto" and not torch.cuda.is_available()
    )
    if trainer.get("sync_batchnorm") and on_cpu:
        raise SettingError(
            "trainer.sync_batchnorm=true syncs BatchNorm between GPU processes and fails on the CPU: "
            "use trainer=ddp_cpu, or set trainer.sync_batchnorm=false"
        )
