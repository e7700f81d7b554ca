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
    for name, image in (
        ("cats/cat", data.chelsea()),
        ("cups/coffee", data.coffee()),
        ("rocket", data.rocket()),
        ("astronaut", data.astronaut()),
    ):
        write_image(source / "0_real" / f"{name}.png", image[::3, ::3].copy())
    write_image(source / "1_fake" / "already_fake.png", np.zeros((90, 90, 3), np.uint8))
    cfg = compose_config(
        "generate",
        [
            f"source={source}",
            f"output={tmp_path / 'out'}",
            "kind=forgery",
            "workers=1",
            "progress=false",
            "ops.region_edit=0",
            "ops.diffusion_inpaint=0",
            "panels.max_side=128",
            "panels.crops_per_photo=1",
            "panels.crop_size=80",
            "local_min_side=100",
        ],
    )
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


def test_cpu_diverse_preset_and_the_generated_experiment_compose():
    from synthesis.families import FAMILY_OPERATIONS

    cfg = compose_config("generate", ["preset=cpu_diverse"])
    GlobalHydra.instance().clear()
    spec = spec_from_config(cfg)
    assert spec.kind == "aigi" and cfg.output == "data/generated_detector"
    # every whole-image family, no region edits; a quarter of the photos for calibration
    assert set(spec.active) == {"rerender", "latent_rerender", "diffusion_sdedit"} and set(FAMILY_OPERATIONS) & set(
        spec.active
    )
    assert tuple(spec.split_fractions) == (0.5, 0.25, 0.25) and spec.crop_size == 64
    train = compose_config("train", ["experiment=generated"])
    root = train.data._get_node("root")._value()  # resolving it needs a running Hydra app
    assert train.data._target_.endswith("LayoutDataModule") and root.endswith("/generated_detector")
    assert train.detector.net.preprocess.size == 64 and train.data.balanced
    assert train.data.pseudo_fakes > 0 and max(train.data.pseudo_fake_noise) >= 0.2  # the noisy-generator lever
    assert "ddpm_pixel_inpaint" in train.data.exclude_groups
    assert spec.changed_forgery_options() == {}  # the seed's recipe unless asked
    traced = spec_from_config(
        compose_config(
            "generate", ["forgery_options.copy_move.scale=[0.8,1.25]", "forgery_options.splicing.donor_chains=[jpeg75]"]
        )
    )
    GlobalHydra.instance().clear()
    assert traced.changed_forgery_options() == {
        "copy_move": {"scale": [0.8, 1.25]},
        "splicing": {"donor_chains": ["jpeg75"]},
    }
    diffusers = compose_config("generate", ["generator=diffusers", "generator.model=/weights/sd"])
    assert diffusers.generator.backend == "diffusers" and diffusers.generator.strengths == [0.3, 0.6]


def test_the_quick_set_shows_its_progress_bar_only_when_progress_is_on(tmp_path, capsys):
    from tests.helpers import write_images

    write_images(tmp_path / "photos", [(64, 64), (64, 64)])
    printed = {}
    for progress in ("true", "false"):
        cfg = compose_config(
            "generate",
            [
                "kind=aigi_quick",
                f"source={tmp_path / 'photos'}",
                f"output={tmp_path / progress}",
                "crop_size=32",
                "scales=[1.0]",
                f"progress={progress}",
            ],
        )
        GlobalHydra.instance().clear()
        generate(cfg)
        printed[progress] = capsys.readouterr().err
        assert len(read_manifest(tmp_path / progress / "manifest.csv")) == 2 * 2 * 4  # 4 crops a photo, and fakes
    assert "photos: 100%" in printed["true"]
    assert "photos" not in printed["false"]
