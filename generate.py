"""Generate a labelled dataset from authentic images: `python generate.py [kind=...] [source=DIR] [output=DIR]`.

The logic lives in `synthesis.dataset` (and `synthesis.embedded` for `kind=aigi_quick`); this entry
point reads the config, finds the photos and prints what was made.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from datamodules.io import file_in_the_way, looked_for
from datamodules.records import LayoutError, list_images, read_manifest
from inference.cli import expected_failures, run
from inference.job_folders import job_path
from inference.parts import Shard
from synthesis.dataset import generate_dataset, make_generated_manifest
from synthesis.embedded import make_embedded_manifest

log = logging.getLogger("generate")


def check_options(cfg: DictConfig, output: Path) -> None:
    """What can be refused before anything is made: `merge` that is not true or false, an output
    that is a file or lies under one, an output inside the source folder (its images would be read
    as sources by the next shard or resume)."""
    if not isinstance(cfg.get("merge", False), bool):
        raise ValueError(f"merge must be true or false, got {cfg.get('merge')!r}")
    output = output.absolute()
    if blocking := file_in_the_way(output):
        raise ValueError(f"output {output}: {blocking} is a file, not a folder")
    if cfg.source and output.resolve().is_relative_to(Path(cfg.source).resolve()):
        raise ValueError(f"output {output} is inside source {cfg.source}: choose an output folder outside it")


def find_photos(source: str | None) -> list[str] | None:
    """Image files below `source`, or None for the bundled photographs; a `LayoutError` if there are none."""
    if not source:
        return None
    if not Path(source).is_dir():
        raise LayoutError(f"source {source} does not exist or is not a folder{looked_for(source)}")
    # a labelled tree (0_real/1_fake) may hold fakes already: only authentic images are sources
    photos = [r.path for r in list_images(source) if r.label != 1]
    if not photos:
        raise LayoutError(f"no images found in {source}")
    return photos


def quick(cfg: DictConfig, output: str, photos: list[str] | None) -> None:
    manifest = make_embedded_manifest(
        output,
        seed=cfg.seed,
        split_fractions=tuple(cfg.split_fractions),
        photos=photos,
        progress=(lambda it: tqdm(it, desc="photos", unit="photo")) if cfg.progress else None,
        crop_size=cfg.crop_size,
        scales=tuple(cfg.scales),
        max_crops_per_scale=cfg.max_crops_per_scale,
    )
    records = read_manifest(manifest)
    by_split = Counter((r.split, r.label) for r in records)
    log.info(
        "wrote %s: %d images (%s)",
        manifest,
        len(records),
        ", ".join(f"{s}: {by_split[(s, 0)]} genuine + {by_split[(s, 1)]} fake" for s in ("train", "val", "test")),
    )


def spec_from_config(cfg: DictConfig):
    """The `DatasetSpec` a config describes (plain Python values, no OmegaConf nodes)."""
    from synthesis.dataset import DatasetSpec, GeneratorOptions

    keys = (
        "kind",
        "ops",
        "seed",
        "panels",
        "split_fractions",
        "splice_candidates",
        "local_min_side",
        "d15_fraction",
        "generator",
        "diffusion",
        "forgery_options",
        "genuine_kinds",
    )
    plain = {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k] for k in keys}
    if plain["generator"].pop("backend", "autoencoder") != "autoencoder":
        plain["generator"] = {}  # another backend makes the fakes; the panels are cut the same way
    return DatasetSpec(
        kind=plain["kind"],
        ops=plain["ops"],
        seed=plain["seed"],
        **plain["panels"],
        split_fractions=tuple(plain["split_fractions"]),
        splice_candidates=plain["splice_candidates"],
        local_min_side=plain["local_min_side"],
        d15_fraction=plain["d15_fraction"],
        generator=GeneratorOptions(**plain["generator"]),
        diffusion=plain["diffusion"],
        forgery_options=plain["forgery_options"],
        genuine_kinds=plain["genuine_kinds"] or {},
    )


def generate(cfg: DictConfig) -> Path:
    """Run what `cfg` asks for (quick, diffusers, one shard, or the whole set, merged from shards or
    made in one run); returns the manifest written."""
    from synthesis.summary import format_summary

    output = cfg.output or (
        "data/generated_diffusers"
        if cfg.generator.get("backend") == "diffusers"
        else {"aigi_quick": "data/embedded", "all": "data/generated"}.get(cfg.kind, f"data/generated_{cfg.kind}")
    )
    # a multirun's jobs each make their own set (shards: one)
    output = job_path(output, "output", sharded=bool(cfg.get("shard") or cfg.get("merge")))
    check_options(cfg, Path(output))
    photos = find_photos(cfg.source)
    shard = Shard.parse(cfg.get("shard"))
    one_process = cfg.kind == "aigi_quick" or cfg.generator.get("backend") == "diffusers"
    if (shard.count > 1 or cfg.get("merge")) and one_process:
        raise ValueError(
            "shard=i/n and merge=true split the items of kind=all|aigi|forgery with the autoencoder "
            "generator; kind=aigi_quick and generator=diffusers run as one process"
        )
    if cfg.kind == "aigi_quick":
        quick(cfg, output, photos)
        return Path(output) / "manifest.csv"
    if cfg.generator.get("backend") == "diffusers":
        return with_diffusers(cfg, output, photos)
    if shard.count > 1:
        return one_shard(cfg, output, photos, shard)
    manifest, summary = make_generated_manifest(
        output,
        spec_from_config(cfg),
        photos=photos,
        root=cfg.source or None,
        workers=cfg.workers,
        progress=cfg.progress,
        merge=bool(cfg.get("merge")),
    )
    log.info("wrote %s\n%s", manifest, format_summary(summary))
    return manifest


def with_diffusers(cfg: DictConfig, output: str, photos: list[str] | None) -> Path:
    """`generator=diffusers`: the fakes made by a diffusers pipeline, in one process."""
    from synthesis.diffusers_backend import DiffusersOptions
    from synthesis.diffusers_set import make_diffusers_manifest
    from synthesis.summary import format_summary

    options = DiffusersOptions(
        **{k: v for k, v in OmegaConf.to_container(cfg.generator, resolve=True).items() if k != "backend"}
    )
    manifest, summary = make_diffusers_manifest(
        output,
        spec_from_config(cfg),
        options,
        photos=photos,
        root=cfg.source or None,
        workers=cfg.workers,
        progress=cfg.progress,
    )
    log.info("wrote %s\n%s", manifest, format_summary(summary))
    return manifest


def one_shard(cfg: DictConfig, output: str, photos: list[str] | None, shard: Shard) -> Path:
    """`shard=i/n`: this shard's items only; the manifest is written by `merge=true` once all are done."""
    if cfg.get("merge"):
        raise ValueError("merge=true joins all shards: give it without shard=i/n")
    result = generate_dataset(
        output,
        spec_from_config(cfg),
        photos=photos,
        root=cfg.source or None,
        workers=cfg.workers,
        progress=cfg.progress,
        shard=(shard.index, shard.count),
    )
    summary = result["summary"]
    log.info(
        "shard %s: %d items (%d made, %d reused from an earlier run) in %s s; when every shard is "
        "done: python generate.py <the same options> merge=true",
        summary["shard"],
        summary["items"],
        summary["made"],
        summary["reused"],
        summary["seconds"],
    )
    return Path(output) / "manifest.csv"


@hydra.main(version_base="1.3", config_path="configs", config_name="generate")
@expected_failures(ValueError, FileNotFoundError)  # bad options or source, an output made with other options
def main(cfg: DictConfig) -> None:
    generate(cfg)


if __name__ == "__main__":
    run(main, config_name="generate")
