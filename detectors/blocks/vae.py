"""A frozen Stable Diffusion VAE (`diffusers` AutoencoderKL), loaded offline, for reconstruction residuals.

Latent diffusion images pass through the VAE decoder, so they are reconstructed almost exactly
while real photographs are not; the residual x - decode(encode(x)) is CO-SPY's artifact signal.
`vae` is a local folder (an AutoencoderKL folder with `config.json`, or a whole Stable Diffusion
folder with a `vae/` subfolder), a Hugging Face repo id in the local cache
(`CompVis/stable-diffusion-v1-4`, its `vae` subfolder), or a config dict for a randomly initialized
VAE (tests, CPU runs). `diffusers` is optional: `pip install forensic-detectors[diffusers]`.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

import torch
from torch import nn

from detectors.blocks.weights import MissingWeightsError, missing_weights_message, weights_deferred

log = logging.getLogger(__name__)

# Stable Diffusion v1.x's VAE, so a machine holding only a trained checkpoint can rebuild it.
SD_V1_VAE_CONFIG: dict[str, Any] = {
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "block_out_channels": [128, 256, 512, 512],
    "act_fn": "silu",
    "sample_size": 512,
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
}
KNOWN_VAES = {"CompVis/stable-diffusion-v1-4": SD_V1_VAE_CONFIG}


def _autoencoder_kl():
    try:
        from diffusers import AutoencoderKL
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the VAE residual needs diffusers: pip install 'forensic-detectors[diffusers]' (or pip install diffusers)"
        ) from error
    return AutoencoderKL


def _subfolder(vae: str) -> str | None:
    """`vae/` when `vae` names a whole pipeline (a local folder holding `vae/`, or a repo id)."""
    if os.path.isdir(vae):
        return "vae" if os.path.isfile(os.path.join(vae, "vae", "config.json")) else None
    return "vae"


def load_vae(vae: str | Mapping[str, Any], cache_dir: str | None = None) -> nn.Module:
    """A frozen, eval-mode AutoencoderKL from local files (or random from a config dict, logged)."""
    autoencoder_kl = _autoencoder_kl()
    if isinstance(vae, Mapping) or weights_deferred():
        if isinstance(vae, Mapping):
            config, reason = dict(vae), "a config dict, no weights"
        else:
            reason = "weights come from the checkpoint"
            try:
                config = dict(
                    autoencoder_kl.load_config(
                        vae, subfolder=_subfolder(vae), cache_dir=cache_dir, local_files_only=True
                    )
                )
            except (OSError, ValueError):
                if vae not in KNOWN_VAES:
                    raise MissingWeightsError(
                        f"no VAE config for {vae!r}: not a local folder, not in the cache, "
                        f"not one of {sorted(KNOWN_VAES)}"
                    ) from None
                config = KNOWN_VAES[vae]
        log.warning(
            "%s: VAE randomly initialized (%s)", "custom VAE config" if isinstance(vae, Mapping) else vae, reason
        )
        model = autoencoder_kl.from_config(config)
    else:
        try:
            model = autoencoder_kl.from_pretrained(
                vae, subfolder=_subfolder(vae), cache_dir=cache_dir, local_files_only=True
            )
        except (OSError, ValueError) as error:
            how = [
                f'with internet once: python -c "import diffusers; diffusers.AutoencoderKL.from_pretrained('
                f"'{vae}', subfolder='vae')\", then copy ~/.cache/huggingface to this machine",
                "or pass a local AutoencoderKL folder (config.json + weights) as `vae`",
            ]
            raise MissingWeightsError(missing_weights_message(f"VAE {vae!r}", [str(vae)], how)) from error
        log.info("%s: loaded VAE weights", vae)
    model.requires_grad_(False)
    return model.eval()


class VAEReconstruction(nn.Module):
    """`decode(encode(x).latent_dist.mean)` of a frozen VAE, under `no_grad` and always in eval mode."""

    def __init__(self, vae: str | Mapping[str, Any], cache_dir: str | None = None) -> None:
        super().__init__()
        self.vae = load_vae(vae, cache_dir)

    def train(self, mode: bool = True) -> "VAEReconstruction":
        super().train(mode)
        self.vae.eval()  # frozen: no dropout, whatever the detector's mode
        return self

    @torch.no_grad()
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        latent = self.vae.encode(image).latent_dist.mean
        return self.vae.decode(latent).sample
