"""Finding pretrained weights offline, and saying clearly when they are not there.

The machines this toolkit runs on often have no internet. Pretrained backbones are therefore
resolved to a local file first (an explicit path, the Hugging Face cache, the torch hub cache or
open_clip's URL cache) and loaded from that file, so nothing is downloaded when the files exist.
When they do not, one `MissingWeightsError` says where we looked and how to provide them; we never
fall back silently to random weights (docs/architecture.md, "Detectors").
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import nn

log = logging.getLogger(__name__)

_ARCHITECTURE_ONLY = False


class MissingWeightsError(FileNotFoundError):
    """Pretrained weights were asked for but are not on this machine."""


@contextlib.contextmanager
def architecture_only() -> Iterator[None]:
    """Build backbones without loading pretrained weights, because a checkpoint will overwrite them.

    `DetectorModule.load_from_checkpoint` rebuilds the network from its hyper-parameters and then
    loads the full state dict, so a machine that only holds the trained checkpoint must not need
    the original pretrained files. Use as `with architecture_only(): load_from_checkpoint(...)`.
    """
    global _ARCHITECTURE_ONLY
    previous, _ARCHITECTURE_ONLY = _ARCHITECTURE_ONLY, True
    try:
        yield
    finally:
        _ARCHITECTURE_ONLY = previous


def weights_deferred() -> bool:
    """True inside `architecture_only()`: loaders build the architecture and skip the weights."""
    return _ARCHITECTURE_ONLY


def hf_cache_lookup(repo_id: str, filenames: Sequence[str], cache_dir: str | None = None) -> str | None:
    """Path of the first of `filenames` of `repo_id` already in the Hugging Face cache, else None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub comes with timm and open_clip
        return None
    for filename in filenames:
        found = try_to_load_from_cache(repo_id, filename, cache_dir=cache_dir)
        if isinstance(found, str) and os.path.isfile(found):
            return found
    return None


def url_cache_lookup(url: str, folders: Sequence[str | Path]) -> str | None:
    """Path of `url`'s file name in one of `folders` (open_clip's and torch hub's caches), else None."""
    if not url:
        return None
    name = os.path.basename(url.rstrip("/"))
    for folder in folders:
        candidate = Path(folder).expanduser() / name
        if candidate.is_file():
            return str(candidate)
    return None


def missing_weights_message(what: str, looked: Sequence[str], how: Sequence[str]) -> str:
    lines = [
        f"pretrained weights for {what} are not on this machine (no download is attempted).",
        "Looked in:",
        *[f"  - {place}" for place in looked],
        "Provide them by one of:",
        *[f"  - {step}" for step in how],
        "Or give the setting naming them a local file or folder, or null where the detector can start from "
        "random weights (logged as such).",
    ]
    return "\n".join(lines)


TIMM_HF_FILENAMES = ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin")


def resolve_timm_weights(name: str, pretrained: bool | str, cache_dir: str | None = None) -> str:
    """Local file holding timm weights for `name` (a `model.tag` name picks the tag).

    `pretrained` is True (the default tag of `name`) or a path to a weights file.
    """
    if isinstance(pretrained, str) and pretrained not in ("true", "True", "default"):
        if os.path.isfile(pretrained):
            return pretrained
        raise MissingWeightsError(f"timm weights file {pretrained!r} for {name!r} does not exist")
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    if cfg is None:
        raise MissingWeightsError(f"timm has no pretrained weights registered for {name!r}")
    looked: list[str] = []
    if cfg.hf_hub_id:
        found = hf_cache_lookup(cfg.hf_hub_id, TIMM_HF_FILENAMES, cache_dir)
        looked.append(f"Hugging Face cache ({cache_dir or 'HF_HOME'}) repo {cfg.hf_hub_id}")
        if found:
            return found
    hub_dir = Path(os.environ.get("TORCH_HOME", "~/.cache/torch")).expanduser() / "hub" / "checkpoints"
    found = url_cache_lookup(cfg.url or "", [hub_dir])
    looked.append(f"torch hub cache {hub_dir}")
    if found:
        return found
    how = [
        f"with internet once: python -c \"import timm; timm.create_model('{name}', pretrained=True)\" "
        "(fills the cache), then copy the cache to this machine",
        f"download {cfg.hf_hub_id or cfg.url} yourself and give its path to the setting naming these weights",
    ]
    raise MissingWeightsError(missing_weights_message(f"timm model {name!r}", looked, how))


def load_timm_encoder(
    name: str, pretrained: bool | str | None = None, cache_dir: str | None = None, **kwargs: Any
) -> nn.Module:
    """A timm model, with ImageNet (or other tagged) weights read from a local file only.

    `pretrained`: None/False random init (logged), True the default tag's weights from the cache,
    or a path to a weights file. Extra keyword arguments go to `timm.create_model` (for example
    `features_only=True`, `out_indices`, `in_chans`).
    """
    import timm

    if not pretrained or weights_deferred():
        reason = "weights come from the checkpoint" if pretrained else "pretrained: null"
        log.warning("timm %s: random initialization (%s)", name, reason)
        return timm.create_model(name, pretrained=False, **kwargs)
    path = resolve_timm_weights(name, pretrained, cache_dir)
    log.info("timm %s: loading pretrained weights from %s", name, path)
    return timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": path}, **kwargs)


def resolve_smp_weights(name: str, pretrained: str, cache_dir: str | None = None) -> str:
    """Local file holding segmentation-models-pytorch encoder weights: a path, or a tag such as
    `imagenet` found in the Hugging Face cache (smp publishes them there)."""
    if os.path.isfile(pretrained):
        return pretrained
    from segmentation_models_pytorch.encoders import encoders

    if name not in encoders:
        raise MissingWeightsError(f"segmentation-models-pytorch has no encoder named {name!r}")
    settings = encoders[name]["pretrained_settings"]
    if pretrained not in settings:
        raise MissingWeightsError(
            f"encoder {name!r} has no weights tagged {pretrained!r} and no such file exists "
            f"(tags: {', '.join(settings)})"
        )
    repo_id = settings[pretrained]["repo_id"]
    found = hf_cache_lookup(repo_id, ("model.safetensors",), cache_dir)
    if found:
        return found
    how = [
        f'with internet once: python -c "import segmentation_models_pytorch as smp; '
        f"smp.encoders.get_encoder('{name}', weights='{pretrained}')\" (fills the cache), then copy it here",
        f"download {repo_id}/model.safetensors yourself and give its path to the setting naming these weights",
    ]
    raise MissingWeightsError(
        missing_weights_message(
            f"smp encoder {name!r} ({pretrained})",
            [f"Hugging Face cache ({cache_dir or 'HF_HOME'}) repo {repo_id}"],
            how,
        )
    )


def load_smp_encoder(
    name: str,
    pretrained: str | None = None,
    in_channels: int = 3,
    depth: int = 5,
    output_stride: int = 32,
    cache_dir: str | None = None,
) -> nn.Module:
    """A segmentation-models-pytorch encoder, with weights read from a local file or the cache only.

    `pretrained`: None random init (logged), a tag such as `imagenet`, or a path to a state dict
    (`.safetensors`, or a `.pth` read with `weights_only=True`). `tu-` (timm) encoders take their
    weights through `load_timm_encoder` instead.
    """
    from segmentation_models_pytorch.encoders import get_encoder

    if not pretrained or weights_deferred():
        reason = "weights come from the checkpoint" if pretrained else "pretrained: null"
        log.warning("smp encoder %s: random initialization (%s)", name, reason)
        return get_encoder(name, in_channels=in_channels, depth=depth, weights=None, output_stride=output_stride)
    if name.startswith("tu-"):
        raise MissingWeightsError(f"{name!r} is a timm encoder: load it with load_timm_encoder({name[3:]!r}, ...)")
    path = resolve_smp_weights(name, pretrained, cache_dir)
    log.info("smp encoder %s: loading pretrained weights from %s", name, path)
    encoder = get_encoder(name, in_channels=3, depth=depth, weights=None)
    encoder.load_state_dict(read_state_dict(path))
    encoder.set_in_channels(in_channels, pretrained=True)
    if output_stride != 32:
        encoder.make_dilated(output_stride)
    return encoder


def read_state_dict(path: str) -> dict[str, torch.Tensor]:
    """A state dict from `.safetensors` or a torch file, never executing code (`weights_only=True`)."""
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(path, device="cpu")
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state.get("state_dict", state) if isinstance(state, dict) else state
