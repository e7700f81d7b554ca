"""Building a detector from plain config values, refusing anything that is not a detector."""

from __future__ import annotations

import importlib
from typing import Any, Mapping

from detectors.base import Detector

TRUSTED_PREFIXES = ("detectors.",)
# the packages detectors import only when built (backbones, towers): module -> (pip name, the extra holding it;
# None: one of the toolkit's own dependencies, which `pip install -e .` brings)
BACKBONE_PACKAGES = {
    "timm": ("timm", None),
    "open_clip": ("open-clip-torch", None),
    "segmentation_models_pytorch": ("segmentation-models-pytorch", None),
    "transformers": ("transformers", "transformers"),
    "diffusers": ("diffusers", "diffusers"),
}


class MissingPackageError(ImportError):
    """A detector needs a backbone package that is not installed: said in one line by every entry
    point (train.py, infer.py, export.py, calibrate.py) that builds it, naming what to install."""


def missing_package(target: str, error: ImportError) -> MissingPackageError | None:
    """The refusal for building `target` that failed on `error`, when a backbone package is what is
    missing (in `error` or the ImportError it wraps, as hf_clip and vae wrap theirs); None otherwise: a
    module of the toolkit itself missing is a bug that no `pip install` mends."""
    seen: BaseException | None = error
    while seen is not None:
        name = (getattr(seen, "name", None) or "").partition(".")[0]
        if isinstance(seen, ModuleNotFoundError) and name in BACKBONE_PACKAGES:
            package, extra = BACKBONE_PACKAGES[name]
            whole = "the toolkit with all its dependencies: pip install -e ."
            if extra:  # not among the toolkit's dependencies: `pip install -e .` leaves it out
                whole = f'the toolkit with its {extra} extra: pip install -e ".[{extra}]"'
            return MissingPackageError(
                f"detector {target} needs {name}, which is not installed: pip install {package} (or {whole})"
            )
        seen = seen.__cause__
    return None


def to_plain(value: Any) -> Any:
    """OmegaConf containers -> dicts/lists, so hyper-parameters load with `weights_only=True`."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf comes with hydra-core
        return value
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def resolve_detector_class(target: str, trusted_prefixes: tuple[str, ...] = TRUSTED_PREFIXES) -> type[Detector]:
    """Import `target` only if it names a `Detector` subclass in a trusted package.

    Checkpoints carry their network's `_target_`; importing an arbitrary name from an untrusted
    file would run code, so the module must lie under a trusted prefix before it is imported.
    """
    if not isinstance(target, str) or "." not in target:
        raise ValueError(f"net._target_ must be a dotted class path, got {target!r}")
    if not target.startswith(trusted_prefixes):
        raise ValueError(
            f"refusing to build {target!r}: only classes under {', '.join(trusted_prefixes)} are built "
            "from configs and checkpoints"
        )
    module_name, _, class_name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot find detector class {target!r}: {error}") from error
    if not (isinstance(cls, type) and issubclass(cls, Detector)):
        raise ValueError(f"{target!r} is not a Detector subclass")
    return cls


def build_detector(config: Mapping[str, Any]) -> Detector:
    """`{"_target_": "detectors.npr.NPR", **kwargs}` -> the detector, arguments passed as plain values."""
    config = dict(to_plain(config))
    if "_target_" not in config:
        raise ValueError("detector config needs a `_target_` naming the detector class")
    target = config.pop("_target_")
    cls = resolve_detector_class(target)
    try:
        return cls(**config)
    except MissingPackageError:  # a detector built inside this one
        raise
    except ImportError as error:  # its backbone is imported when it is built
        refusal = missing_package(target, error)
        if refusal is None:
            raise
        raise refusal from error
    except TypeError as error:  # a setting the class does not take (`+detector.net.<typo>=...`)
        if "unexpected keyword argument" not in str(error):
            raise
        name = str(error).rsplit(" ", 1)[-1].strip("'")
        raise ValueError(f"net.{name} is not a setting of {cls.__name__}: check its spelling") from None
