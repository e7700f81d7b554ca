"""A small denoising diffusion model trained here, used the way diffusion is used to fake evidence.

Real generators synthesize by iterative denoising, and a detector trained only on up-sampling
generators is blind to them. This is a DDPM (Ho et al. 2020): a U-Net trained to predict the noise
added to crops of the authentic panels, in pixel space or in the latent of `synthesis.latent`
(latent diffusion, as Stable Diffusion). Sampling uses deterministic DDIM steps (Song et al. 2021).
Two uses, as people use diffusion on photographs:

- `sdedit`: partial regeneration of a whole frame (SDEdit, Meng et al. 2022): the image is noised to
  `strength` of the schedule and denoised back; low strength keeps the picture and replaces its
  fine statistics, high strength re-invents more of it;
- `inpaint`: only a masked region is regenerated; at every step the known region is replaced by the
  input noised to the same level (the blending that RePaint and SD inpainting pipelines use), and the
  result is composited with an inward feather, so pixels outside the mask equal the input exactly.

Small and CPU-trained, its samples are far from photographic at high strength; what matters for a
detector is that every output pixel comes out of a denoising chain.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from synthesis.common import as_bool_mask, as_rgb_uint8, composite, inner_alpha
from synthesis.generator import RegionEdit
from synthesis.latent import LatentAutoencoder, pad_to, random_crops, to_tensor, to_uint8
from synthesis.model_files import load_model, save_model

__all__ = [
    "DenoisingUNet",
    "train_diffusion",
    "save_diffusion",
    "load_diffusion",
    "sdedit",
    "inpaint",
    "DiffusionEdit",
    "SPACES",
]

SPACES = ("pixel", "latent")


def _timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.sin(), args.cos()], dim=1)


class _TimeResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, time_dim: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(min(8, cin), cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.time = nn.Linear(time_dim, cout)
        self.norm2, self.conv2 = nn.GroupNorm(min(8, cout), cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x))) + self.time(temb)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class DenoisingUNet(nn.Module):
    """Noise predictor eps(x_t, t): a U-Net with one residual block per level, time-conditioned.

    Fully convolutional: any size works once padded to a multiple of 2**(levels - 1).
    """

    def __init__(
        self,
        in_channels: int = 3,
        width: int = 32,
        mults: Sequence[int] = (1, 2, 2),
        timesteps: int = 1000,
        space: str = "pixel",
    ) -> None:
        super().__init__()
        if space not in SPACES:
            raise ValueError(f"space must be one of {SPACES}, got {space!r}")
        self.config = {
            "in_channels": int(in_channels),
            "width": int(width),
            "mults": [int(m) for m in mults],
            "timesteps": int(timesteps),
            "space": space,
        }
        time_dim = width * 4
        self.time_mlp = nn.Sequential(nn.Linear(width, time_dim), nn.SiLU(), nn.Linear(time_dim, time_dim))
        chans = [width * m for m in mults]
        self.conv_in = nn.Conv2d(in_channels, chans[0], 3, padding=1)
        self.down = nn.ModuleList(
            _TimeResBlock(cin, cout, time_dim) for cin, cout in zip([chans[0], *chans[:-1]], chans)
        )
        self.mid = _TimeResBlock(chans[-1], chans[-1], time_dim)
        self.up = nn.ModuleList(
            _TimeResBlock(c * 2, cprev, time_dim) for c, cprev in zip(chans[::-1], [*chans[::-1][1:], chans[0]])
        )
        self.conv_out = nn.Sequential(
            nn.GroupNorm(min(8, chans[0]), chans[0]), nn.SiLU(), nn.Conv2d(chans[0], in_channels, 3, padding=1)
        )
        betas = torch.linspace(1e-4, 0.02, timesteps, dtype=torch.float64)  # DDPM's linear schedule
        self.register_buffer("alphas_cumprod", torch.cumprod(1 - betas, 0).float())

    @property
    def multiple(self) -> int:
        return 2 ** (len(self.config["mults"]) - 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.time_mlp(_timestep_embedding(t, self.config["width"]))
        h = self.conv_in(x)
        skips = []
        for i, block in enumerate(self.down):
            h = block(h, temb)
            skips.append(h)
            if i < len(self.down) - 1:
                h = F.avg_pool2d(h, 2)
        h = self.mid(h, temb)
        for i, block in enumerate(self.up):
            h = block(torch.cat([h, skips.pop()], dim=1), temb)
            if i < len(self.up) - 1:
                h = F.interpolate(h, scale_factor=2, mode="nearest")
        return self.conv_out(h)

    def add_noise(self, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        ab = self.alphas_cumprod[t].view(-1, 1, 1, 1)
        return ab.sqrt() * x0 + (1 - ab).sqrt() * noise


def _training_data(images: Sequence[np.ndarray], latent: LatentAutoencoder | None) -> list[torch.Tensor]:
    """Panels as the model sees them: [-1, 1] pixels, or the latent of each (padded) panel."""
    pixels = [to_tensor(as_rgb_uint8(im)) for im in images]
    if latent is None:
        return [p[0] * 2 - 1 for p in pixels]
    with torch.no_grad():
        dev = next(latent.parameters()).device
        return [latent.encode(pad_to(p.to(dev), latent.factor))[0].cpu() for p in pixels]


def train_diffusion(
    images: Sequence[np.ndarray],
    steps: int = 1500,
    seed: int = 0,
    *,
    latent: LatentAutoencoder | None = None,
    width: int = 32,
    mults: Sequence[int] = (1, 2, 2),
    crop: int = 32,
    batch_size: int = 16,
    lr: float = 2e-3,
    device: str | torch.device = "cpu",
) -> DenoisingUNet:
    """DDPM training (epsilon prediction, MSE, uniform t, Adam with cosine decay) on random crops.

    With `latent`, the model learns the latent of that autoencoder (`crop` is then in latent
    pixels, 8x fewer). Deterministic per `seed` on one device. The per-step losses are kept in
    `model.training_losses` (they fall as it learns). The returned model is in eval mode.
    """
    data = _training_data(images, latent)
    if not data:
        raise ValueError("train_diffusion needs at least one image")
    small = [tuple(d.shape[1:]) for d in data if min(d.shape[1:]) < crop]
    if small:
        raise ValueError(
            f"every panel must give at least {crop} x {crop} "
            f"{'latent ' if latent is not None else ''}pixels; got {small[:3]}"
        )
    rng = np.random.default_rng(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DenoisingUNet(data[0].shape[0], width, mults, space="latent" if latent is not None else "pixel")
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps))
    generator = torch.Generator().manual_seed(seed)
    losses = []
    timesteps = model.config["timesteps"]
    for _ in range(steps):
        x0 = random_crops(data, rng, crop, batch_size).to(device)
        t = torch.randint(0, timesteps, (batch_size,), generator=generator).to(device)
        noise = torch.randn(x0.shape, generator=generator).to(device)
        loss = F.mse_loss(model(model.add_noise(x0, t, noise), t), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    model.training_losses = losses
    return model


def save_diffusion(model: DenoisingUNet, path: str | Path) -> Path:
    """config + state_dict (plain tensors), so `load_diffusion` reads it with weights_only=True."""
    return save_model(model, path)


def load_diffusion(path: str | Path, device: str | torch.device = "cpu") -> DenoisingUNet:
    return load_model(DenoisingUNet, path, device, what="diffusion")


def _schedule(strength: float, steps: int, timesteps: int) -> list[int]:
    """Descending DDIM timesteps from strength * T down to 0: ceil(strength * steps) of them."""
    if not 0.0 < strength <= 1.0:
        raise ValueError(f"strength must be in (0, 1], got {strength!r}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    start = int(round(strength * (timesteps - 1)))
    count = max(1, math.ceil(strength * steps))
    return sorted({int(round(v)) for v in np.linspace(start, 0, count)}, reverse=True)


@torch.no_grad()
def _denoise(
    model: DenoisingUNet,
    x0: torch.Tensor,
    strength: float,
    steps: int,
    rng: np.random.Generator,
    region: torch.Tensor | None = None,
) -> torch.Tensor:
    """Noise `x0` to `strength`, then DDIM back to t = 0. With `region` (1 = regenerate), the rest is
    replaced at every step by `x0` noised to the current level."""
    ts = _schedule(strength, steps, model.config["timesteps"])
    noise = torch.from_numpy(rng.standard_normal(x0.shape).astype(np.float32)).to(x0.device)
    acp = model.alphas_cumprod
    x = model.add_noise(x0, torch.tensor([ts[0]], device=x0.device), noise)
    for i, t in enumerate(ts):
        ab = acp[t]
        ab_prev = acp[ts[i + 1]] if i + 1 < len(ts) else torch.tensor(1.0, device=x0.device)
        eps = model(x, torch.full((x.shape[0],), t, device=x0.device))
        pred_x0 = (x - (1 - ab).sqrt() * eps) / ab.sqrt()
        if model.config["space"] == "pixel":
            pred_x0 = pred_x0.clamp(-1, 1)
        x = ab_prev.sqrt() * pred_x0 + (1 - ab_prev).sqrt() * eps
        if region is not None:
            known = ab_prev.sqrt() * x0 + (1 - ab_prev).sqrt() * noise
            x = region * x + (1 - region) * known
    return x


def _to_model_space(model: DenoisingUNet, latent: LatentAutoencoder | None, image: np.ndarray) -> torch.Tensor:
    dev = next(model.parameters()).device
    x = to_tensor(as_rgb_uint8(image)).to(dev)
    if model.config["space"] == "latent":
        if latent is None:
            raise ValueError(
                "this diffusion model works in a latent space: pass the latent autoencoder it was trained with"
            )
        return latent.encode(pad_to(x, latent.factor * model.multiple))
    return pad_to(x * 2 - 1, model.multiple)


def _to_pixels(model: DenoisingUNet, latent: LatentAutoencoder | None, x: torch.Tensor, h: int, w: int) -> np.ndarray:
    pixels = latent.decode(x) if model.config["space"] == "latent" else (x + 1) / 2
    return to_uint8(pixels[..., :h, :w])


@torch.no_grad()
def sdedit(
    model: DenoisingUNet,
    image: np.ndarray,
    strength: float,
    rng: np.random.Generator,
    *,
    steps: int = 20,
    latent: LatentAutoencoder | None = None,
) -> np.ndarray:
    """The whole frame noised to `strength` (0-1 of the schedule) and denoised back in
    ceil(strength * steps) DDIM steps; same size, uint8."""
    rgb = as_rgb_uint8(image)
    x0 = _to_model_space(model, latent, rgb)
    return _to_pixels(model, latent, _denoise(model, x0, strength, steps, rng), *rgb.shape[:2])


DiffusionEdit = RegionEdit  # the same result as the autoencoder's region edit: image, exact mask, meta


@torch.no_grad()
def inpaint(
    model: DenoisingUNet,
    image: np.ndarray,
    mask: np.ndarray,
    rng: np.random.Generator,
    *,
    strength: float = 1.0,
    steps: int = 20,
    latent: LatentAutoencoder | None = None,
    feather: float = 2.0,
) -> DiffusionEdit:
    """Regenerate the region `mask` (True = regenerate); outside it the output equals `image`.

    In latent space the region is dilated to whole latent cells while denoising; the final
    composite uses the exact pixel mask with an inward feather of `feather` px.
    """
    rgb = as_rgb_uint8(image)
    h, w = rgb.shape[:2]
    region = as_bool_mask(mask, (h, w))
    if not region.any():
        raise ValueError("empty region: nothing to inpaint")
    x0 = _to_model_space(model, latent, rgb)
    per_cell = latent.factor if model.config["space"] == "latent" else 1  # pixels per model cell
    full = np.zeros((x0.shape[-2] * per_cell, x0.shape[-1] * per_cell), bool)
    full[:h, :w] = region
    cells = F.adaptive_max_pool2d(torch.from_numpy(full).float()[None, None], x0.shape[-2:]).to(x0.device)
    generated = _to_pixels(model, latent, _denoise(model, x0, strength, steps, rng, region=cells), h, w)
    out = composite(generated, rgb, inner_alpha(region, feather))
    meta = {
        "space": model.config["space"],
        "strength": strength,
        "steps": steps,
        "area_ratio": round(float(region.mean()), 6),
    }
    return DiffusionEdit(out, region, meta)
