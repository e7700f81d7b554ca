"""The detectors this toolkit knows: one `configs/detector/<name>.yaml` each, composed by Hydra.

The config folder is the registry (no list of names lives in code): a detector is found by its
config file, built from its `net` block, and a new one needs a module under `detectors/` and two
configs, `<name>.yaml` (the published size) and `<name>_tiny.yaml` (a randomly initialized variant
for tests and CPU runs). docs/architecture.md, "Adding a detector".
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from detectors.base import Detector
from detectors.build import build_detector, resolve_detector_class

if TYPE_CHECKING:  # Lightning is imported only by callers that want a trainable module
    from detectors.module import DetectorModule

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
TINY_SUFFIX = "_tiny"


def list_detectors(tiny: bool | None = None, localizer: bool | None = None, gradients: bool | None = None) -> list[str]:
    """Sorted config names: all of them, only the tiny variants (`tiny=True`) or only the others;
    `localizer` keeps only the manipulation localizers (True) or only the classifiers (False);
    `gradients` only the networks trained by gradient steps (True) or only those fitted and
    calibrated without them (False, `fit_without_gradients`: training-free and matching-based)."""
    names = sorted(path.stem for path in (CONFIG_DIR / "detector").glob("*.yaml"))
    if tiny is not None:
        names = [name for name in names if name.endswith(TINY_SUFFIX) == tiny]
    if localizer is not None:
        names = [name for name in names if detector_class(name).is_localizer == localizer]
    if gradients is not None:
        names = [
            name for name in names if (not getattr(detector_class(name), "fit_without_gradients", False)) == gradients
        ]
    return names


def detector_class(name: str) -> type[Detector]:
    """The class detector `name` builds (its config's `net._target_`), imported but not built."""
    path = CONFIG_DIR / "detector" / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown detector {name!r}; known: {', '.join(list_detectors())}")
    return resolve_detector_class(OmegaConf.load(path).net._target_)


def _detector_override(override: str) -> str:
    """`net.x=1` -> `detector.net.x=1`, keeping Hydra's `+`, `++` and `~` prefixes in front."""
    body = override.lstrip("+~")
    return f"{override[: len(override) - len(body)]}detector.{body}"


def detector_config(name: str, overrides: str | Sequence[str] = ()) -> DictConfig:
    """The composed config of detector `name` (`name`, `net`, `optimizer`, ...) with Hydra overrides
    relative to it (`net.width=8`, `+net.new_key=1`); a single string is one override, as one
    command-line argument is (not a sequence of one-character overrides).

    Composed as train.py composes `detector=<name>`, so an unknown name fails with Hydra's list of
    the valid ones and a mistyped key fails instead of being ignored. A Hydra app already running
    in this process (train.py, a test's compose) is left as it was.
    """
    config = copy.deepcopy(_composed(name, (overrides,) if isinstance(overrides, str) else tuple(overrides)))
    OmegaConf.set_struct(config, False)
    return config


@functools.lru_cache(maxsize=64)
def _composed(name: str, overrides: tuple[str, ...]) -> DictConfig:
    """Composing takes a good fraction of a second, and tests ask for the same configs often."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    running = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            composed = compose(overrides=[f"+detector={name}", *map(_detector_override, overrides)])
    finally:  # the context above swaps the singleton: ask for the current one
        GlobalHydra.instance().clear()
        if running is not None:
            GlobalHydra.instance().initialize(running)
    return composed.detector


def net_config(name: str, overrides: str | Sequence[str] = ()) -> dict[str, Any]:
    """The `net` block of detector `name` as plain values (what a checkpoint's hyper-parameters hold)."""
    return OmegaConf.to_container(detector_config(name, overrides).net, resolve=True)


def create_detector(name: str, overrides: str | Sequence[str] = ()) -> Detector:
    """The network of detector `name`, built from its composed `net` block."""
    return build_detector(net_config(name, overrides))


def create_module(
    detector: str | Mapping[str, Any], overrides: str | Sequence[str] = (), **module_options: Any
) -> DetectorModule:
    """The trainable `DetectorModule` of a detector given by name (composed here, with `overrides`)
    or by its already composed config (train.py's `cfg.detector`); `module_options` go to the
    module (`target_fpr`, `pixel_threshold`, ...)."""
    from detectors.module import DetectorModule

    if isinstance(detector, str):
        config = detector_config(detector, overrides)
    elif overrides:
        raise ValueError("overrides apply to a detector given by name, not to a composed config")
    else:
        config = detector
    return DetectorModule(
        net=config["net"],
        optimizer=config.get("optimizer"),
        scheduler=config.get("scheduler"),
        name=config.get("name"),
        **module_options,
    )
