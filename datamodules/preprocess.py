"""The preprocessing config a detector owns.

One small dataclass, read by the training transforms, by `infer.py` and written into the ONNX
metadata, so that the three can never drift apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

MODES = ("resize", "center_crop", "resize_crop", "pad", "tile", "none")
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "area", "lanczos")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocess:
    """How an image is brought to the network's input.

    `mode`: `resize` scales to `size` x `size`; `center_crop` crops `size` x `size` (random crop in
    training), padding first when the image is smaller; `resize_crop` scales the short side to
    `load_size` (default `size`) then crops as `center_crop` (torchvision's Resize + CenterCrop); `pad`
    places the image unscaled on a `size` x `size` canvas (centre-cropping what does not fit); `tile`
    repeats an image smaller than `size` side by side until it covers `size`, then crops like
    `center_crop` (ForgeLens and IAPL: no resampling and no blank padding); `none` feeds the image as
    it is. Frequency detectors
    avoid `resize` because resampling erases the traces they look for.
    `mean`/`std` are applied inside the network, recorded here so exported models document them.
    `pixel_divisor`: what 8-bit pixels are divided by to give the network's [0, 1] input. Every
    loader divides by 255; a network whose weights were trained on another divisor (TruFor's
    published weights: 256, as their loaders divide) rescales its input by 255 / `pixel_divisor`
    inside, so exported graphs reproduce it too.
    """

    size: int | None = 224
    mode: str = "center_crop"
    interpolation: str = "bilinear"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    load_size: int | None = None
    pixel_divisor: float = 255.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"preprocess.mode must be one of {MODES}, got {self.mode!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"preprocess.interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}")
        if self.mode != "none" and (self.size is None or int(self.size) <= 0):
            raise ValueError(f"preprocess.size must be a positive integer for mode {self.mode!r}")
        if not float(self.pixel_divisor) > 0:
            raise ValueError(f"preprocess.pixel_divisor must be positive, got {self.pixel_divisor!r}")
        object.__setattr__(self, "pixel_divisor", float(self.pixel_divisor))
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))

    @classmethod
    def from_config(cls, config: "Preprocess | Mapping[str, Any] | None") -> "Preprocess":
        if isinstance(config, Preprocess):
            return config
        config = dict(config or {})
        known = {f.name for f in fields(cls)} - {"extra"}
        extra = {k: config.pop(k) for k in list(config) if k not in known}
        return cls(**config, extra={**config.pop("extra", {}), **extra})

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mean"], data["std"] = list(self.mean), list(self.std)
        extra = data.pop("extra")
        return {**data, **extra}

    def whole(self) -> "Preprocess":
        """Each image fed whole, at its own size, with the same normalization: how a localizer is
        scored (it pads to its stride inside and crops its map back, so the map covers every pixel)."""
        return Preprocess(
            size=None,
            mode="none",
            interpolation=self.interpolation,
            mean=self.mean,
            std=self.std,
            extra=dict(self.extra),
        )

    @property
    def fixed_size(self) -> bool:
        """Whether every preprocessed image has the same size (so images can be batched)."""
        return self.mode != "none"
