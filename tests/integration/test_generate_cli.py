"""generate.py as a user runs it: the composed config on a folder of photos, with labelled fakes ignored."""
from __future__ import annotations

import numpy as np
from hydra.core.global_hydra import GlobalHydra
from skimage import data

from datamodules.io import write_image
from datamodules.records import read_manifest
from generate import generate, spec_from_config
from tests.helpers import compose_config


def test_generate_config_on_a_labelled_folder(tmp_path):
    source = tmp_path / "photos"
    for name, image in (("cats/cat", data.chelsea()), ("cups/coffee", data.coffee()), ("rocket", data.rocket()),
                        ("astronaut", data.astronaut())):
        write_image(source / "0_real" / f"{name}.png", image[::3, ::3].copy())
    write_image(source / "1_fake" / "already_fake.png", np.zeros((90, 90, 3), np.uint8))
    cfg = compose_config("generate", [f"source={source}", f"output={tmp_path / 'out'}", "kind=forgery",
                                      "workers=1", "progress=false", "ops.region_edit=0", "ops.diffusion_inpaint=0",
                                      "panels.max_side=128",
                                      "panels.crops_per_photo=1", "panels.crop_size=80", "local_min_side=100"])
    GlobalHydra.instance().clear()
    spec = spec_from_config(cfg)
    assert spec.kind == "forgery" and spec.max_side == 128 and "region_edit" not in spec.active
    records = read_manifest(generate(cfg))
    assert not any("already_fake" in r.path or r.source == "already_fake" for r in records)
    assert {r.source for r in records} == {"cats__cat", "cups__coffee", "rocket", "astronaut"}
    assert {r.category for r in records} == {"cats", "cups", None}  # the first folder below source
    assert {"genuine", "splicing", "inpainting", "damage"} <= {r.group for r in records}
    assert not any((r.group or "").startswith("ae_") for r in records)  # no generator for kind=forgery here
    assert not (tmp_path / "out" / "generators").exists()
