"""A small trainable "AI generator": a convolutional autoencoder with interchangeable decoders.

No diffusion model can be downloaded here, yet AI-generated-image detectors need generated images,
ideally from several generators so that cross-generator evaluation is possible. A convolutional
autoencoder trained for minutes on the authentic images re-renders them closely (high PSNR), while
its decoder leaves the up-sampling fingerprints real generators leave (checkerboard from transposed
convolutions, blockiness from nearest, smoothness from bilinear, periodic patterns from pixel
shuffle). Each decoder variant acts as a distinct generator (the manifest's `group`).

Two uses, as in THEMIS A.3.4: `rerender_image` (image inference forgery: the whole frame is
re-generated) and `edit_region` (targeted region editing: one region is replaced by generated content
and blended in; its mask is known exactly).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import cv2
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from synthesis.common import as_bool_mask, as_rgb_uint8, composite, inner_alpha, random_ellipse
from synthesis.model_files import load_model, save_model

__all__ = [
    "VARIANTS",
    "AutoencoderGenerator",
    "RegionEdit",
    "train_generator",
    "save_generator",
    "load_generator",
    "rerender_image",
    "edit_region",
    "psnr",
]

VARIANTS = ("transposed", "nearest_conv", "bilinear_conv", "pixel_shuffle")


def _up(variant: str, cin: int, cout: int) -> nn.Module:
    if variant == "transposed":
        return nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1)
    if variant == "nearest_conv":
        return nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(cin, cout, 3, padding=1))
    if variant == "bilinear_conv":
        return nn.Sequential(
            nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False), nn.Conv2d(cin, cout, 3, padding=1)
        )
    if variant == "pixel_shuffle":
        return nn.Sequential(nn.Conv2d(cin, cout * 4, 3, padding=1), nn.PixelShuffle(2))
    raise ValueError(f"unknown decoder variant {variant!r}; expected one of {VARIANTS}")


class AutoencoderGenerator(nn.Module):
    """Encoder down to 1 / 2**depth (depth 2: 1/4, depth 3: 1/8), decoder back up with `variant`.

    `forward` takes RGB in [0, 1], N x 3 x H x W of any size (reflect-padded to a multiple of
    2**depth and cropped back) and returns the reconstruction in [0, 1].
    """

    def __init__(self, variant: str = "transposed", width: int = 32, depth: int = 2) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"unknown decoder variant {variant!r}; expected one of {VARIANTS}")
        if depth not in (2, 3):
            raise ValueError(f"depth must be 2 (1/4) or 3 (1/8), got {depth}")
        self.config = {"variant": variant, "width": int(width), "depth": int(depth)}
        chans = [width * 2**i for i in range(depth + 1)]
        enc: list[nn.Module] = [nn.Conv2d(3, chans[0], 3, padding=1), nn.GELU()]
        for cin, cout in zip(chans[:-1], chans[1:]):
            enc += [
                nn.Conv2d(cin, cout, 3, stride=2, padding=1),
                nn.GELU(),
                nn.Conv2d(cout, cout, 3, padding=1),
                nn.GELU(),
            ]
        self.encoder = nn.Sequential(*enc)
        dec: list[nn.Module] = []
        for cin, cout in zip(chans[::-1][:-1], chans[::-1][1:]):
            dec += [_up(variant, cin, cout), nn.GELU(), nn.Conv2d(cout, cout, 3, padding=1), nn.GELU()]
        dec += [nn.Conv2d(chans[0], 3, 3, padding=1)]
        self.decoder = nn.Sequential(*dec)

    @property
    def factor(self) -> int:
        return 2 ** self.config["depth"]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Latent: features at 1 / factor plus the colour thumbnail (last 3 channels)."""
        thumb = F.avg_pool2d(x, self.factor)
        return torch.cat([self.encoder(x * 2 - 1), thumb], dim=1)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Detail synthesized by the decoder on top of the smoothly upsampled thumbnail.

        Predicting detail over the thumbnail makes training converge in minutes on CPU; every
        output pixel still passes through the decoder, whose up-sampling leaves the fingerprint.
        """
        feats, thumb = z[:, :-3], z[:, -3:]
        base = F.interpolate(thumb, scale_factor=self.factor, mode="bilinear", align_corners=False)
        return (base + torch.tanh(self.decoder(feats))).clamp(0.0, 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        ph, pw = (-h) % self.factor, (-w) % self.factor
        if ph or pw:
            x = F.pad(x, (0, pw, 0, ph), mode="reflect")
        return self.decode(self.encode(x))[..., :h, :w]


def _to_tensor(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div(255.0)[None]


def _to_uint8(t: torch.Tensor) -> np.ndarray:
    return t[0].permute(1, 2, 0).clamp(0, 1).mul(255.0).round().byte().cpu().numpy()


def train_generator(
    images: Sequence[np.ndarray],
    variant: str = "transposed",
    steps: int = 500,
    seed: int = 0,
    *,
    width: int = 32,
    depth: int = 2,
    crop: int = 64,
    batch_size: int = 8,
    lr: float = 3e-3,
    device: str | torch.device = "cpu",
) -> AutoencoderGenerator:
    """Train an autoencoder on random crops of authentic `images` (L1 loss, Adam, cosine decay).

    Deterministic per `seed` on one device: the initial weights and the crops come from it. Measured
    on CPU (1 thread): 150 steps of 8 x 32 px crops at width 16 take ~10 s and reach 23 dB on a
    training photo (28.5 dB on a held-out one), 2-3 dB above the colour thumbnail alone; dataset
    generation should train for thousands of steps. lr above ~5e-3 can collapse the decoder to
    zero detail. The returned model is in eval mode.
    """
    rgb = [as_rgb_uint8(im) for im in images]
    if not rgb:
        raise ValueError("train_generator needs at least one image")
    small = [im.shape[:2] for im in rgb if min(im.shape[:2]) < crop]
    if small:
        raise ValueError(f"images must be at least {crop} px on each side; got {small[:3]}")
    rng = np.random.default_rng(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoencoderGenerator(variant, width, depth)
    model.to(device).train()
    tensors = [_to_tensor(im)[0] for im in rgb]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps))
    for _ in range(steps):
        batch = []
        for _ in range(batch_size):
            t = tensors[int(rng.integers(len(tensors)))]
            y = int(rng.integers(0, t.shape[1] - crop + 1))
            x = int(rng.integers(0, t.shape[2] - crop + 1))
            patch = t[:, y : y + crop, x : x + crop]
            if rng.random() < 0.5:
                patch = patch.flip(-1)
            batch.append(patch)
        x = torch.stack(batch).to(device)
        loss = F.l1_loss(model(x), x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return model.eval()


def save_generator(model: AutoencoderGenerator, path: str | Path) -> Path:
    """config + state_dict (plain tensors), so `load_generator` reads it with weights_only=True."""
    return save_model(model, path)


def load_generator(path: str | Path, device: str | torch.device = "cpu") -> AutoencoderGenerator:
    return load_model(AutoencoderGenerator, path, device, what="generator")


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def rerender_image(model: AutoencoderGenerator, image: np.ndarray) -> np.ndarray:
    """Image inference forgery: the whole frame re-generated by the model (same size, uint8)."""
    x = _to_tensor(as_rgb_uint8(image)).to(_device(model))
    return _to_uint8(model(x))


@dataclass
class RegionEdit:
    image: np.ndarray  # uint8 H x W x 3
    mask: np.ndarray  # bool: the regenerated region; every changed pixel is inside
    meta: dict[str, Any] = field(default_factory=dict)


@torch.no_grad()
def edit_region(
    model: AutoencoderGenerator,
    image: np.ndarray,
    rng: np.random.Generator,
    *,
    mask: np.ndarray | None = None,
    fraction: tuple[float, float] = (0.03, 0.12),
    latent_noise: float = 0.5,
    feather: float = 3.0,
) -> RegionEdit:
    """Targeted region editing: replace a region with generated content and blend it in.

    The region (`mask`, or a random ellipse of `fraction` of the frame) is first emptied with OpenCV
    inpainting so its old content is gone, then the frame is encoded, the latent inside the region is
    perturbed with Gaussian noise (`latent_noise` x its std) so the model invents texture, decoded,
    and the decoded region is blended in with an inward feather. Outside the mask nothing changes.
    """
    rgb = as_rgb_uint8(image)
    h, w = rgb.shape[:2]
    region = (
        as_bool_mask(mask, (h, w)) if mask is not None else random_ellipse((h, w), rng, float(rng.uniform(*fraction)))
    )
    if not region.any():
        raise ValueError("empty region: nothing to edit")
    filled = cv2.inpaint(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), region.astype(np.uint8) * 255, 5, cv2.INPAINT_TELEA)
    filled = cv2.cvtColor(filled, cv2.COLOR_BGR2RGB)
    dev = _device(model)
    x = _to_tensor(filled).to(dev)
    f = model.factor
    ph, pw = (-h) % f, (-w) % f
    if ph or pw:
        x = F.pad(x, (0, pw, 0, ph), mode="reflect")
    z = model.encode(x)
    zmask = F.interpolate(
        torch.from_numpy(np.pad(region, ((0, ph), (0, pw)))).float()[None, None], size=z.shape[-2:], mode="area"
    ).to(dev)
    noise = torch.from_numpy(rng.standard_normal(z.shape).astype(np.float32)).to(dev)
    z = z + latent_noise * z.std() * noise * zmask
    generated = _to_uint8(model.decode(z)[..., :h, :w])
    out = composite(generated, rgb, inner_alpha(region, feather))
    meta = {
        "operation": "ai_region_edit",
        "generator": model.config["variant"],
        "area_ratio": round(float(region.mean()), 6),
        "latent_noise": latent_noise,
    }
    return RegionEdit(out, region, meta)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 images in dB (inf when identical)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0**2 / mse)
