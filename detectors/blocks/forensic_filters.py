"""Fixed and constrained filters that expose manipulation traces: Bayar's noise filter, Sobel gates.

Both are written so that an exported graph holds only plain operations: the Bayar constraint is
computed from the free parameters on every forward (never written back into `.data`, which breaks
torch's ONNX exporter and lets an optimizer step leave the kernel unconstrained until the next
forward), and the Sobel kernels are non-persistent buffers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LUMA_RGB = (0.2989, 0.5870, 0.1140)
SOBEL_X = ((1.0, 0.0, -1.0), (2.0, 0.0, -2.0), (1.0, 0.0, -1.0))


def luminance(image: torch.Tensor, channel_order: str = "rgb") -> torch.Tensor:
    """(N, 3, H, W) -> (N, 1, H, W) ITU-R 601 luma, for images stored RGB or BGR.

    Written as three products summed red, green, blue (not a channel reduction): the noise filter
    after it subtracts nearly equal numbers, so float rounding must match the reference exactly.
    """
    red, green, blue = (0, 1, 2) if channel_order == "rgb" else (2, 1, 0)
    return (
        LUMA_RGB[0] * image[:, red : red + 1]
        + LUMA_RGB[1] * image[:, green : green + 1]
        + LUMA_RGB[2] * image[:, blue : blue + 1]
    )


class BayarConv2d(nn.Module):
    """Constrained convolution (Bayar and Stamm, 2018): centre tap -1, the other taps sum to 1.

    Such a kernel predicts each pixel from its neighbours and subtracts it, so it suppresses image
    content and keeps the local noise residual where splicing and resampling leave traces. Only the
    k*k - 1 off-centre taps are parameters (`kernel`, shape out x in x (k*k - 1)); the constrained
    kernel is `constrained_weight()`, recomputed on every call, so the constraint holds after any
    optimizer step by construction.
    """

    def __init__(self, in_channels: int = 1, out_channels: int = 3, kernel_size: int = 5) -> None:
        super().__init__()
        if kernel_size % 2 == 0:
            raise ValueError(f"BayarConv2d needs an odd kernel_size, got {kernel_size}")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        # Positive uniform start (as the original) keeps the normalizing sums away from zero.
        self.kernel = nn.Parameter(torch.rand(out_channels, in_channels, kernel_size * kernel_size - 1))

    def constrained_weight(self) -> torch.Tensor:
        """The (out, in, k, k) convolution weight: normalized off-centre taps around a fixed -1."""
        taps = self.kernel / self.kernel.sum(-1, keepdim=True)
        centre = (self.kernel_size * self.kernel_size) // 2
        minus_one = -torch.ones_like(taps[..., :1])
        weight = torch.cat([taps[..., :centre], minus_one, taps[..., centre:]], dim=-1)
        return weight.view(self.out_channels, self.in_channels, self.kernel_size, self.kernel_size)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return F.conv2d(image, self.constrained_weight(), padding=self.kernel_size // 2)


class SobelGate(nn.Module):
    """Weigh a feature map by its own edge strength: x * sigmoid(|Sobel(x)|).

    The Sobel responses of all channels are summed into one horizontal and one vertical gradient
    map (Sobel is linear, so the channel sum is taken first: one 3x3 convolution instead of C),
    each is batch-normalized, and the gradient magnitude gates every channel. MVSS-Net's edge
    branch uses this to make its edge-residual blocks look at boundaries.
    """

    def __init__(self, eps: float = 1e-12) -> None:
        super().__init__()
        sobel_x = torch.tensor(SOBEL_X)
        self.register_buffer("kernels", torch.stack([sobel_x, sobel_x.t()]).unsqueeze(1), persistent=False)
        self.bn_x = nn.BatchNorm2d(1)
        self.bn_y = nn.BatchNorm2d(1)
        self.eps = eps  # keeps the square root's gradient finite on perfectly flat maps

    def magnitude(self, features: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) -> (N, 1, H, W) normalized gradient magnitude (before the sigmoid)."""
        gradients = F.conv2d(features.sum(1, keepdim=True), self.kernels.to(features.dtype), padding=1)
        # the magnitude in float32: under 16-mixed, float16 rounds eps to 0 (an infinite square-root
        # gradient on a flat map, NaN weights after one step) and its squares overflow
        grad_x, grad_y = self.bn_x(gradients[:, :1]).float(), self.bn_y(gradients[:, 1:]).float()
        return torch.sqrt(grad_x * grad_x + grad_y * grad_y + self.eps).to(features.dtype)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.magnitude(features)) * features
