"""Training on a public layout through config: GenImage and IMDL trees made in tmp_path."""

from __future__ import annotations

import numpy as np
from hydra.utils import instantiate

from datamodules.io import write_image
from datamodules.layouts import detect_layout
from tests.helpers import compose_config


def _genimage(root):
    rng = np.random.default_rng(0)
    for generator in ("adm", "midjourney"):
        for split in ("train", "val"):
            for label in ("ai", "nature"):
                for i in range(4 if split == "train" else 2):
                    write_image(
                        root / generator / "imagenet_ai" / split / label / f"{generator}_{label}_{i}.png",
                        rng.integers(0, 256, (40, 40, 3), dtype=np.uint8),
                    )
    return root


def _data(overrides):
    cfg = compose_config("train", ["data.num_workers=0", "data.batch_size=4", *overrides])
    return instantiate(cfg.data, preprocess={"size": 32, "mode": "center_crop"}, _convert_="all")


def test_genimage_through_config_uses_val_as_test_and_carves_validation(tmp_path):
    root = _genimage(tmp_path / "genimage")
    module = _data(["data=layout", f"data.root={root}", "data.with_groups=true"])
    module.setup()
    sizes = {name: len(split) for name, split in module.splits.items()}
    assert sizes["test"] == 8 and sizes["train"] + sizes["val"] == 16 and sizes["val"] > 0
    assert all("/val/" in r.path for r in module.splits["test"])
    batch = next(iter(module.train_dataloader()))
    assert batch["image"].shape == (4, 3, 32, 32) and set(batch["group"]) <= {"adm", "midjourney"}
    resplit = _data(["data=layout", f"data.root={root}", "data.layout=genimage", "data.ignore_splits=true"])
    resplit.setup()
    assert any("/train/" in r.path for r in resplit.splits["test"])


def test_imdl_tree_trains_the_localization_module_through_config(tmp_path):
    root = tmp_path / "imdl"
    rng = np.random.default_rng(1)
    for i in range(10):
        write_image(root / "Tp" / f"t{i}.jpg", rng.integers(0, 256, (36, 44, 3), dtype=np.uint8))
        mask = np.zeros((36, 44), np.uint8)
        mask[5:20, 8:30] = 255
        write_image(root / "Gt" / f"t{i}_gt.png", mask)
        write_image(root / "Au" / f"a{i}.jpg", rng.integers(0, 256, (36, 44, 3), dtype=np.uint8))
    module = _data(["data=localization", f"data.root={root}", "data.split_fractions=[0.6,0.2,0.2]"])
    module.setup()
    batch = next(iter(module.val_dataloader()))
    assert batch["mask"].shape == batch["edge"].shape == (4, 1, 32, 32)
    assert {int(v) for v in batch["label"]} <= {0, 1}


def test_a_generated_dataset_folder_is_read_through_its_manifest(tmp_path):
    root = tmp_path / "generated"
    write_image(root / "real" / "a.png", np.zeros((8, 8, 3), np.uint8))
    write_image(root / "fake" / "splicing" / "b.png", np.zeros((8, 8, 3), np.uint8))
    (root / "manifest.csv").write_text("path,label\nreal/a.png,0\nfake/splicing/b.png,1\n")
    assert detect_layout(root) == "manifest"


def test_cross_generator_split_and_excluded_groups(tmp_path):
    rng = np.random.default_rng(2)
    lines = ["path,label,group,source"]
    for i in range(30):
        write_image(tmp_path / f"g{i}.png", rng.integers(0, 256, (36, 36, 3), dtype=np.uint8))
        lines.append(f"g{i}.png,0,genuine,s{i}")
        for group in ("ae_transposed", "ae_pixel_shuffle", "duplication_global"):
            write_image(tmp_path / f"{group}{i}.png", rng.integers(0, 256, (36, 36, 3), dtype=np.uint8))
            lines.append(f"{group}{i}.png,1,{group},s{i}")
    (tmp_path / "manifest.csv").write_text("\n".join(lines) + "\n")
    module = _data(
        [
            "data=layout",
            f"data.root={tmp_path}",
            "data.exclude_groups=[duplication_global]",
            "data.test_groups=[ae_pixel_shuffle]",
            "data.split_fractions=[0.6,0.2,0.2]",
        ]
    )
    module.setup()
    fakes = {name: {r.group for r in split if r.label == 1} for name, split in module.splits.items()}
    assert fakes == {"train": {"ae_transposed"}, "val": {"ae_transposed"}, "test": {"ae_pixel_shuffle"}}
    sources = {name: {r.source for r in split} for name, split in module.splits.items()}
    assert not (sources["train"] & sources["test"]) and not (sources["val"] & sources["test"])


def test_the_generated_experiments_name_the_command_that_makes_their_missing_data(tmp_path):
    import pytest

    from datamodules.records import LayoutError

    for experiment, command in (("generated", "preset=cpu_diverse"), ("generated_kinds", "preset=cpu_kinds")):
        data = _data([f"experiment={experiment}", f"paths.data_dir={tmp_path}"])
        with pytest.raises(LayoutError, match=f"does not exist: make it first with `python generate.py {command}`"):
            data.load_records()
