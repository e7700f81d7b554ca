"""open_clip image towers by name and weights tag, loaded offline, with the preprocessing they expect.

`model` is an open_clip architecture name (`ViT-L-14`, `ViT-SO400M-14-SigLIP-384`) or a config dict
of the same shape as open_clip's JSON configs (`{"embed_dim": ..., "vision_cfg": {...}}`), which is
how tests and CPU runs use a tiny ViT without downloading anything. `pretrained` is an open_clip
tag (`openai`, `webli`, ...), a path to a weights file, or None for random initialization.

Only the image tower is kept: `visual(x)` is exactly `CLIP.encode_image(x)` (the projected CLS
token, not L2-normalized), which is the feature UnivFD, CO-SPY and Effort put a linear head on.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from detectors.blocks.weights import (
    MissingWeightsError,
    hf_cache_lookup,
    missing_weights_message,
    url_cache_lookup,
    weights_deferred,
)

log = logging.getLogger(__name__)

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
OPEN_CLIP_HF_FILENAMES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


@dataclass(frozen=True)
class ClipSpec:
    """What the image tower expects: input size, normalization and how its weights were trained
    to see images (`resize_mode`: `shortest` = resize the short side then centre-crop, `squash` =
    resize both sides)."""

    image_size: int
    embed_dim: int
    mean: tuple[float, float, float] = OPENAI_CLIP_MEAN
    std: tuple[float, float, float] = OPENAI_CLIP_STD
    interpolation: str = "bicubic"
    resize_mode: str = "shortest"
    quick_gelu: bool = False


def clip_model_config(model: str | Mapping[str, Any]) -> dict[str, Any]:
    """The open_clip config dict for a name, or a validated copy of a custom config dict."""
    import open_clip

    if isinstance(model, Mapping):
        config = copy.deepcopy(dict(model))
        if "embed_dim" not in config or "vision_cfg" not in config:
            raise ValueError("a custom CLIP config needs `embed_dim` and `vision_cfg` (open_clip's JSON layout)")
        return config
    config = open_clip.get_model_config(model)
    if config is None:
        raise ValueError(f"unknown open_clip model {model!r}; known: {', '.join(open_clip.list_models())}")
    return config


def _tag_config(model: str | Mapping[str, Any], pretrained: str | None) -> dict[str, Any]:
    if not isinstance(model, str) or not pretrained or os.path.isfile(pretrained):
        return {}
    from open_clip.pretrained import get_pretrained_cfg

    return dict(get_pretrained_cfg(model, pretrained) or {})


def clip_spec(
    model: str | Mapping[str, Any], pretrained: str | None = None, quick_gelu: bool | None = None
) -> ClipSpec:
    """The preprocessing facts of a model + weights pair, read from configs without building it."""
    config = clip_model_config(model)
    tag = _tag_config(model, pretrained)
    size = config["vision_cfg"].get("image_size", 224)
    size = int(size[0] if isinstance(size, (tuple, list)) else size)
    if quick_gelu is None:
        quick_gelu = bool(tag.get("quick_gelu", config.get("quick_gelu", False)))
    return ClipSpec(
        image_size=size,
        embed_dim=int(config["embed_dim"]),
        mean=tuple(tag.get("mean", config.get("mean", OPENAI_CLIP_MEAN))),
        std=tuple(tag.get("std", config.get("std", OPENAI_CLIP_STD))),
        interpolation=str(tag.get("interpolation", "bicubic")),
        resize_mode=str(tag.get("resize_mode", "shortest")),
        quick_gelu=quick_gelu,
    )


def resolve_clip_weights(model: str, pretrained: str, cache_dir: str | None = None) -> str:
    """Local file holding `model`'s `pretrained` weights: the path itself, or the cached download.

    Never downloads. The Hugging Face cache honours `HF_HOME`/`HF_HUB_CACHE` (or `cache_dir`);
    open_clip's URL downloads live in `~/.cache/clip` (or `cache_dir`).
    """
    if os.path.isfile(pretrained):
        return pretrained
    from open_clip.pretrained import list_pretrained_tags_by_model

    tag = _tag_config(model, pretrained)
    if not tag:
        known = list_pretrained_tags_by_model(model)
        raise MissingWeightsError(
            f"{pretrained!r} is neither a file nor a known open_clip tag for {model!r} (known tags: {known})"
        )
    looked: list[str] = []
    if tag.get("hf_hub"):
        # open_clip's convention: 'org/repo/' means the default file names, 'org/repo/file' one file.
        repo_id, filename = os.path.split(tag["hf_hub"])
        names = (filename,) if filename else OPEN_CLIP_HF_FILENAMES
        found = hf_cache_lookup(repo_id, names, cache_dir)
        looked.append(
            f"Hugging Face cache ({cache_dir or os.environ.get('HF_HOME', '~/.cache/huggingface')}) "
            f"repo {repo_id} files {', '.join(names)}"
        )
        if found:
            return found
    if tag.get("url"):
        folders = [cache_dir] if cache_dir else [os.path.expanduser("~/.cache/clip")]
        found = url_cache_lookup(tag["url"], folders)
        looked.append(f"open_clip URL cache {folders[0]} ({os.path.basename(tag['url'])})")
        if found:
            return found
    source = f"https://huggingface.co/{tag['hf_hub'].rstrip('/')}" if tag.get("hf_hub") else tag.get("url", "")
    how = [
        f"with internet once: python -c \"import open_clip; open_clip.create_model('{model}', "
        f"pretrained='{pretrained}')\", then copy ~/.cache/huggingface (or ~/.cache/clip) to this machine",
        f"download the weights from {source} and give the file's path where the tag {pretrained!r} is set "
        "(`net.clip_pretrained` or `net.pretrained`)",
    ]
    raise MissingWeightsError(missing_weights_message(f"open_clip {model!r} + {pretrained!r}", looked, how))


def load_clip_visual(
    model: str | Mapping[str, Any],
    pretrained: str | None = None,
    cache_dir: str | None = None,
    quick_gelu: bool | None = None,
) -> tuple[nn.Module, ClipSpec]:
    """The image tower of an open_clip model and its `ClipSpec`.

    Pretrained weights are read from a local file or the caches only (`resolve_clip_weights`); a
    missing file raises `MissingWeightsError`. `pretrained=None` gives random initialization and
    says so in the log.
    """
    import open_clip
    from open_clip.model import _build_vision_tower

    spec = clip_spec(model, pretrained, quick_gelu)
    name = model if isinstance(model, str) else "custom CLIP config"
    if not pretrained or weights_deferred():
        reason = "weights come from the checkpoint" if pretrained else "pretrained: null"
        log.warning("%s: image tower randomly initialized (%s)", name, reason)
        config = clip_model_config(model)
        visual = _build_vision_tower(config["embed_dim"], config["vision_cfg"], quick_gelu=spec.quick_gelu)
        return visual, spec
    if not isinstance(model, str):
        if not os.path.isfile(pretrained):
            raise ValueError("a custom CLIP config takes its weights from a file path, not a tag")
        return _custom_visual_from_file(model, pretrained, spec), spec
    path = resolve_clip_weights(model, pretrained, cache_dir)
    log.info("%s: loading pretrained %r weights from %s", model, pretrained, path)
    clip = open_clip.create_model(
        model, pretrained=path, force_quick_gelu=spec.quick_gelu, pretrained_image=False, pretrained_text=False
    )
    visual = clip.visual
    del clip
    return visual, spec


def _custom_visual_from_file(config: Mapping[str, Any], path: str, spec: ClipSpec) -> nn.Module:
    """The image tower of a custom config with weights from a state-dict file (a whole CLIP's, with
    `visual.` keys, or the tower's own), read with `weights_only=True`."""
    from open_clip.model import _build_vision_tower

    config = clip_model_config(config)
    visual = _build_vision_tower(config["embed_dim"], config["vision_cfg"], quick_gelu=spec.quick_gelu)
    state = torch.load(path, map_location="cpu", weights_only=True)
    if any(key.startswith("visual.") for key in state):
        state = {key[len("visual.") :]: value for key, value in state.items() if key.startswith("visual.")}
    visual.load_state_dict(state)
    log.info("custom CLIP config: image tower weights loaded from %s", path)
    return visual


def clip_preprocess(spec: ClipSpec, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The detector's `Preprocess` for a CLIP tower: its normalization always, size and mode
    overridable. The default (centre crop at the tower's size, no resizing) is UnivFD's; other
    sizes are resized to the tower's size inside the network (`ClipImageEncoder`)."""
    config = {
        "size": spec.image_size,
        "mode": "center_crop",
        "interpolation": spec.interpolation,
        **dict(overrides or {}),
    }
    config.update(
        mean=list(spec.mean), std=list(spec.std), clip_size=spec.image_size, clip_resize_mode=spec.resize_mode
    )
    return config


class ClipImageEncoder(nn.Module):
    """`encode_image` of an open_clip model on normalized input of any size, with an adapter.

    Input that is not the tower's size is resized inside the graph (`F.interpolate`, so the ONNX
    export carries it). `adapter`: `frozen` (UnivFD, CO-SPY), `svd` (Effort) or `full`. Frozen
    towers run under `no_grad` in training too, which saves the activation memory that a ViT-L
    would otherwise keep for a backward pass that never reaches it.
    """

    def __init__(
        self,
        model: str | Mapping[str, Any],
        pretrained: str | None = None,
        adapter: str = "frozen",
        residual_rank: int = 1,
        cache_dir: str | None = None,
        quick_gelu: bool | None = None,
        interpolation: str = "bilinear",
    ) -> None:
        super().__init__()
        from detectors.blocks.svd_adapter import apply_adapter

        if interpolation not in ("bilinear", "bicubic", "nearest"):
            raise ValueError(f"CLIP in-graph interpolation must be bilinear, bicubic or nearest, got {interpolation!r}")
        self.visual, self.spec = load_clip_visual(model, pretrained, cache_dir, quick_gelu)
        self.embed_dim, self.adapter, self.interpolation = self.spec.embed_dim, adapter, interpolation
        self.parameter_counts = apply_adapter(self.visual, adapter, residual_rank)

    def resize(self, image: torch.Tensor) -> torch.Tensor:
        size = self.spec.image_size
        if tuple(image.shape[-2:]) == (size, size):
            return image
        align = False if self.interpolation != "nearest" else None
        return F.interpolate(image, size=(size, size), mode=self.interpolation, align_corners=align)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        image = self.resize(image)
        if torch.onnx.is_in_onnx_export() or torch.jit.is_tracing():
            return self._traceable_forward(image)
        if self.adapter == "frozen" and torch.is_grad_enabled():
            with torch.no_grad():
                return self.visual(image)
        return self.visual(image)

    def _traceable_forward(self, image: torch.Tensor) -> torch.Tensor:
        """`nn.MultiheadAttention` takes a fused fast path in eval when no parameter needs a
        gradient (a frozen tower), and that fused operator has no ONNX export; exporters get the
        plain, exportable path instead (numerically the same to float precision)."""
        previous = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            return self.visual(image)
        finally:
            torch.backends.mha.set_fastpath_enabled(previous)
