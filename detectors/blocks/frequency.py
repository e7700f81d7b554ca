"""DCT spectra and DCT-domain residuals, written as matrix products so they export to ONNX.

`torch.fft` has no ONNX export path for the DCT, so the orthonormal DCT-II basis of the input's
own height and width is applied as two matrix products: any size works, odd ones included, and
the exported graph (fixed height and width, dynamic batch) contains only MatMul with constants.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from detectors.base import autocast_off


@functools.lru_cache(maxsize=32)
def _dct_basis(size: int) -> np.ndarray:
    n = np.arange(size, dtype=np.float64)
    basis = np.cos(np.pi / size * (n[None, :] + 0.5) * n[:, None]) * np.sqrt(2.0 / size)
    basis[0] /= np.sqrt(2.0)
    basis.setflags(write=False)
    return basis


def dct_matrix(size: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Orthonormal DCT-II matrix D (size x size): `D @ x` transforms along the first axis, `D.T` inverts.

    The basis is computed once per size in float64 with numpy (cached as an array, never as a
    tensor, so tracing exporters cannot leave a fake tensor in the cache); exporters see a
    constant, so the ONNX graph holds the exact basis instead of re-deriving it in lower precision.
    """
    return torch.tensor(_dct_basis(int(size)), device=device, dtype=dtype)


def dct2(image: torch.Tensor) -> torch.Tensor:
    """2-D DCT-II over the last two axes (orthonormal, so `idct2(dct2(x)) == x`)."""
    rows = dct_matrix(image.shape[-2], image.device, image.dtype)
    cols = dct_matrix(image.shape[-1], image.device, image.dtype)
    return rows @ image @ cols.transpose(0, 1)


def idct2(coefficients: torch.Tensor) -> torch.Tensor:
    rows = dct_matrix(coefficients.shape[-2], coefficients.device, coefficients.dtype)
    cols = dct_matrix(coefficients.shape[-1], coefficients.device, coefficients.dtype)
    return rows.transpose(0, 1) @ coefficients @ cols


def log_dct_spectrum(image: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-channel log(|DCT-II| + eps): generators' up-sampling leaves periodic peaks that the log
    scale makes as visible as the dominant low frequencies (FreDect, Frank et al. 2020)."""
    with autocast_off(image.device):  # half precision loses the small coefficients
        return torch.log(dct2(image.double()).abs() + eps).to(image.dtype)


def dct_highpass_residual(image: torch.Tensor, cutoff: float = 0.25) -> torch.Tensor:
    """The image with its lowest DCT frequencies removed, back in the pixel domain.

    Keeps content-independent high-frequency traces, spatially aligned with the pixels, so it can
    be stacked with the NPR residual as input of one convolutional network. `cutoff` is the fraction
    of each axis (from DC) that is zeroed.
    """
    height, width = image.shape[-2:]
    rows = (torch.arange(height, device=image.device) >= cutoff * height).to(image.dtype)
    cols = (torch.arange(width, device=image.device) >= cutoff * width).to(image.dtype)
    keep = 1.0 - (1.0 - rows).unsqueeze(1) * (1.0 - cols).unsqueeze(0)
    return idct2(dct2(image) * keep)


def frequency_coordinates(spectrum: torch.Tensor) -> torch.Tensor:
    """Two channels holding each coefficient's normalized vertical and horizontal frequency in [0, 1).

    Spectral artifacts sit at fixed frequencies; convolution + global pooling is blind to where a
    pattern is, so the position is handed to the network explicitly (CoordConv).
    """
    batch, _, height, width = spectrum.shape
    u = (torch.arange(height, device=spectrum.device, dtype=spectrum.dtype) / height).view(1, 1, height, 1)
    v = (torch.arange(width, device=spectrum.device, dtype=spectrum.dtype) / width).view(1, 1, 1, width)
    return torch.cat([u.expand(batch, 1, height, width), v.expand(batch, 1, height, width)], dim=1)


class SpectrumStandardizer(nn.Module):
    """Per-frequency, per-channel standardization with running statistics (FreDect standardizes
    each coefficient by its training-set mean and standard deviation).

    Statistics are kept for a `size` x `size` spectrum and updated from every training batch of that
    size; other sizes (odd test images, `mode: none`) use the statistics resampled to their size,
    since a coefficient's statistics depend on its relative frequency k/N. Both modes normalize with
    the running statistics so training and inference see the same transform.
    """

    def __init__(self, channels: int = 3, size: int = 256, momentum: float = 0.05, eps: float = 1e-5) -> None:
        super().__init__()
        self.size, self.momentum, self.eps = size, momentum, eps
        self.register_buffer("running_mean", torch.zeros(1, channels, size, size))
        self.register_buffer("running_var", torch.ones(1, channels, size, size))
        self.register_buffer("initialized", torch.tensor(False))

    def forward(self, spectrum: torch.Tensor) -> torch.Tensor:
        same_size = tuple(spectrum.shape[-2:]) == (self.size, self.size)
        if self.training and same_size:
            with torch.no_grad():
                mean = spectrum.mean(0, keepdim=True)
                var = spectrum.var(0, keepdim=True, unbiased=False) if len(spectrum) > 1 else self.running_var
                if not bool(self.initialized):
                    self.running_mean.copy_(mean)
                    self.running_var.copy_(var)
                    self.initialized.fill_(True)
                else:
                    self.running_mean.lerp_(mean, self.momentum)
                    self.running_var.lerp_(var, self.momentum)
        mean, var = self.running_mean, self.running_var
        if not same_size:
            size = tuple(spectrum.shape[-2:])
            mean = F.interpolate(mean, size=size, mode="bilinear", align_corners=False)
            var = F.interpolate(var, size=size, mode="bilinear", align_corners=False)
        return (spectrum - mean) / torch.sqrt(var + self.eps)
