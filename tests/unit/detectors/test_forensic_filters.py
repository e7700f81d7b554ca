"""The forensic filters: Bayar's constrained convolution, the Sobel gate, luma for RGB and BGR."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from detectors.blocks.forensic_filters import BayarConv2d, SobelGate, luminance


def test_bayar_constraint_holds_after_optimizer_steps():
    layer = BayarConv2d(1, 3, 5)
    before = layer.kernel.detach().clone()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    for _ in range(5):
        optimizer.zero_grad()
        layer(torch.randn(2, 1, 16, 16)).pow(2).mean().backward()
        optimizer.step()
    assert not torch.allclose(layer.kernel, before)
    weight = layer.constrained_weight().detach()
    assert weight.shape == (3, 1, 5, 5)
    assert torch.equal(weight[:, :, 2, 2], torch.full((3, 1), -1.0))
    off_centre = weight.flatten(2).sum(-1) - weight[:, :, 2, 2]
    assert torch.allclose(off_centre, torch.ones(3, 1), atol=1e-5)
    # A kernel summing to zero cancels flat regions: only the noise residual remains.
    flat = layer(torch.full((1, 1, 12, 12), 0.7))
    assert flat[..., 2:-2, 2:-2].abs().max() < 1e-5


def test_sobel_gate_opens_on_the_border_of_a_hand_made_square_and_stays_half_open_elsewhere():
    gate = SobelGate().eval()  # fresh batch norm in eval mode: identity up to its eps
    features = torch.zeros(1, 2, 24, 24)
    features[:, :, 8:16, 8:16] = 1.0
    magnitude = gate.magnitude(features)[0, 0]
    border = torch.zeros(24, 24, dtype=torch.bool)
    border[7:17, 7:17] = True
    border[9:15, 9:15] = False
    assert magnitude[border].min() > 1.0
    assert magnitude[~border].max() < 1e-3
    gated = gate(features)
    # Flat interior: sigmoid(0) = 0.5; the square's own border pixels pass more than that.
    assert torch.allclose(gated[0, :, 10:14, 10:14], torch.full((2, 4, 4), 0.5), atol=1e-3)
    assert (gated[0, :, 8, 8:16] > 0.9).all() and (gated[0, :, 8:16, 15] > 0.9).all()


def test_sobel_gate_on_a_flat_map_under_float16_mixed_precision_passes_finite_values_and_gradients():
    """MVSS-Net under `16-mixed` (CPU autocast stands in for a GPU's): a flat map has no edge, and
    its gate must neither open nor turn the training step's gradients into NaN."""
    gate = SobelGate().train()
    flat = torch.full((2, 4, 16, 16), 0.3, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.float16):
        features = F.conv2d(flat, torch.full((4, 4, 1, 1), 0.25))  # a half-precision map, as a network's
        magnitude = gate.magnitude(features)
        gated = gate(features)
    gated.float().sum().backward()
    assert features.dtype == gated.dtype == torch.float16
    assert (magnitude > 0).all() and torch.isfinite(magnitude).all()
    interior = gated[..., 2:-2, 2:-2].float()  # the zero padding makes edges along the border
    assert torch.allclose(interior, torch.full_like(interior, 0.15), atol=1e-3)  # half open: 0.3 x sigmoid(0)
    assert torch.isfinite(flat.grad).all() and torch.isfinite(gate.bn_x.weight.grad).all()


def test_sobel_gate_tells_vertical_from_horizontal_edges():
    gate = SobelGate().eval()
    vertical = torch.zeros(1, 1, 16, 16)
    vertical[..., 8:] = 1.0
    gradients = F.conv2d(vertical, gate.kernels, padding=1)[0]
    interior = (slice(2, -2), slice(2, -2))
    assert gradients[0][interior].abs().max() == 4.0
    assert gradients[1][interior].abs().max() == 0.0


def test_luminance_is_the_same_for_rgb_and_bgr_storage():
    image = torch.rand(2, 3, 5, 5)
    assert torch.allclose(luminance(image, "rgb"), luminance(image.flip(1), "bgr"))
    grey = torch.full((1, 3, 2, 2), 0.5)
    assert torch.allclose(luminance(grey), torch.full((1, 1, 2, 2), 0.5), atol=1e-3)
