"""Generate a labelled dataset from authentic images: `python generate.py [source=DIR] [output=DIR]`."""
from __future__ import annotations

import logging
import sys
from collections import Counter

import hydra
from omegaconf import DictConfig
from tqdm import tqdm

from datamodules.classification import make_embedded_manifest
from datamodules.records import LayoutError, list_images, read_manifest

log = logging.getLogger("generate")


@hydra.main(version_base="1.3", config_path="configs", config_name="generate")
def main(cfg: DictConfig) -> None:
    photos = None
    if cfg.source:
        try:
            photos = [r.path for r in list_images(cfg.source)]
        except LayoutError as error:
            log.error("%s", error)
            sys.exit(1)
        if not photos:
            log.error("no images found in %s", cfg.source)
            sys.exit(1)
    manifest = make_embedded_manifest(cfg.output, seed=cfg.seed, split_fractions=tuple(cfg.split_fractions),
                                      photos=photos, progress=lambda it: tqdm(it, desc="photos", unit="photo"),
                                      crop_size=cfg.crop_size, scales=tuple(cfg.scales),
                                      max_crops_per_scale=cfg.max_crops_per_scale)
    records = read_manifest(manifest)
    by_split = Counter((r.split, r.label) for r in records)
    log.info("wrote %s: %d images (%s)", manifest, len(records),
             ", ".join(f"{s}: {by_split[(s, 0)]} genuine + {by_split[(s, 1)]} fake" for s in ("train", "val", "test")))


if __name__ == "__main__":
    main()
