"""Training on a public layout through config: GenImage and IMDL trees made in tmp_path."""

from __future__ import annotations

import numpy as np
import pytest
from hydra.utils import instantiate

from datamodules.io import write_image
from datamodules.layouts import detect_layout
from datamodules.records import LayoutError
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
    batch = next(iter(module.train_dataloader()))
    assert batch["mask"].shape == batch["edge"].shape == (4, 1, 32, 32)  # the network's crops
    batch = next(iter(module.val_dataloader()))
    assert batch["mask"].shape == batch["edge"].shape == (4, 1, 36, 44)  # each image whole, as infer.py scores it
    assert {int(v) for v in batch["label"]} <= {0, 1}
    cropped = _data(
        ["data=localization", f"data.root={root}", "data.split_fractions=[0.6,0.2,0.2]", "data.eval_whole=false"]
    )
    cropped.setup()
    assert next(iter(cropped.val_dataloader()))["mask"].shape == (4, 1, 32, 32)


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
    for experiment, command in (("generated", "preset=cpu_diverse"), ("generated_kinds", "preset=cpu_kinds")):
        data = _data([f"experiment={experiment}", f"paths.data_dir={tmp_path}"])
        with pytest.raises(LayoutError, match=f"does not exist: make it first with `python generate.py {command}`"):
            data.load_records()


def _folder_tree(root, splits):
    rng = np.random.default_rng(3)
    for split in splits:
        for label in ("0_real", "1_fake"):
            for i in range(6):
                write_image(root / split / label / f"{label}{i}.png", rng.integers(0, 256, (24, 24, 3), dtype=np.uint8))
    return root


def test_a_tree_with_train_and_test_but_no_val_keeps_its_test_and_carves_validation_from_train(tmp_path):
    root = _folder_tree(tmp_path / "tree", ("train", "test"))
    module = _data(["data=layout", f"data.root={root}"])
    module.setup()
    assert {r.path for r in module.splits["test"]} == {str(p) for p in (root / "test").rglob("*.png")}
    carved = {r.path for r in module.splits["train"] + module.splits["val"]}
    assert carved == {str(p) for p in (root / "train").rglob("*.png")} and module.splits["val"]


def _manifest(root, rows):
    rng = np.random.default_rng(4)
    for path, *_ in rows:
        write_image(root / path, rng.integers(0, 256, (24, 24, 3), dtype=np.uint8))
    (root / "manifest.csv").write_text("path,label,split\n" + "".join(f"{p},{y},{s}\n" for p, y, s in rows))
    return root / "manifest.csv"


def test_a_manifest_that_names_every_split_but_val_is_told_to_mark_some_rows_val(tmp_path):
    rows = [(f"{s}{i}.png", i % 2, s) for s in ("train", "test") for i in range(4)]
    module = _data(["data=manifest", f"data.manifest={_manifest(tmp_path, rows)}"])
    with pytest.raises(LayoutError, match="none with val; mark some as val, or leave their split empty"):
        module.setup()


@pytest.mark.parametrize(
    ("labels", "localizer", "refusal"),
    [
        ((0,), False, "genuine images only, so a classifier has nothing to tell apart: add fake images or make "),
        ((1,), False, "fake images only, so a classifier has nothing to tell apart: add genuine images$"),
        ((0,), True, "no manipulated image, so a localizer has nothing to learn"),
        ((0, 1), False, None),
        ((1,), True, None),  # forgeries alone (CASIA's Tp) teach a localizer: their masks hold both classes
    ],
)
def test_a_train_split_a_detector_cannot_learn_from_is_refused_before_training(tmp_path, labels, localizer, refusal):
    rows = [(f"{s}{i}.png", labels[i % len(labels)], s) for s in ("train", "val", "test") for i in range(4)]
    module = _data(["data=manifest", f"data.manifest={_manifest(tmp_path, rows)}"])
    module.setup()
    if refusal is None:
        module.check_learnable(localizer)
    else:
        with pytest.raises(LayoutError, match=refusal):
            module.check_learnable(localizer)


def test_genuine_images_alone_train_a_classifier_on_their_pseudo_fakes(tmp_path):
    rows = [(f"{s}{i}.png", 0, s) for s in ("train", "val", "test") for i in range(4)]
    module = _data(["data=manifest", f"data.manifest={_manifest(tmp_path, rows)}", "data.pseudo_fakes=0.5"])
    module.setup()
    module.check_learnable(False)


def _grouped_manifest(root, groups):
    rng = np.random.default_rng(5)
    lines = ["path,label,group"]
    for i, group in enumerate(groups * 4):
        write_image(root / f"i{i}.png", rng.integers(0, 256, (24, 24, 3), dtype=np.uint8))
        lines.append(f"i{i}.png,{int(group != 'genuine')},{group}")
    (root / "manifest.csv").write_text("\n".join(lines) + "\n")
    return root


def test_excluding_a_group_no_image_has_is_warned_once_naming_it_and_the_groups_there(tmp_path, caplog):
    root = _grouped_manifest(tmp_path, ["genuine", "splicing"])
    module = _data(["data=layout", f"data.root={root}", "data.exclude_groups=[splcing,splicing]"])
    with caplog.at_level("WARNING"):
        records = module.load_records()
    warned = [m for m in caplog.messages if "data.exclude_groups" in m]
    assert len(warned) == 1 and "['splcing']" in warned[0] and "['genuine', 'splicing']" in warned[0]
    assert {r.group for r in records} == {"genuine"}


def test_the_localization_default_exclusions_are_not_warned_of_on_data_without_them(tmp_path, caplog):
    root = _grouped_manifest(tmp_path, ["genuine", "splicing"])
    with caplog.at_level("WARNING"):
        _data(["data=localization", f"data.root={root}", "data.missing_masks=full"]).load_records()
    assert not [m for m in caplog.messages if "data.exclude_groups" in m]
    with caplog.at_level("WARNING"):
        _data(
            ["data=localization", f"data.root={root}", "data.missing_masks=full", "data.exclude_groups=[inpainting]"]
        ).load_records()
    assert [m for m in caplog.messages if "data.exclude_groups" in m and "['inpainting']" in m]


def test_the_localization_config_excludes_exactly_the_groups_its_module_treats_as_defaults():
    from datamodules.localization import LocalizationDataModule

    cfg = compose_config("train", ["data=localization"])
    assert set(cfg.data.exclude_groups) == LocalizationDataModule.default_exclusions
