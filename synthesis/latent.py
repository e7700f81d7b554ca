"""A latent autoencoder shaped like the VAEs of latent-diffusion models, small enough to train on a CPU.

Stable Diffusion and its relatives never render pixels directly: a VAE compresses the image 8x per
side into a few latent channels, the generator works there, and the VAE decoder (nearest-neighbour
up-sampling followed by convolutions, three times) paints the pixels. Its decoder leaves traces of
its own (smooth, slightly painterly detail at an 8-pixel period), unlike the 4x autoencoders of
`synthesis.generator`. Two uses: re-rendering a whole frame through the latent (a family on its own),
and the space `synthesis.diffusion` denoises in when configured (`space="latent"`).

Unlike a real VAE there is no KL term (the latent is deterministic); instead the latent is divided by
its standard deviation on the training panels (`scale`, as Stable Diffusion's 0.18215), so noise
schedules built for unit-variance data fit it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from synthesis.common import as_rgb_uint8
from synthesis.model_files import load_model, save_model

__all__ = [
    "LatentAutoencoder",
    "train_latent_autoencoder",
    "save_latent",
    "load_latent",
    "random_crops",
    "to_tensor",
    "to_uint8",
]


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """uint8 H x W x 3 -> float 1 x 3 x H x W in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div(255.0)[None]


def to_uint8(t: torch.Tensor) -> np.ndarray:
    """float 1 x 3 x H x W in [0, 1] -> uint8 H x W x 3 (rounded)."""
    return t[0].permute(1, 2, 0).clamp(0, 1).mul(255.0).round().byte().cpu().numpy()


def random_crops(tensors: Sequence[torch.Tensor], rng: np.random.Generator, size: int, count: int) -> torch.Tensor:
    """`count` random size x size crops (random horizontal flips) of 3 x H x W tensors."""
    batch = []
    for _ in range(count):
        t = tensors[int(rng.integers(len(tensors)))]
        y = int(rng.integers(0, t.shape[1] - size + 1))
        x = int(rng.integers(0, t.shape[2] - size + 1))
        patch = t[:, y : y + size, x : x + size]
        batch.append(patch.flip(-1) if rng.random() < 0.5 else patch)
    return torch.stack(batch)


class _ResBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.GroupNorm(min(8, channels), channels),
            nn.SiLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.GroupNorm(min(8, channels), channels),
            nn.SiLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class LatentAutoencoder(nn.Module):
    """RGB in [0, 1] <-> latent of `latent_channels` at 1/8 of the size (three stride-2 stages).

    Decoder: conv -> (residual block, nearest x2 up-sampling, conv) x 3 -> conv to RGB, the layout of
    the latent-diffusion VAE decoder at a fraction of its width. `forward` pads any size to a
    multiple of 8 (reflect) and crops back.
    """

    factor = 8

    def __init__(self, latent_channels: int = 4, width: int = 32) -> None:
        super().__init__()
        self.config = {"latent_channels": int(latent_channels), "width": int(width)}
        chans = [width, width * 2, width * 4, width * 4]
        enc: list[nn.Module] = [nn.Conv2d(3, chans[0], 3, padding=1)]
        for cin, cout in zip(chans[:-1], chans[1:]):
            enc += [_ResBlock(cin), nn.Conv2d(cin, cout, 3, stride=2, padding=1)]
        enc += [
            _ResBlock(chans[-1]),
            nn.GroupNorm(8, chans[-1]),
            nn.SiLU(),
            nn.Conv2d(chans[-1], latent_channels, 3, padding=1),
        ]
        self.encoder = nn.Sequential(*enc)
        dec: list[nn.Module] = [nn.Conv2d(latent_channels, chans[-1], 3, padding=1)]
        for cin, cout in zip(chans[::-1][:-1], chans[::-1][1:]):
            dec += [_ResBlock(cin), nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(cin, cout, 3, padding=1)]
        dec += [_ResBlock(chans[0]), nn.GroupNorm(8, chans[0]), nn.SiLU(), nn.Conv2d(chans[0], 3, 3, padding=1)]
        self.decoder = nn.Sequential(*dec)
        self.register_buffer("scale", torch.tensor(1.0))  # latent std on the training panels

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Scaled latent (about unit variance); x's sides must be multiples of 8."""
        return self.encoder(x * 2 - 1) / self.scale

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return ((self.decoder(z * self.scale) + 1) / 2).clamp(0.0, 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        x = pad_to(x, self.factor)
        return self.decode(self.encode(x))[..., :h, :w]


def pad_to(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Reflect-pad the bottom and right of N x C x H x W to multiples of `multiple`."""
    h, w = x.shape[-2:]
    ph, pw = (-h) % multiple, (-w) % multiple
    return F.pad(x, (0, pw, 0, ph), mode="reflect") if ph or pw else x


def train_latent_autoencoder(
    images: Sequence[np.ndarray],
    steps: int = 600,
    seed: int = 0,
    *,
    latent_channels: int = 4,
    width: int = 32,
    crop: int = 64,
    batch_size: int = 8,
    lr: float = 2e-3,
    device: str | torch.device = "cpu",
) -> LatentAutoencoder:
    """Train on random crops of authentic `images` (L1, Adam, cosine decay), then set `scale`.

    Deterministic per `seed` on one device. 8x compression into 4 channels loses detail: expect a
    re-render PSNR in the low-to-mid 20s dB after a few minutes on CPU, like a weak LDM VAE. The
    returned model is in eval mode.
    """
    tensors = [to_tensor(as_rgb_uint8(im))[0] for im in images]
    if not tensors:
        raise ValueError("train_latent_autoencoder needs at least one image")
    small = [tuple(t.shape[1:]) for t in tensors if min(t.shape[1:]) < crop]
    if small:
        raise ValueError(f"images must be at least {crop} px on each side; got {small[:3]}")
    if crop % LatentAutoencoder.factor:
        raise ValueError(f"crop must be a multiple of 8, got {crop}")
    rng = np.random.default_rng(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LatentAutoencoder(latent_channels, width)
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps))
    for _ in range(steps):
        x = random_crops(tensors, rng, crop, batch_size).to(device)
        loss = F.l1_loss(model(x), x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        latents = model.encoder(random_crops(tensors, rng, crop, 4 * batch_size).to(device) * 2 - 1)
        model.scale.fill_(float(latents.std().clamp_min(1e-3)))
    return model


def save_latent(model: LatentAutoencoder, path: str | Path) -> Path:
    """config + state_dict (plain tensors), so `load_latent` reads it with weights_only=True."""
    return save_model(model, path)


def load_latent(path: str | Path, device: str | torch.device = "cpu") -> LatentAutoencoder:
    return load_model(LatentAutoencoder, path, device, what="latent autoencoder")
