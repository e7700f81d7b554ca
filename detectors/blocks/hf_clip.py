"""Hugging Face `transformers` CLIP image towers, loaded offline.

Effort and CO-SPY's ProGAN variant were trained on the Hugging Face CLIP vision model (Effort reads
its `pooler_output`, CO-SPY `get_image_features`), so their released heads expect that tower
exactly. `model` is a Hugging Face repo id looked up in the local cache (`openai/clip-vit-large-patch14`),
a local folder written by `save_pretrained` (a full CLIP model folder works too), or a
`CLIPVisionConfig` dict for a randomly initialized tower (tests, CPU runs). Nothing is downloaded.
`transformers` is an optional dependency: `pip install forensic-detectors[transformers]`.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from torch import nn

from detectors.blocks.weights import MissingWeightsError, missing_weights_message, weights_deferred

log = logging.getLogger(__name__)

# The architecture of the towers these detectors were released with, so that a machine holding only
# a trained checkpoint can rebuild the network without the original CLIP files.
KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "openai/clip-vit-large-patch14": {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "image_size": 224,
        "patch_size": 14,
        "projection_dim": 768,
        "hidden_act": "quick_gelu",
        "layer_norm_eps": 1e-5,
    }
}


def _transformers():
    try:
        import transformers
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "this detector needs the Hugging Face CLIP tower: pip install "
            "'forensic-detectors[transformers]' (or pip install transformers)"
        ) from error
    return transformers


def vision_config(model: str | Mapping[str, Any], cache_dir: str | None = None):
    """The `CLIPVisionConfig` of a repo id, folder or config dict, without reading weights."""
    transformers = _transformers()
    if isinstance(model, Mapping):
        return transformers.CLIPVisionConfig(**dict(model))
    try:
        return transformers.CLIPVisionConfig.from_pretrained(model, cache_dir=cache_dir, local_files_only=True)
    except (OSError, ValueError):
        if model in KNOWN_CONFIGS:
            return transformers.CLIPVisionConfig(**KNOWN_CONFIGS[model])
        raise MissingWeightsError(
            f"no CLIP config for {model!r}: not a local folder, not in the Hugging Face "
            f"cache, and not one of {sorted(KNOWN_CONFIGS)}"
        )


def load_hf_clip_vision(
    model: str | Mapping[str, Any], projection: bool = False, cache_dir: str | None = None
) -> nn.Module:
    """`CLIPVisionModel` (or `CLIPVisionModelWithProjection` when `projection`) with local weights.

    A config dict gives random initialization (logged); inside `architecture_only()` the
    architecture is built from the config alone because a checkpoint supplies every weight.
    """
    transformers = _transformers()
    cls = transformers.CLIPVisionModelWithProjection if projection else transformers.CLIPVisionModel
    name = model if isinstance(model, str) else "custom CLIP vision config"
    if isinstance(model, Mapping) or weights_deferred():
        reason = "weights come from the checkpoint" if weights_deferred() else "a config dict, no weights"
        log.warning("%s: Hugging Face CLIP tower randomly initialized (%s)", name, reason)
        return cls(vision_config(model, cache_dir))
    try:
        tower = cls.from_pretrained(model, cache_dir=cache_dir, local_files_only=True)
    except OSError as error:
        where = (
            model
            if os.path.isdir(model)
            else (f"Hugging Face cache ({cache_dir or os.environ.get('HF_HOME', '~/.cache/huggingface')}) repo {model}")
        )
        how = [
            f"with internet once: python -c \"import transformers; transformers.CLIPModel.from_pretrained('{model}')\", "
            "then copy ~/.cache/huggingface to this machine",
            "or pass a local folder written by `save_pretrained` (config.json + weights) as the model",
        ]
        raise MissingWeightsError(missing_weights_message(f"Hugging Face CLIP {model!r}", [where], how)) from error
    log.info("%s: loaded Hugging Face CLIP vision weights", name)
    return tower
