"""Dataset over records: decoding through `datamodules.io`, bad files reported, never fatal."""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import Any, Iterator, Sequence

import torch
from torch.utils.data import Dataset, RandomSampler, Sampler, default_collate

from datamodules.io import DEFAULT_MAX_PIXELS, ImageReadError, read_image
from datamodules.records import Record
from datamodules.transforms import to_tensor

log = logging.getLogger(__name__)
UNLABELLED = -1


class ImageDataset(Dataset):
    """`records[i]` -> {"image", "label", "index", "path"} (masks: `LocalizationDataset`).

    `keep_size` adds the original (H, W) as "size", so outputs can be mapped back onto the file.
    A file that cannot be read yields {"index", "path", "error"} instead of raising, so one bad
    upload never stops an epoch or an inference run; `collate` sets such samples aside.
    """

    def __init__(
        self,
        records: Sequence[Record],
        transform: Any = None,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        keep_size: bool = False,
    ) -> None:
        self.records = list(records)
        self.keep_size = keep_size
        self.transform = transform
        self.max_pixels = max_pixels

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        try:
            image = read_image(record.path, self.max_pixels)
        except ImageReadError as error:
            return {"index": index, "path": record.path, "error": error.reason}
        size = image.shape[:2]
        if self.transform is not None:
            image = self.transform(image=image)["image"]
        sample = {
            "image": to_tensor(image),
            "index": index,
            "path": record.path,
            "label": UNLABELLED if record.label is None else int(record.label),
        }
        if self.keep_size:
            sample["size"] = torch.tensor(size)
        return sample


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack readable samples; list unreadable ones under "errors" as (path, reason)."""
    good = [s for s in samples if "error" not in s]
    errors = [(s["path"], s["error"]) for s in samples if "error" in s]
    for path, reason in errors:
        log.warning("skipping unreadable image %s: %s", path, reason)
    batch: dict[str, Any] = default_collate(good) if good else {}
    batch["errors"] = errors
    return batch


GENUINE_NOISE_MODELS = ("gaussian", "shot")


def check_rate(name: str, value: float | None) -> float:
    """A share of the training draws (pseudo-fakes, genuine noise), refused outside [0, 1] before
    any data is read."""
    value = float(value or 0.0)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"the {name} must lie in [0, 1], got {value}")
    return value


def check_batch_size(name: str, value: int | None) -> int | None:
    """A batch size of at least one (None: the other batch size), refused before any data is read
    (the loader refuses it only when training starts)."""
    if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
        raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
    return value


def check_genuine_noise_model(name: str) -> str:
    """`data.genuine_noise_model`, refused when mistyped (before any data is read)."""
    if name not in GENUINE_NOISE_MODELS:
        raise ValueError(f"genuine_noise_model must be one of {', '.join(GENUINE_NOISE_MODELS)}, got {name!r}")
    return name


class WrappedDataset(Dataset):
    """A training-draw lever around a dataset: its length, and its `records`, `transform`, ... as
    the wrapped dataset's (balanced sampling reads them through any number of wrappers)."""

    dataset: Dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)


class NoiseReinjectedFakes(WrappedDataset):
    """Training draws of genuine images turned, at `rate`, into fakes by re-injecting Gaussian noise
    (and, with `genuine_noise`, others given noise and kept genuine).

    Generators leave a noise level unlike a camera's: decoders and latent models too little, a
    diffusion sampler stopped early too much. Trained only on the smooth kind, a detector learns
    "smooth = generated" and calls a noisier-than-photo image genuine. These pseudo-fakes (a
    genuine image with noise of std drawn from `noise_std`, a fraction of the full range, per
    image) teach that a departure in either direction is a trace. Wraps any dataset of samples with
    "image" and "label" (and "group" when present, set to `group`).
    """

    def __init__(
        self,
        dataset: Dataset,
        rate: float,
        noise_std: Sequence[float] = (0.02, 0.1),
        group: str = "pseudo_noise",
        skip_categories: Sequence[str] = (),
        genuine_noise: float = 0.0,
        genuine_noise_std: Sequence[float] | None = None,
        genuine_noise_categories: Sequence[str] = (),
        genuine_noise_model: str = "gaussian",
    ) -> None:
        self.dataset, self.rate, self.group = dataset, check_rate("pseudo-fake rate", rate), group
        self.noise_std = (float(noise_std[0]), float(noise_std[1]))
        # grainy kinds (micrographs) are noisy by nature: making pseudo-fakes of them teaches
        # "grain = generated"; `genuine_noise` instead adds noise to genuine draws that stay
        # genuine (of `genuine_noise_categories` only, when given; std `genuine_noise_std`, by
        # default the pseudo-fakes'), so grain as such is no evidence on those kinds. "shot" draws
        # it as a camera's photon noise (signal-dependent, sparse speckles on a dark background:
        # what a micrograph's grain is), `genuine_noise_std` then being its std at full brightness
        self.skip_categories = frozenset(skip_categories)
        self.genuine_noise = check_rate("genuine noise rate", genuine_noise)
        low, high = genuine_noise_std if genuine_noise_std is not None else self.noise_std
        self.genuine_noise_std = (float(low), float(high))
        self.genuine_noise_categories = frozenset(genuine_noise_categories)
        self.genuine_noise_model = check_genuine_noise_model(genuine_noise_model)

    def __getitem__(self, index: int) -> dict[str, Any]:
        sample = self.dataset[index]
        if "error" in sample or sample["label"] != 0:
            return sample
        by_category = self.skip_categories or self.genuine_noise_categories
        category = self.dataset.records[index].category if by_category else None
        fake = float(torch.rand(())) < self.rate and category not in self.skip_categories
        if not fake and not (self._roughened(category) and float(torch.rand(())) < self.genuine_noise):
            return sample
        low, high = self.noise_std if fake else self.genuine_noise_std
        std = low + (high - low) * float(torch.rand(()))
        if fake or self.genuine_noise_model == "gaussian":
            noisy = sample["image"] + torch.randn_like(sample["image"]) * std
        else:
            noisy = shot_noise(sample["image"], photons=1.0 / std**2)
        sample["image"] = noisy.mul(255).round().clamp(0, 255).div(255)  # as if saved as 8-bit
        if fake:
            sample["label"] = 1
            if "group" in sample:
                sample["group"] = self.group
        return sample

    def _roughened(self, category: str | None) -> bool:
        """Whether genuine draws of this category may be given noise and kept genuine."""
        listed = not self.genuine_noise_categories or category in self.genuine_noise_categories
        return self.genuine_noise > 0 and listed


def shot_noise(image: torch.Tensor, photons: float, dark: float = 0.5) -> torch.Tensor:
    """`image` (values in [0, 1]) recorded again with `photons` photons at full brightness and a dark
    level of `dark` photons: Poisson counts, so the noise grows with the signal and a dark
    background gets sparse speckles rather than a Gaussian haze."""
    counts = torch.poisson(image.clamp(0, 1) * photons + dark)
    return (counts - dark) / photons


def image_size(path: str) -> tuple[int, int] | None:
    """(width, height) from the file's header, upright as `read_image` turns it by its EXIF
    orientation; None when it cannot be read (the sample will say why)."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            width, height = image.size
            turned = image.getexif().get(0x0112, 1) in (5, 6, 7, 8)  # orientations that swap the sides
            return (height, width) if turned else (width, height)
    except (OSError, ValueError):
        return None


class SameSizeBatches(Sampler[list[int]]):
    """Batches of at most `batch_size` indices whose images share one size (`sizes[i]`), for whole
    images (preprocess mode `none`), which can be stacked only when their sizes agree. `shuffle`
    draws a new order of images and batches every epoch (from `generator`, by default torch's, which
    `seed=` seeds); otherwise batches follow the index order within each size."""

    def __init__(
        self, sizes: Sequence[Any], batch_size: int, shuffle: bool, generator: torch.Generator | None = None
    ) -> None:
        self.sizes, self.batch_size, self.shuffle = list(sizes), int(batch_size), bool(shuffle)
        self.generator = generator

    def group(self, index: int) -> Any:
        """The size an image is batched by; an unreadable image (size None) gets a batch of its own."""
        return self.sizes[index] or ("unread", index)

    def batches(self) -> list[list[int]]:
        order = (
            torch.randperm(len(self.sizes), generator=self.generator).tolist()
            if self.shuffle
            else range(len(self.sizes))
        )
        groups: dict[Any, list[int]] = {}
        for index in order:
            groups.setdefault(self.group(index), []).append(index)
        batches = [g[k : k + self.batch_size] for g in groups.values() for k in range(0, len(g), self.batch_size)]
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=self.generator).tolist()]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches())

    def __len__(self) -> int:  # the count per size does not depend on the order (and draws nothing)
        counts = Counter(self.group(index) for index in range(len(self.sizes)))
        return sum(-(-count // self.batch_size) for count in counts.values())


class SeededDraws(Sampler):
    """Every index that a sampler draws (or every batch of indices a batch sampler draws), paired
    with a seed for that draw alone, drawn in the main process from `generator` (the one that
    orders the epoch: `own_generator`). With `DrawSeeded` around the dataset, what a draw becomes
    (its augmentations, pseudo-fake noise, crop) depends on the run's seed and the draw, not on
    which loader worker made it: the same `seed=` trains the same model with any `data.num_workers`."""

    def __init__(self, draws: Sampler | Sequence[Any], generator: torch.Generator) -> None:
        self.draws, self.generator = draws, generator

    def __iter__(self) -> Iterator[Any]:
        for drawn in self.draws:
            if isinstance(drawn, list):
                yield [(index, self.seed()) for index in drawn]
            else:
                yield (drawn, self.seed())

    def seed(self) -> int:
        return int(torch.randint(2**31 - 1, (), generator=self.generator).item())

    def __len__(self) -> int:
        return len(self.draws)


def seeded_training_draws(dataset: Dataset, draws: torch.Generator) -> tuple[Dataset, Sampler]:
    """A training loader's dataset and sampler: every epoch shuffled, each draw made from a seed of
    its own (`SeededDraws`, `DrawSeeded`), both from `draws` (`ResumableDraws.training_draws`)."""
    return DrawSeeded(dataset), SeededDraws(RandomSampler(dataset, generator=draws), draws)


class ResumableDraws:
    """For a LightningDataModule (listed before it among the bases): the generator that orders the
    training epochs and seeds their draws travels in the checkpoint, so a run resumed with
    `ckpt_path` draws the epochs the uninterrupted run would have drawn. Lightning restores the
    model, the optimizer and the loops, not a loader's generator: a resumed run drew its first
    epoch's order and augmentations again."""

    _draws: torch.Generator | None = None
    _resumed_draws: torch.Tensor | None = None

    def training_draws(self) -> torch.Generator:
        """The training loader's generator (`own_generator`), where a checkpoint left it if resumed."""
        draws = own_generator()
        if self._resumed_draws is not None:
            draws.set_state(self._resumed_draws)
            self._resumed_draws = None
        self._draws = draws
        return draws

    def state_dict(self) -> dict[str, Any]:
        return {} if self._draws is None else {"training_draws": self._draws.get_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "training_draws" in state_dict:
            self._resumed_draws = state_dict["training_draws"]


def own_generator(seed: int | None = None) -> torch.Generator:
    """A generator of a loader's own, seeded with `seed` or from one draw of torch's generator
    (which `seed=` seeds) when the loader is made. A DataLoader without one draws its workers' base
    seed from torch's generator whenever it starts an epoch, persistent workers only once: the model,
    which draws from that stream too, would train otherwise with another `data.num_workers`."""
    if seed is None:
        seed = int(torch.randint(2**31 - 1, ()).item())
    return torch.Generator().manual_seed(seed)


def loader_workers(requested: int) -> int:
    """`requested` DataLoader workers, at most one per CPU this process may use: more only compete
    for the cores (and PyTorch warns of them); the draws are seeded per draw, so the batches are the
    same with any count."""
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(0, min(int(requested), available))


def worker_base_generator() -> torch.Generator:
    """A loader's generator when every draw is seeded by its own (`SeededDraws`) or nothing is drawn:
    it gives only the workers' base seed, fixed, so no loader takes a draw from torch's generator."""
    return own_generator(0)


class DrawSeeded(WrappedDataset):
    """`dataset[index]` for a (index, seed) draw of `SeededDraws`, with torch's generator and the
    dataset's augmentation pipeline (albumentations, its own generator) seeded from the draw's seed
    while the sample is made, and torch's generator restored after it (with no loader workers the
    sample is made in the main process, whose stream the model draws from)."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __getitem__(self, drawn: tuple[int, int]) -> dict[str, Any]:
        index, seed = drawn
        transform = getattr(self.dataset, "transform", None)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if hasattr(transform, "set_random_seed"):
                transform.set_random_seed(seed)
            return self.dataset[index]
