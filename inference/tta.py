"""Test-time adaptation of prompt context tokens, one image at a time (IAPL's evaluation).

For each image: 32 views (the centre crop and 31 random crops with random flips of the image
brought to `load_size`), two AdamW steps (lr 0.005) on the detector's `tta_parameters()` that
minimise the binary entropy of the mean probability of the most confident 20 % of views, then the
score of the most confident of those views after adaptation. The tuned tensors, the optimizer and
the random generator of the views (seeded from `seed` alone) start afresh for every image, so every
image draws the same crops and flips wherever it sits (first, after others, in any batch or process)
and images never influence each other's scores.

Differences from the authors' script, on purpose: the network stays in eval mode while adapting,
so BatchNorm layers neither use batch statistics nor update their running statistics (the
authors' script adapts in training mode, which changes those statistics image after image, so a
score depended on every image scored before it), and dropout is off. Gradients are taken for the
tuned tensors only. ONNX graphs cannot take gradient steps, so adaptation needs the `.ckpt`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class TTASettings:
    views: int = 32
    steps: int = 2
    lr: float = 0.005
    weight_decay: float = 0.01  # AdamW's default, which the authors keep
    select: float = 0.2
    load_size: int = 256  # views are crops of the image resized to this size (authors: 256)
    interpolation: str = "bilinear"  # that resize: torchvision's Resize default, which the authors use
    seed: int = 0


def make_views(image: torch.Tensor, size: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """(count, 3, size, size): the centre crop first, then random crops, each flipped with p 0.5."""
    height, width = image.shape[-2:]
    top, left = (height - size) // 2, (width - size) // 2
    views = [image[:, top : top + size, left : left + size]]
    for _ in range(count - 1):
        top = int(torch.randint(0, height - size + 1, (1,), generator=generator))
        left = int(torch.randint(0, width - size + 1, (1,), generator=generator))
        view = image[:, top : top + size, left : left + size]
        if torch.rand(1, generator=generator).item() < 0.5:
            view = view.flip(-1)
        views.append(view)
    return torch.stack(views)


def binary_entropy(probability: torch.Tensor) -> torch.Tensor:
    return -(probability * torch.log(probability + 1e-8) + (1 - probability) * torch.log(1 - probability + 1e-8))


class ContextAdapter:
    """Scores images with per-image adaptation of `net.tta_parameters()`."""

    def __init__(self, net: nn.Module, size: int, settings: TTASettings = TTASettings()) -> None:
        if not hasattr(net, "tta_parameters"):
            raise ValueError(
                f"{type(net).__name__} has no test-time adaptation (only prompt-based detectors such as iapl have)"
            )
        if settings.load_size < size:
            raise ValueError(f"tta load_size {settings.load_size} must be at least the crop size {size}")
        self.net, self.size, self.settings = net, size, settings
        self.selected = max(1, int(settings.views * settings.select))

    def score(self, image: torch.Tensor) -> float:
        """Probability that one image (3 x load_size x load_size, in [0, 1]) is fake, after adapting."""
        with torch.inference_mode(False):  # callers may score under inference mode; adapting needs autograd
            return self._adapt_and_score(image.clone())

    def _adapt_and_score(self, image: torch.Tensor) -> float:
        tuned = self.net.tta_parameters()
        saved = [p.detach().clone() for p in tuned]
        generator = torch.Generator().manual_seed(self.settings.seed)  # per image: the same draws wherever it sits
        views = make_views(image.cpu(), self.size, self.settings.views, generator).to(image.device)
        optimizer = torch.optim.AdamW(tuned, lr=self.settings.lr, weight_decay=self.settings.weight_decay)
        was_training = self.net.training
        self.net.eval()
        try:
            with torch.enable_grad():
                for _ in range(self.settings.steps):
                    logits = self.net(views)["logit"].float()
                    with torch.no_grad():
                        chosen = torch.topk((torch.sigmoid(logits) - 0.5).abs(), self.selected).indices
                    loss = binary_entropy(torch.sigmoid(logits[chosen]).mean())
                    gradients = torch.autograd.grad(loss, tuned)
                    for parameter, gradient in zip(tuned, gradients):
                        parameter.grad = gradient
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                probabilities = torch.sigmoid(self.net(views[chosen])["logit"].float())
                return float(probabilities[(probabilities - 0.5).abs().argmax()])
        finally:
            with torch.no_grad():
                for parameter, value in zip(tuned, saved):
                    parameter.copy_(value)
                    parameter.grad = None
            self.net.train(was_training)
