"""The latent and diffusion generator families inside a generated dataset: training, caching, items.

Three operations join the autoencoder re-renders of `synthesis.generator`:

- `latent_rerender` (group `latent_ae`): the whole frame through the 8x latent autoencoder;
- `diffusion_sdedit` (group `ddpm_<space>_sdedit_<strength>`): SDEdit regeneration of the whole
  frame by the DDPM, in pixel space or in the autoencoder's latent, at each configured strength;
- `diffusion_inpaint` (group `ddpm_<space>_inpaint`): a region regenerated, the rest kept exactly.

Each (space, strength) is its own group, so cross-generator evaluation can hold any of them out.
Models are trained once on the genuine whole-photo panels (as the autoencoders are: a generator
models photographs, it never sees a label) and cached under `<output>/generators/` with a JSON
sidecar (options, seed, fidelity PSNR, seconds); a cache made with other options is retrained.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from datamodules.io import read_image

__all__ = ["FAMILY_OPERATIONS", "DiffusionOptions", "train_families", "run_family_operation", "family_group"]

FAMILY_OPERATIONS = ("latent_rerender", "diffusion_sdedit", "diffusion_inpaint")
SEED_OFFSETS = {"latent": 100, "ddpm_pixel": 101, "ddpm_latent": 102}  # each model its own seed


@dataclass(frozen=True)
class DiffusionOptions:
    """How the latent autoencoder and the DDPMs are trained and sampled."""

    spaces: Sequence[str] = ("pixel", "latent")  # which DDPMs: on pixels, on the latent (LDM-style)
    strengths: Sequence[float] = (0.3, 0.6)  # SDEdit strengths; each is its own group
    sample_steps: int = 20  # DDIM steps for a full-strength chain (SDEdit runs strength x this)
    inpaint_strength: float = 1.0
    latent: dict = field(
        default_factory=lambda: {
            "steps": 400,
            "width": 16,
            "latent_channels": 4,
            "crop": 64,
            "batch_size": 8,
            "lr": 2e-3,
        }
    )
    ddpm: dict = field(
        default_factory=lambda: {"steps": 600, "width": 16, "mults": [1, 2, 2], "crop": 32, "batch_size": 8, "lr": 2e-3}
    )
    latent_ddpm: dict = field(
        default_factory=lambda: {"steps": 600, "width": 32, "mults": [1, 2], "crop": 8, "batch_size": 16, "lr": 2e-3}
    )

    def __post_init__(self) -> None:
        unknown = set(self.spaces) - {"pixel", "latent"}
        if unknown:
            raise ValueError(f"diffusion.spaces must be among ['pixel', 'latent'], got {sorted(unknown)}")
        bad = [s for s in self.strengths if not 0.0 < float(s) <= 1.0]
        if bad or not self.strengths:
            raise ValueError(f"diffusion.strengths must be numbers in (0, 1], got {list(self.strengths)}")


def family_group(op: str, space: str | None = None, strength: float | None = None) -> str:
    if op == "latent_rerender":
        return "latent_ae"
    if op == "diffusion_sdedit":
        return f"ddpm_{space}_sdedit_{float(strength):g}"
    return f"ddpm_{space}_inpaint"


def _fidelity(images: list[np.ndarray], render) -> float:
    from synthesis.generator import psnr

    return round(float(np.mean([psnr(render(im), im) for im in images[:8]])), 2)


def check_reused_weights(weights: Path, recorded: Mapping[str, Any] | None, asked: Mapping[str, Any]) -> None:
    """Weights reused from a user's `generator.dir` were trained with the options asked: the
    dataset's stamp records those options. Seeds may differ (one folder serves datasets of several
    seeds); weights without a record of their training are reused as given."""
    asked = json.loads(json.dumps(dict(asked), default=list))
    if recorded is None or dict(recorded) == asked:
        return
    differ = sorted(k for k in asked.keys() | recorded.keys() if recorded.get(k) != asked.get(k))
    raise ValueError(
        f"{weights} was trained with other options ("
        + ", ".join(f"{k} {recorded.get(k)!r} there, {asked.get(k)!r} asked" for k in differ)
        + "): give the options it was trained with, or another generator.dir"
    )


def _cached(weights: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    sidecar = weights.with_suffix(".json")
    if not weights.is_file():
        return None
    meta = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
    return meta if meta.get("key") == key else None


def train_families(
    options: DiffusionOptions,
    folder: Path,
    panel_paths: Sequence[Path],
    seed: int,
    needs: set[str],
    reuse_any: bool = False,
) -> tuple[dict[str, str], dict[str, str]]:
    """Weights path per model ('latent', 'ddpm_pixel', 'ddpm_latent') and what happened to each.

    `needs` holds the operations that will run; only the models they use are trained. With
    `reuse_any` (a user-given weights folder) cached weights are reused whatever their options.
    """
    images = [im for im in (np.array(read_image(p)) for p in panel_paths) if min(im.shape[:2]) >= 64]
    spaces = set(options.spaces) if needs & {"diffusion_sdedit", "diffusion_inpaint"} else set()
    wanted = (["latent"] if "latent_rerender" in needs or "latent" in spaces else []) + [
        f"ddpm_{s}" for s in ("pixel", "latent") if s in spaces
    ]
    paths, status, keys = {}, {}, {}
    latent_model = None
    for name in wanted:
        weights = folder / f"{name}.pt"
        training = options.latent if name == "latent" else options.ddpm if name == "ddpm_pixel" else options.latent_ddpm
        key = {
            "training": dict(training),
            "seed": seed + SEED_OFFSETS[name],
            **({"latent": keys["latent"]} if name == "ddpm_latent" else {}),
        }
        keys[name] = key
        if reuse_any and weights.is_file():
            sidecar = weights.with_suffix(".json")
            recorded = json.loads(sidecar.read_text()).get("key", {}) if sidecar.is_file() else {}
            check_reused_weights(weights, recorded.get("training"), key["training"])
        meta = ({} if weights.is_file() else None) if reuse_any else _cached(weights, key)
        paths[name] = str(weights.resolve())
        if meta is not None:
            if name == "latent":
                from synthesis.latent import load_latent

                latent_model = load_latent(weights)
            status[name] = f"reused {weights}" + (
                f" ({meta['fidelity']} PSNR {meta['psnr_db']} dB)" if "psnr_db" in meta else ""
            )
            continue
        started = time.perf_counter()
        if not images:
            raise ValueError("no genuine panel to train the diffusion-family generators on")
        model, quality, what = _train_and_save(name, images, key["seed"], training, latent_model, options, weights)
        if name == "latent":
            latent_model = model
        seconds = round(time.perf_counter() - started, 1)
        sidecar = {"model": name, "key": key, "psnr_db": quality, "fidelity": what, "seconds": seconds}
        weights.with_suffix(".json").write_text(json.dumps(sidecar, indent=1))
        status[name] = f"trained -> {weights} ({what} PSNR {quality} dB on its training panels, {seconds} s to train)"
    return paths, status


def _train_and_save(
    name: str,
    images: list[np.ndarray],
    seed: int,
    training: Any,
    latent_model: Any,
    options: DiffusionOptions,
    weights: Path,
) -> tuple[Any, float, str]:
    """Train model `name` on `images` and save it to `weights`; returns the model, the PSNR of what it
    makes from its training panels, and what that fidelity measures (re-rendering, or SDEdit)."""
    import torch

    from synthesis.diffusion import save_diffusion, sdedit, train_diffusion
    from synthesis.latent import save_latent, to_tensor, to_uint8, train_latent_autoencoder

    if name == "latent":
        model = train_latent_autoencoder(images, seed=seed, **training)
        save_latent(model, weights)
        with torch.no_grad():
            quality = _fidelity(images, lambda im: to_uint8(model(to_tensor(im))))
        return model, quality, "re-render"
    space = name.split("_")[1]
    model = train_diffusion(images, seed=seed, latent=latent_model if space == "latent" else None, **training)
    save_diffusion(model, weights)
    strength = float(min(options.strengths))
    quality = _fidelity(
        images,
        lambda im: sdedit(
            model, im, strength, np.random.default_rng(0), steps=options.sample_steps, latent=latent_model
        ),
    )
    return model, quality, f"SDEdit at strength {strength:g}"


_LOADED: dict[str, Any] = {}  # per process: models are loaded once


def _load(kind: str, path: str):
    if path not in _LOADED:
        from synthesis.diffusion import load_diffusion
        from synthesis.latent import load_latent

        _LOADED[path] = load_latent(path) if kind == "latent" else load_diffusion(path)
    return _LOADED[path]


def run_family_operation(
    op: str, image: np.ndarray, rng: np.random.Generator, options: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, str, dict[str, Any]]:
    """(fake, mask, group, meta) of one item; `options` carries the model paths and the setting."""
    import torch

    from synthesis.common import random_ellipse
    from synthesis.diffusion import inpaint, sdedit
    from synthesis.latent import to_tensor, to_uint8

    latent = _load("latent", options["latent_path"]) if options.get("latent_path") else None
    if op == "latent_rerender":
        with torch.no_grad():
            fake = to_uint8(latent(to_tensor(image)))
        return fake, np.ones(image.shape[:2], bool), family_group(op), {"operation": "latent_rerender"}
    space = options["space"]
    model = _load("ddpm", options["ddpm_path"])
    steps = int(options["sample_steps"])
    if op == "diffusion_sdedit":
        strength = float(options["strength"])
        fake = sdedit(model, image, strength, rng, steps=steps, latent=latent)
        meta = {"operation": "diffusion_sdedit", "space": space, "strength": strength, "steps": steps}
        return fake, np.ones(image.shape[:2], bool), family_group(op, space, strength), meta
    if op == "diffusion_inpaint":
        region = random_ellipse(image.shape[:2], rng, float(rng.uniform(0.04, 0.15)))
        edit = inpaint(
            model, image, region, rng, strength=float(options["inpaint_strength"]), steps=steps, latent=latent
        )
        return edit.image, edit.mask, family_group(op, space), {"operation": "diffusion_inpaint", **edit.meta}
    raise ValueError(f"unknown family operation {op!r}; expected one of {FAMILY_OPERATIONS}")


def family_item_options(op: str, options: DiffusionOptions, paths: dict[str, str], turn: int) -> dict[str, Any]:
    """The setting of the `turn`-th item of `op` on a panel: spaces and strengths take turns."""
    spaces = list(options.spaces)
    space = spaces[turn % len(spaces)] if spaces else "pixel"
    item = {
        "latent_path": paths.get("latent"),
        "sample_steps": options.sample_steps,
        "inpaint_strength": options.inpaint_strength,
    }
    if op == "latent_rerender":
        return item
    strengths = list(options.strengths)
    item.update(
        space=space,
        ddpm_path=paths[f"ddpm_{space}"],
        strength=float(strengths[(turn // max(1, len(spaces))) % len(strengths)]),
    )
    if space == "pixel" and op != "latent_rerender":
        item["latent_path"] = None
    return item


def options_dict(options: DiffusionOptions) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(options), default=list))
