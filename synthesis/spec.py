"""What a generated dataset is made of: the operations, their rates and the generator options.

Kept apart from the code that runs the generation so planning, items and the entry point share one
definition without importing each other.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from synthesis.families import DiffusionOptions

__all__ = [
    "OPERATIONS",
    "KINDS",
    "DEFAULT_RATES",
    "FORGERY_OPTIONS",
    "GeneratorOptions",
    "DiffusionOptions",
    "DatasetSpec",
]

# new operations go last: the plan draws once per operation in this order (see synthesis.planning)
OPERATIONS = (
    "rerender",
    "region_edit",
    "splicing",
    "copy_move",
    "inpainting",
    "duplication_global",
    "duplication_local",
    "damage",
    "latent_rerender",
    "diffusion_sdedit",
    "diffusion_inpaint",
)
KINDS = {
    "aigi": ("rerender", "region_edit", "latent_rerender", "diffusion_sdedit", "diffusion_inpaint"),
    "forgery": (
        "region_edit",
        "splicing",
        "copy_move",
        "inpainting",
        "duplication_global",
        "duplication_local",
        "damage",
        "diffusion_inpaint",
    ),
    "all": OPERATIONS,
}
# expected items per genuine panel; splicing and duplication items give two images each
DEFAULT_RATES = {
    "rerender": 1.0,
    "region_edit": 0.5,
    "splicing": 0.5,
    "copy_move": 0.5,
    "inpainting": 0.5,
    "duplication_global": 0.25,
    "duplication_local": 0.5,
    "damage": 0.5,
    "latent_rerender": 0.5,
    "diffusion_sdedit": 1.0,
    "diffusion_inpaint": 0.5,
}

# settings a dataset may pass to the forgery generators (synthesis.copy_move.copy_move,
# synthesis.splicing.splice) with the generators' defaults, the seed's recipe
FORGERY_OPTIONS = {
    "copy_move": {"scale": [1.0, 1.0], "rotation": [0.0, 0.0], "interpolation": "bilinear"},
    "splicing": {"donor_chains": []},
}


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

    def __post_init__(self) -> None:
        if not self.variants:
            raise ValueError("generator.variants must name one variant or more")

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
    # category -> its own crop count (e.g. the bundled photographs kept at 12 while each genuine-kind
    # source gives 3): how many sources a kind has and how many crops each gives are separate choices
    crops_by_category: Mapping[str, int] = field(default_factory=dict)
    crop_size: int = 256
    crop_scales: Sequence[float] = (0.5, 1.0)  # crops are cut from the photo rescaled by U(lo, hi)
    min_panel_side: int = 64
    split_fractions: Sequence[float] = (0.7, 0.15, 0.15)
    splice_candidates: int = 12  # similarity ranking over this many random panels of the same split
    local_min_side: int = 350  # THEMIS: local duplication only for panels larger than this
    d15_fraction: float = 0.5
    generator: GeneratorOptions = field(default_factory=GeneratorOptions)
    diffusion: DiffusionOptions = field(default_factory=DiffusionOptions)  # latent AE and DDPM families
    # per operation, keyword arguments of its generator (FORGERY_OPTIONS), e.g.
    # {"copy_move": {"scale": [0.8, 1.25]}, "splicing": {"donor_chains": ["jpeg75"]}}
    forgery_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # genuine images of the users' kinds made beside the photos (synthesis.genuine_kinds): kind -> count
    genuine_kinds: Mapping[str, int] = field(default_factory=dict)
    # the options of another backend making the fakes instead of `ops` (generator=diffusers: its model
    # and sampling), stamped with the rest; empty when the toolkit's own generators make them
    backend: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        unknown = set(self.ops) - set(OPERATIONS)
        if unknown:
            raise ValueError(f"unknown operations {sorted(unknown)}; expected among {OPERATIONS}")
        if len(self.split_fractions) != 3 or abs(sum(self.split_fractions) - 1) > 1e-6:
            raise ValueError(f"split_fractions must be three numbers summing to 1, got {self.split_fractions}")
        for op, settings in self.forgery_options.items():
            known = FORGERY_OPTIONS.get(op)
            if known is None:
                raise ValueError(f"forgery_options: no options for {op!r}; options exist for {sorted(FORGERY_OPTIONS)}")
            if set(settings) - set(known):
                raise ValueError(
                    f"forgery_options.{op}: unknown {sorted(set(settings) - set(known))}; known: {sorted(known)}"
                )
        if self.crops_by_category is None:  # `panels.crops_by_category: null` in a config: none of its own
            object.__setattr__(self, "crops_by_category", {})
        negative = {k: v for k, v in self.crops_by_category.items() if int(v) < 0}
        if self.crops_per_photo < 0 or negative:
            raise ValueError(f"crop counts must be 0 or more, got {self.crops_per_photo} and {negative}")
        self._check_counts()
        if isinstance(self.generator, Mapping):
            object.__setattr__(self, "generator", GeneratorOptions(**self.generator))
        if isinstance(self.diffusion, Mapping):
            object.__setattr__(self, "diffusion", DiffusionOptions(**self.diffusion))

    def _check_counts(self) -> None:
        """Negative rates and counts, and sizes below one pixel, refused before anything is made (a
        negative rate read as 0, a negative seed failed in every worker)."""
        if int(self.seed) < 0:
            raise ValueError(f"seed must be 0 or more, got {self.seed}")
        if negative := {op: rate for op, rate in self.ops.items() if float(rate) < 0}:
            raise ValueError(f"operation rates must be 0 or more (0 turns one off), got {negative}")
        if negative := {kind: n for kind, n in (self.genuine_kinds or {}).items() if int(n) < 0}:
            raise ValueError(f"genuine_kinds counts must be 0 or more, got {negative}")
        sizes = {name: getattr(self, name) for name in ("max_side", "crop_size", "min_panel_side")}
        if small := {name: size for name, size in sizes.items() if size < 1}:
            raise ValueError(f"panel sizes must be 1 px or more, got {small}")

    def changed_forgery_options(self) -> dict[str, dict[str, Any]]:
        """`forgery_options` without the settings equal to the generators' defaults, nor empty operations."""
        plain = json.loads(json.dumps({op: dict(v) for op, v in self.forgery_options.items()}, default=list))
        changed = {
            op: {k: v for k, v in settings.items() if v != FORGERY_OPTIONS[op][k]} for op, settings in plain.items()
        }
        return {op: settings for op, settings in changed.items() if settings}

    @property
    def active(self) -> dict[str, float]:
        return {op: float(self.ops.get(op, 0.0)) for op in KINDS[self.kind] if self.ops.get(op, 0.0) > 0}

    def fingerprint(self) -> dict[str, Any]:
        """Everything that changes the output (not workers, not where generator weights live)."""
        data = asdict(self)
        data["generator"].pop("dir")
        data.pop("forgery_options")
        if not self.crops_by_category:  # datasets made before the option keep their fingerprint
            data.pop("crops_by_category")
        if not self.genuine_kinds:  # datasets made before genuine kinds existed keep their fingerprint
            data.pop("genuine_kinds")
        else:  # their sources are split within each category (a folder split otherwise is refused)
            data["split_by"] = "category"
            from synthesis.genuine_kinds import missing_document_fonts

            if self.genuine_kinds.get("document") and (missing := missing_document_fonts()):
                data["missing_fonts"] = missing  # receipts set in fewer fonts than the full set
        if not self.backend:  # datasets made by the toolkit's own generators keep their fingerprint
            data.pop("backend")
        if self.changed_forgery_options():  # else the seed's recipe: datasets made before the option match
            data["forgery_options"] = self.changed_forgery_options()
        return json.loads(json.dumps(data, default=list))
