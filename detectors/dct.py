"""DCT (FreDect-style): a small CNN on the standardized per-channel log-DCT spectrum.

Frank et al. (ICML 2020) showed that generator up-sampling leaves grid-like peaks in the DCT
spectrum that a simple classifier separates. Reference facts (from the authors' public code): per-channel
2-D DCT-II, log(|.| + eps), standardized -> CNN. The spectrum is computed as matrix products inside
the network (`blocks/frequency.py`), so the exported ONNX graph needs nothing outside it; frequency
coordinates are appended so global pooling still knows where a peak sits. Trained from scratch.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn

from datamodules.preprocess import Preprocess
from detectors.base import Detector
from detectors.blocks.frequency import SpectrumStandardizer, frequency_coordinates, log_dct_spectrum
from detectors.blocks.resnet import BLOCKS, truncated_resnet


class DCT(Detector):
    """Binary AI-generated-image classifier on log-DCT spectra."""

    def __init__(
        self,
        width: int = 32,
        layers: Sequence[int] = (2, 2),
        block: str = "basic",
        coordinates: bool = True,
        eps: float = 1e-6,
        preprocess: Preprocess | Mapping[str, Any] | None = None,
    ) -> None:
        # Never resize by default: resampling smears exactly the spectral peaks this model reads.
        super().__init__(preprocess or {"size": 256, "mode": "center_crop"})
        if block not in BLOCKS:
            raise ValueError(f"dct block must be one of {sorted(BLOCKS)}, got {block!r}")
        self.eps, self.coordinates = eps, coordinates
        self.standardize = SpectrumStandardizer(3, int(self.preprocess.size or 256))
        self.features, channels = truncated_resnet(3 + 2 * coordinates, width, layers, block)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, 1)

    def spectrum(self, image: torch.Tensor) -> torch.Tensor:
        """The standardized log-DCT spectrum (N x 3 x H x W) the CNN sees."""
        return self.standardize(log_dct_spectrum(self.normalize(image), self.eps))

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        spectrum = self.spectrum(image)
        if self.coordinates:
            spectrum = torch.cat([spectrum, frequency_coordinates(spectrum)], dim=1)
        return {"logit": self.head(self.pool(self.features(spectrum)).flatten(1)).squeeze(1)}
