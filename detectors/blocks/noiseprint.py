"""A learned camera/processing noise fingerprint (Noiseprint, Cozzolino and Verdoliva, TIFS 2019;
Noiseprint++ in TruFor, Guillaro et al., CVPR 2023).

A plain DnCNN: no pooling and no stride, so the output keeps the input's size and every output
pixel sees a `(2 * depth + 1)`-pixel square of the input. It is trained (phase 1 of `trufor`) so
that patches which went through the same capture and processing chain give similar residuals;
a region pasted from another chain then stands out in the fingerprint.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from detectors.base import autocast_off


class NoiseFingerprint(nn.Module):
    """DnCNN: `depth` 3x3 convolutions of `width` channels, BatchNorm on all but the first and the
    last, ReLU after all but the last, `out_channels` outputs. Input RGB in [0, 1] (no
    normalization: the published extractor was trained on that range).

    The layers are one `nn.Sequential` in the order conv[, bn][, relu] so that the published
    Noiseprint++ weights map onto it index by index.
    """

    def __init__(
        self, depth: int = 17, width: int = 64, in_channels: int = 3, out_channels: int = 1, bn_momentum: float = 0.1
    ) -> None:
        super().__init__()
        if depth < 2:
            raise ValueError(f"the fingerprint extractor needs depth >= 2, got {depth}")
        layers: list[nn.Module] = []
        for index in range(depth):
            first, last = index == 0, index == depth - 1
            normalized = not first and not last
            conv = nn.Conv2d(
                in_channels if first else width, out_channels if last else width, 3, padding=1, bias=not normalized
            )
            # DnCNN's initialization: He-normal over the output fan.
            nn.init.normal_(conv.weight, 0.0, math.sqrt(2.0 / (9 * conv.out_channels)))
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
            layers.append(conv)
            if normalized:
                layers.append(nn.BatchNorm2d(width, momentum=bn_momentum))
            if not last:
                layers.append(nn.ReLU(inplace=True))
        self.layers = nn.Sequential(*layers)
        self.depth = depth
        self.out_channels = out_channels

    @property
    def receptive_field(self) -> int:
        """Side of the input square that one output pixel depends on (3x3 convolutions, stride 1)."""
        return 2 * self.depth + 1

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.layers(image)


def tile_spectra(
    fingerprint: torch.Tensor, patch: int = 32, margin: int = 0, stride: int | None = None
) -> torch.Tensor:
    """Each `patch` x `patch` tile of the fingerprint (every `stride` pixels; default: tiles side by
    side) as the shape of its power spectrum: (N, tiles per image, C * (w * (w // 2 + 1) - 1)) with
    `w = patch // 2`.

    Noiseprint compares raw residual pixels, which suits a sensor pattern aligned with one camera's
    pixel grid. Our chains are applied to crops at random offsets, so their traces sit at no fixed
    pixel: what they share is spectral (JPEG's 8 x 8 grid puts peaks at multiples of 1/8,
    resampling at its period, blur and denoising remove high frequencies), and the power spectrum
    does not move with the offset. Per tile, Welch's estimate: the periodograms of its half-size
    windows at half-window steps (3 x 3 of them; mean removed, Hann window) are averaged, since one
    periodogram's bins scatter like an exponential variable, which in the log is noise of about
    1.3 nats per bin whatever the residual holds; then log power without the DC term, centred (the
    overall residual level, which follows the scene's texture, drops out) and L2-normalized, so
    tiles compare by cosine similarity. `margin` pixels are dropped on every side first: there the
    convolutions saw zero padding, which no processing chain explains.
    """
    if margin > 0:
        fingerprint = fingerprint[..., margin:-margin, margin:-margin]
    n, channels, height, width = fingerprint.shape
    if min(height, width) < patch:
        raise ValueError(f"fingerprint {height}x{width} (after a {margin}px margin) is smaller than one {patch}px tile")
    if patch < 4:
        raise ValueError(f"tiles of {patch}px are too small for a spectrum; use at least 4")
    tiles = F.unfold(fingerprint.float(), patch, stride=stride or patch)
    count = tiles.shape[-1]
    window = patch // 2
    segments = F.unfold(tiles.transpose(1, 2).reshape(-1, 1, patch, patch), window, stride=window // 2)
    segments = segments.transpose(1, 2).reshape(n, count, channels, -1, window, window)
    segments = segments - segments.mean(dim=(-2, -1), keepdim=True)
    hann = torch.hann_window(window, periodic=True, device=segments.device)
    power = torch.fft.rfft2(segments * (hann[:, None] * hann[None, :])).abs().pow(2).mean(dim=3).flatten(-2)[..., 1:]
    # A floor relative to the tile's mean power keeps the log (and its gradient) finite.
    log_power = torch.log(power + 1e-3 * power.mean(dim=-1, keepdim=True) + 1e-12).flatten(2)
    return F.normalize(log_power - log_power.mean(dim=-1, keepdim=True), dim=-1)


def patch_contrastive_loss(
    fingerprint: torch.Tensor,
    chain: torch.Tensor,
    photo: torch.Tensor | None = None,
    patch: int = 32,
    temperature: float = 0.1,
    margin: int = 0,
) -> torch.Tensor:
    """Noiseprint's patch-level objective over processing chains, as supervised contrastive
    learning (Khosla et al. 2020) over tiles.

    The fingerprint (N x C x H x W) is cut into `patch` x `patch` tiles described by
    `tile_spectra`; each tile is a point labelled by its image's chain. For every tile the loss is
    the mean over its positives p of `-log(exp(s_p / T) / sum_j exp(s_j / T))`, s the cosine
    similarity. Positives are tiles of the same chain from *other photos* (`photo`: the source
    photo of each image; by default every image its own), so a shared scene can never make two
    tiles similar for the right reason; tiles of the same photo under another chain stay in the
    denominator as the hardest negatives (same content, different processing). Tiles of one image,
    and same-chain tiles of one photo, are left out. Noiseprint (Cozzolino and Verdoliva 2019)
    trained the same way on same/different camera-and-processing pairs. A batch where no tile has
    a positive gives a zero loss.
    """
    n = fingerprint.shape[0]
    embeddings = tile_spectra(fingerprint, patch, margin)
    per_image = embeddings.shape[1]
    tiles = embeddings.reshape(n * per_image, -1)
    labels = chain.reshape(n).repeat_interleave(per_image)
    photos = (photo.reshape(n) if photo is not None else torch.arange(n, device=chain.device)).repeat_interleave(
        per_image
    )
    image = torch.arange(n, device=chain.device).repeat_interleave(per_image)
    same_chain = labels[:, None] == labels[None, :]
    same_photo = photos[:, None] == photos[None, :]
    excluded = (image[:, None] == image[None, :]) | (same_chain & same_photo)
    positive = same_chain & ~same_photo
    has_positive = positive.any(dim=1)
    if not has_positive.any():
        # No two photos through one chain (a batch of crops of one photo, a last short batch):
        # nothing to learn from, which must not stop a training run.
        return embeddings.sum() * 0.0
    logits = (tiles @ tiles.T / temperature).masked_fill(excluded, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    mean_positive = log_prob.masked_fill(~positive, 0.0).sum(dim=1) / positive.sum(dim=1).clamp(min=1)
    return -mean_positive[has_positive].mean()


def chain_separation_auroc(
    fingerprint: torch.Tensor, chain: torch.Tensor, photo: torch.Tensor | None = None, patch: int = 32, margin: int = 0
) -> float:
    """How well fingerprint similarity tells same-chain from different-chain tile pairs: the AUROC
    of the cosine similarity of `tile_spectra` over pairs of tiles from *different photos*,
    positives being pairs whose images went through the same chain. Pairs within one photo are
    left out: across chains they share the scene, which would count content as a fingerprint
    and push the figure below chance for any extractor that keeps some of the scene. 0.5 is
    chance, 1.0 perfect."""
    from sklearn.metrics import roc_auc_score

    n = fingerprint.shape[0]
    with autocast_off(fingerprint.device):  # a trainer's bf16 / fp16: the figure from float32 similarities
        embeddings = tile_spectra(fingerprint.float(), patch, margin)
        per_image = embeddings.shape[1]
        tiles = embeddings.reshape(n * per_image, -1)
        similarity = (tiles @ tiles.T).cpu()
    labels = chain.reshape(-1).cpu().repeat_interleave(per_image)
    photos = (photo.reshape(-1).cpu() if photo is not None else torch.arange(n)).repeat_interleave(per_image)
    pairs = torch.triu(photos[:, None] != photos[None, :], diagonal=1)
    same = (labels[:, None] == labels[None, :])[pairs]
    if same.all() or not same.any():
        return float("nan")
    return float(roc_auc_score(same.numpy(), similarity[pairs].numpy()))


def splice_anomaly_map(fingerprint: torch.Tensor, patch: int = 32, stride: int = 8, margin: int = 0) -> torch.Tensor:
    """Where the fingerprint departs from the rest of its image: for each window (`patch`, every
    `stride` px) one minus the cosine similarity of its `tile_spectra` to the image's median
    window, averaged over the windows covering each pixel: (N, H, W), NaN where no window reaches
    (the margin). A region from another chain scores high as long as it is the smaller part."""
    n, _, height, width = fingerprint.shape
    inner = (height - 2 * margin, width - 2 * margin)
    embeddings = tile_spectra(fingerprint, patch, margin, stride)
    centre = F.normalize(embeddings.median(dim=1, keepdim=True).values, dim=-1)
    distance = 1 - (embeddings * centre).sum(dim=-1)
    spread = F.fold(distance[:, None, :].expand(n, patch * patch, -1), inner, patch, stride=stride)
    cover = F.fold(torch.ones_like(distance)[:, None, :].expand(n, patch * patch, -1), inner, patch, stride=stride)
    anomaly = torch.full((n, height, width), float("nan"), device=fingerprint.device)
    anomaly[:, margin : height - margin, margin : width - margin] = torch.where(
        cover[:, 0] > 0, spread[:, 0] / cover[:, 0], torch.nan
    )
    return anomaly
