"""Reading the checkpoints that detector authors publish, without executing code from them.

Authors save their networks in their own layouts (`{"model_state_dict": ...}`, `{"model": ...,
"args": Namespace(...)}`, DataParallel `module.` prefixes, fp16 tensors). Each detector maps those
keys onto its own modules (its `authors_key_map`); this module only gets the tensors out safely:
`torch.load(weights_only=True)`, with `argparse.Namespace` allowed because training scripts
pickle their command-line arguments next to the weights (a plain attribute bag, no code).
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any, Callable, Iterable, Mapping

import torch

from detectors.blocks.weights import MissingWeightsError

KeyMap = Callable[[str], "str | None"]


class IncompatibleWeightsError(ValueError):
    """A weights file whose keys or shapes do not fit the detector it was given to."""


def read_state_dict(path: str | os.PathLike, entries: Iterable[str]) -> tuple[str, dict[str, torch.Tensor]]:
    """(`entry`, tensors) from a released checkpoint or one written by this toolkit's train.py.

    `entries` are the top-level keys the authors store the weights under, tried in order; a
    Lightning checkpoint of ours is recognised by its `state_dict` of `net.` keys and returned as
    entry `"toolkit"` with the prefix removed.
    """
    if not os.path.isfile(path):
        raise MissingWeightsError(f"weights file {path} does not exist")
    with torch.serialization.safe_globals([argparse.Namespace]):
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # pickle refusals and corrupt files alike: say which file and why
            raise IncompatibleWeightsError(f"{path}: cannot be read as a weights file ({error})") from None
    if not isinstance(loaded, Mapping):
        raise IncompatibleWeightsError(f"{path}: expected a dictionary of weights, got {type(loaded).__name__}")
    state = loaded.get("state_dict")
    if isinstance(state, Mapping) and any(str(k).startswith("net.") for k in state):
        return "toolkit", {k[4:]: v for k, v in state.items() if k.startswith("net.")}
    for entry in entries:
        if isinstance(loaded.get(entry), Mapping):
            return entry, strip_prefix(dict(loaded[entry]), "module.")
    if loaded and all(isinstance(v, torch.Tensor) for v in loaded.values()):
        return "", strip_prefix(dict(loaded), "module.")
    raise IncompatibleWeightsError(
        f"{path}: no weights under {', '.join(entries)} (top-level keys: {', '.join(map(str, list(loaded)[:10]))})"
    )


def strip_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """DataParallel checkpoints prefix every key with `module.`; drop it when all keys have it."""
    if state and all(k.startswith(prefix) for k in state):
        return {k[len(prefix) :]: v for k, v in state.items()}
    return state


def regex_key_map(rules: Iterable[tuple[str, Any]]) -> KeyMap:
    """A key map from (pattern, replacement) pairs, first full match wins; a replacement is a
    `re.sub` template or function of the match, or None, which drops
    the key (constants our modules compute themselves, parts with no counterpart)."""
    compiled = [(re.compile(pattern), replacement) for pattern, replacement in rules]

    def mapped(key: str) -> str | None:
        for pattern, replacement in compiled:
            if pattern.fullmatch(key):
                return None if replacement is None else pattern.sub(replacement, key)
        raise IncompatibleWeightsError(f"unexpected key {key!r}: not part of the released model this detector reads")

    return mapped


def map_state_dict(state: Mapping[str, torch.Tensor], key_map: KeyMap) -> dict[str, torch.Tensor]:
    """Rename the authors' keys to ours, in float32 (released files are often fp16)."""
    mapped: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        target = key_map(key)
        if target is None:
            continue
        value = value.float() if value.is_floating_point() else value
        if target in mapped and not torch.equal(mapped[target], value):
            raise IncompatibleWeightsError(f"{key!r} maps to {target!r}, which another key already set differently")
        mapped[target] = value
    return mapped


def load_mapped(
    module: torch.nn.Module, state: Mapping[str, torch.Tensor], optional: Iterable[str] = (), source: str = "weights"
) -> list[str]:
    """Load `state` (our names) into `module`; every parameter and persistent buffer must be given
    except those under an `optional` prefix, and shapes must agree. Returns the optional keys that
    the file did not provide, so callers can log what kept its initial value."""
    own = module.state_dict()
    optional = tuple(optional)
    unknown = sorted(set(state) - set(own))
    wrong = sorted(k for k in set(state) & set(own) if tuple(state[k].shape) != tuple(own[k].shape))
    missing = sorted(k for k in set(own) - set(state) if not k.startswith(optional))
    if unknown or wrong or missing:
        details = []
        for label, keys in (("unknown keys", unknown), ("missing keys", missing)):
            if keys:
                details.append(f"{label} ({len(keys)}): {', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''}")
        if wrong:
            details.append(
                "shape mismatches: "
                + ", ".join(f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in wrong[:8])
            )
        raise IncompatibleWeightsError(f"{source} does not fit this detector: " + "; ".join(details))
    module.load_state_dict(state, strict=False)
    return sorted(k for k in set(own) - set(state))
