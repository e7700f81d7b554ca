"""What a generated dataset is made of: the operations, their rates and the generator options.

Kept apart from the code that runs the generation so planning, items and the entry point share one
definition without importing each other.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from synthesis.families import DiffusionOptions

__all__ = ["OPERATIONS", "KINDS", "DEFAULT_RATES", "GeneratorOptions", "DiffusionOptions", "DatasetSpec"]

# new operations go last: the plan draws once per operation in this order (see synthesis.planning)
OPERATIONS = ("rerender", "region_edit", "splicing", "copy_move", "inpainting", "duplication_global",
              "duplication_local", "damage", "latent_rerender", "diffusion_sdedit", "diffusion_inpaint")
KINDS = {"aigi": ("rerender", "region_edit", "latent_rerender", "diffusion_sdedit", "diffusion_inpaint"),
         "forgery": ("region_edit", "splicing", "copy_move", "inpainting", "duplication_global",
                     "duplication_local", "damage", "diffusion_inpaint"),
         "all": OPERATIONS}
# expected items per genuine panel; splicing and duplication items give two images each
DEFAULT_RATES = {"rerender": 1.0, "region_edit": 0.5, "splicing": 0.5, "copy_move": 0.5, "inpainting": 0.5,
                 "duplication_global": 0.25, "duplication_local": 0.5, "damage": 0.5,
                 "latent_rerender": 0.5, "diffusion_sdedit": 1.0, "diffusion_inpaint": 0.5}


@dataclass(frozen=True)
class GeneratorOptions:
    """How the autoencoder generators are trained (see `synthesis.generator.train_generator`)."""

    variants: Sequence[str] = ("transposed", "nearest_conv", "bilinear_conv", "pixel_shuffle")
    steps: int = 400
    width: int = 16
    depth: int = 2
    crop: int = 48
    batch_size: int = 8
    lr: float = 3e-3
    dir: str | None = None  # where weights are cached / reused; default <output>/generators

    def training(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("variants", "dir")}


@dataclass(frozen=True)
class DatasetSpec:
    """What to generate. `ops` maps operations to rates; `kind` says which of them are active."""

    kind: str = "all"
    ops: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RATES))
    seed: int = 0
    max_side: int = 512  # the whole-photo panel is shrunk to this longer side
    crops_per_photo: int = 4
    crop_size: int = 256
    crop_scales: Sequence[float] = (0.5, 1.0)  # crops are cut from the photo rescaled by U(lo, hi)
    min_panel_side: int = 64
    split_fractions: Sequence[float] = (0.7, 0.15, 0.15)
    splice_candidates: int = 12  # similarity ranking over this many random panels of the same split
    local_min_side: int = 350  # THEMIS: local duplication only for panels larger than this
    d15_fraction: float = 0.5
    generator: GeneratorOptions = field(default_factory=GeneratorOptions)
    diffusion: DiffusionOptions = field(default_factory=DiffusionOptions)  # latent AE and DDPM families

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        unknown = set(self.ops) - set(OPERATIONS)
        if unknown:
            raise ValueError(f"unknown operations {sorted(unknown)}; expected among {OPERATIONS}")
        if len(self.split_fractions) != 3 or abs(sum(self.split_fractions) - 1) > 1e-6:
            raise ValueError(f"split_fractions must be three numbers summing to 1, got {self.split_fractions}")
        if isinstance(self.generator, Mapping):
            object.__setattr__(self, "generator", GeneratorOptions(**self.generator))
        if isinstance(self.diffusion, Mapping):
            object.__setattr__(self, "diffusion", DiffusionOptions(**self.diffusion))

    @property
    def active(self) -> dict[str, float]:
        return {op: float(self.ops.get(op, 0.0)) for op in KINDS[self.kind] if self.ops.get(op, 0.0) > 0}

    def fingerprint(self) -> dict[str, Any]:
        """Everything that changes the output (not workers, not where generator weights live)."""
        data = asdict(self)
        data["generator"].pop("dir")
        return json.loads(json.dumps(data, default=list))
