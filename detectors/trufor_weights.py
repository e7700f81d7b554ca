"""The published TruFor and Noiseprint++ weights in our `trufor` network: a documented key mapping.

The authors' checkpoint (`trufor.pth.tar`, a dict whose `state_dict` holds the network) names
parts after their code; each rule below renames one family of keys (`{i}` is any index):

| published key                                     | ours                                          |
|---------------------------------------------------|-----------------------------------------------|
| `dncnn.{i}.`                                      | `fingerprint.layers.{i}.`                     |
| `backbone.patch_embed{i}.` / `block{i}.` / `norm{i}.` | `encoder.rgb.` + the same                 |
| `backbone.extra_patch_embed{i}.` / `extra_block{i}.` / `extra_norm{i}.` | `encoder.noise.` + the name without `extra_` |
| `backbone.FRMs.{i}.channel_weights.mlp.`          | `encoder.rectify.{i}.channel_mlp.`            |
| `backbone.FRMs.{i}.spatial_weights.mlp.`          | `encoder.rectify.{i}.spatial_mlp.`            |
| `backbone.FFMs.{i}.cross.channel_proj1.` / `2.`   | `encoder.fuse.{i}.proj_rgb.` / `proj_noise.`  |
| `backbone.FFMs.{i}.cross.cross_attn.kv1.` / `2.`  | `encoder.fuse.{i}.cross_attention.kv_rgb.` / `kv_noise.` |
| `backbone.FFMs.{i}.cross.end_proj1.` / `2.`       | `encoder.fuse.{i}.out_rgb.` / `out_noise.`    |
| `backbone.FFMs.{i}.cross.norm1.` / `2.`           | `encoder.fuse.{i}.norm_rgb.` / `norm_noise.`  |
| `backbone.FFMs.{i}.channel_emb.residual.`         | `encoder.fuse.{i}.embed_residual.`            |
| `backbone.FFMs.{i}.channel_emb.channel_embed.`    | `encoder.fuse.{i}.embed.`                     |
| `backbone.FFMs.{i}.channel_emb.norm.`             | `encoder.fuse.{i}.embed_norm.`                |
| `decode_head.linear_c{k}.proj.` (Linear)          | `anomaly_decoder.project.{k-1}.` (1x1 conv: weight gains two unit dims) |
| `decode_head.linear_fuse.` / `linear_pred.`       | `anomaly_decoder.fuse.` / `predict.`          |
| `decode_head_conf.` + the same                    | `confidence_decoder.` + the same              |
| `detection.`                                      | `detection_head.`                             |

Noiseprint++ alone (`noiseprint++.th`, `{"network": state}`) maps `{i}.` to `fingerprint.layers.{i}.`.
Published weights carry their authors' license (TruFor's: non-commercial use only).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Mapping

import torch
from torch import nn

from detectors.blocks.weights import MissingWeightsError

log = logging.getLogger(__name__)

_RULES = [
    ("dncnn.{i}.", "fingerprint.layers.{i}."),
    ("backbone.extra_patch_embed{i}.", "encoder.noise.patch_embed{i}."),
    ("backbone.extra_block{i}.", "encoder.noise.block{i}."),
    ("backbone.extra_norm{i}.", "encoder.noise.norm{i}."),
    ("backbone.patch_embed{i}.", "encoder.rgb.patch_embed{i}."),
    ("backbone.block{i}.", "encoder.rgb.block{i}."),
    ("backbone.norm{i}.", "encoder.rgb.norm{i}."),
    ("backbone.FRMs.{i}.channel_weights.mlp.", "encoder.rectify.{i}.channel_mlp."),
    ("backbone.FRMs.{i}.spatial_weights.mlp.", "encoder.rectify.{i}.spatial_mlp."),
    ("backbone.FFMs.{i}.cross.channel_proj1.", "encoder.fuse.{i}.proj_rgb."),
    ("backbone.FFMs.{i}.cross.channel_proj2.", "encoder.fuse.{i}.proj_noise."),
    ("backbone.FFMs.{i}.cross.cross_attn.kv1.", "encoder.fuse.{i}.cross_attention.kv_rgb."),
    ("backbone.FFMs.{i}.cross.cross_attn.kv2.", "encoder.fuse.{i}.cross_attention.kv_noise."),
    ("backbone.FFMs.{i}.cross.end_proj1.", "encoder.fuse.{i}.out_rgb."),
    ("backbone.FFMs.{i}.cross.end_proj2.", "encoder.fuse.{i}.out_noise."),
    ("backbone.FFMs.{i}.cross.norm1.", "encoder.fuse.{i}.norm_rgb."),
    ("backbone.FFMs.{i}.cross.norm2.", "encoder.fuse.{i}.norm_noise."),
    ("backbone.FFMs.{i}.channel_emb.residual.", "encoder.fuse.{i}.embed_residual."),
    ("backbone.FFMs.{i}.channel_emb.channel_embed.", "encoder.fuse.{i}.embed."),
    ("backbone.FFMs.{i}.channel_emb.norm.", "encoder.fuse.{i}.embed_norm."),
    *[
        (f"{theirs}.linear_c{k}.proj.", f"{ours}.project.{k - 1}.")
        for theirs, ours in (("decode_head", "anomaly_decoder"), ("decode_head_conf", "confidence_decoder"))
        for k in (1, 2, 3, 4)
    ],
    *[
        (f"{theirs}.linear_{part}.", f"{ours}.{new}.")
        for theirs, ours in (("decode_head", "anomaly_decoder"), ("decode_head_conf", "confidence_decoder"))
        for part, new in (("fuse", "fuse"), ("pred", "predict"))
    ],
    ("detection.", "detection_head."),
]


def _compile(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(template).replace(re.escape("{i}"), r"(?P<i>\d+)"))


_FORWARD = [(_compile(theirs), ours) for theirs, ours in _RULES]
_BACKWARD = [(_compile(ours), theirs) for theirs, ours in _RULES]


def _rename(key: str, rules: list[tuple[re.Pattern[str], str]]) -> str | None:
    for pattern, template in rules:
        match = pattern.match(key)
        if match:
            return template.format(**match.groupdict()) + key[match.end() :]
    return None


def _is_projection(key: str) -> bool:
    return bool(re.match(r"^(anomaly|confidence)_decoder\.project\.\d+\.weight$", key))


def map_published_state_dict(published: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Published key names -> ours (table in the module docstring); unknown keys are an error."""
    mapped, unknown = {}, []
    for key, value in published.items():
        ours = _rename(key, _FORWARD)
        if ours is None:
            unknown.append(key)
            continue
        mapped[ours] = value[..., None, None] if _is_projection(ours) and value.dim() == 2 else value
    if unknown:
        raise ValueError(f"{len(unknown)} keys of the published checkpoint have no mapping, e.g. {unknown[:5]}")
    return mapped


def to_published_state_dict(ours: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse mapping: our state dict under the published names (for tests and tools)."""
    published = {}
    for key, value in ours.items():
        theirs = _rename(key, _BACKWARD)
        if theirs is None:
            raise ValueError(f"our key {key!r} has no published counterpart")
        published[theirs] = value[..., 0, 0] if _is_projection(key) else value
    return published


def read_weights_file(path: str, what: str) -> dict:
    if not os.path.isfile(path):
        raise MissingWeightsError(
            f"{what} file {path!r} does not exist (no download is attempted). The published TruFor weights "
            "are distributed by their authors (github.com/grip-unina/TruFor, non-commercial license): download "
            "them yourself and pass the path, or set the option to null for random initialization."
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a pickle with objects other than tensors and plain containers
        raise ValueError(
            f"{path} cannot be read as plain tensors (weights_only=True refused it: {error}); "
            "re-save its state dict with torch.save(checkpoint['state_dict'], new_path)"
        ) from error


def load_published(model: nn.Module, path: str) -> None:
    """Load the published `trufor.pth.tar` (or its bare state dict) into `model`, strictly."""
    checkpoint = read_weights_file(path, "TruFor checkpoint")
    state = checkpoint.get("state_dict", checkpoint)
    mapped = map_published_state_dict(state)
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{path} does not fit this trufor configuration: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]} (the published model is MiT-B2, "
            "17-layer DnCNN, decoder width 512)"
        )
    log.info("trufor: published weights loaded from %s (authors' license: non-commercial use)", path)


def load_fingerprint(extractor: nn.Module, path: str) -> None:
    """Noiseprint++ weights (`{"network": state}`, keys `0.weight`...) or a state dict of ours."""
    state = read_weights_file(path, "fingerprint weights")
    state = state.get("network", state)
    state = {(k if k.startswith("layers.") else f"layers.{k}"): v for k, v in state.items()}
    extractor.load_state_dict(state)
    log.info("trufor: fingerprint extractor loaded from %s", path)
