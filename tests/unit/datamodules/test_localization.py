"""Localization batches: image, mask, edge band and label; masks follow the image through augmentation."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from datamodules.io import write_image
from datamodules.localization import LocalizationDataModule, edge_mask
from datamodules.records import LayoutError

SIZE = 32


def _dataset(root, with_unmasked=False):
    """6 forged images whose manipulated pixels are exactly the bright ones, 6 genuine, a manifest."""
    rng = np.random.default_rng(0)
    lines = ["path,label,mask,group,source,split"]
    for i in range(12):
        image = rng.integers(0, 90, (48, 56, 3), dtype=np.uint8)
        split = ("train", "train", "val", "test")[(i // 2) % 4]  # both labels in every split
        if i % 2:
            mask = np.zeros((48, 56), np.uint8)
            y, x = rng.integers(4, 24), rng.integers(4, 30)
            mask[y : y + 18, x : x + 20] = 255
            image[mask > 0] = 250
            write_image(root / f"m{i}.png", mask)
            lines.append(f"f{i}.png,1,m{i}.png,splicing,s{i},{split}")
            write_image(root / f"f{i}.png", image)
        else:
            write_image(root / f"g{i}.png", image)
            lines.append(f"g{i}.png,0,,genuine,s{i},{split}")
    if with_unmasked:
        write_image(root / "nomask.png", image)
        lines.append("nomask.png,1,,ae_transposed,s99,train")
    (root / "manifest.csv").write_text("\n".join(lines) + "\n")
    return root / "manifest.csv"


def _module(root, **kwargs):
    options = dict(
        root=str(root), preprocess={"size": SIZE, "mode": "center_crop"}, batch_size=4, num_workers=0, edge_width=2
    )
    return LocalizationDataModule(**{**options, **kwargs})


def test_edge_mask_is_the_band_around_the_boundary():
    mask = np.zeros((40, 40), np.uint8)
    mask[10:30, 10:30] = 1
    edge = edge_mask(mask, 2)
    assert edge[20, 20] == 0 and edge[2, 2] == 0  # deep inside and far outside
    assert edge[10, 20] == 1 and edge[8, 20] == 1 and edge[11, 20] == 1  # on, just outside, just inside
    assert edge_mask(mask, 0).sum() == 0 and edge_mask(np.zeros((5, 5)), 2).sum() == 0


def test_batches_carry_image_mask_edge_label_and_group(tmp_path):
    module = _module(_dataset(tmp_path))
    module.setup()
    batch = next(iter(module.train_dataloader()))
    assert batch["image"].shape == (4, 3, SIZE, SIZE)
    assert batch["mask"].shape == batch["edge"].shape == (4, 1, SIZE, SIZE)
    assert set(batch["mask"].unique().tolist()) <= {0.0, 1.0}
    assert set(batch["group"]) <= {"splicing", "genuine"} and batch["label"].shape == (4,)
    for mask, edge, label in zip(batch["mask"], batch["edge"], batch["label"]):
        assert (mask.sum() > 0) == bool(label) and (edge.sum() > 0) == bool(label)
        m, e = mask[0].numpy().astype(np.uint8), edge[0].numpy().astype(bool)
        near = cv2.dilate(m, np.ones((5, 5), np.uint8)).astype(bool) & ~cv2.erode(m, np.ones((7, 7), np.uint8)).astype(
            bool
        )
        assert not (e & ~near).any()  # the band hugs the mask boundary


def test_training_transforms_move_masks_with_their_images(tmp_path):
    # flips, rescale and random crops on every sample; JPEG/blur off so "bright" still means "manipulated"
    module = _module(_dataset(tmp_path), augment={"hflip": 0.5, "vflip": 0.5, "rescale": 1.0, "jpeg": 0.0, "blur": 0.0})
    module.setup()
    agreement = []
    for _ in range(3):
        for batch in module.train_dataloader():
            bright = batch["image"].min(dim=1, keepdim=True).values > 200 / 255
            agreement += (bright == batch["mask"].bool()).float().mean(dim=(1, 2, 3)).tolist()
    # resampling greys the rectangle's rim (measured: mean 0.99, worst sample 0.945); a mask that
    # missed a flip or a crop would disagree on a large part of the rectangle instead
    assert np.mean(agreement) >= 0.97 and min(agreement) >= 0.9, agreement


def test_evaluation_is_deterministic_and_augmentation_follows_the_recipe(tmp_path):
    module = _module(_dataset(tmp_path))
    module.setup()
    assert module.augment["jpeg"] == module.augment["blur"] == module.augment["rescale"] == 0.5
    first, second = next(iter(module.val_dataloader())), next(iter(module.val_dataloader()))
    assert torch.equal(first["image"], second["image"]) and torch.equal(first["mask"], second["mask"])


@pytest.mark.parametrize("policy", ["drop", "full", "error"])
def test_manipulated_images_without_masks(tmp_path, policy):
    module = _module(_dataset(tmp_path, with_unmasked=True), missing_masks=policy)
    if policy == "error":
        with pytest.raises(LayoutError, match="without a mask|have no mask"):
            module.setup()
        return
    module.setup()
    paths = [r.path for r in module.splits["train"]]
    assert any(p.endswith("nomask.png") for p in paths) == (policy == "full")
    if policy == "full":
        index = next(i for i, p in enumerate(paths) if p.endswith("nomask.png"))
        sample = module.make_dataset(module.splits["train"], None)[index]
        assert bool(sample["mask"].all())


@pytest.mark.parametrize("policy", ["drop", "full", "error"])
def test_a_mask_file_that_does_not_exist_is_a_missing_mask(tmp_path, policy):
    """It was kept, and each epoch set the image aside as unreadable, whatever missing_masks said."""
    manifest = _dataset(tmp_path)
    (tmp_path / "m1.png").unlink()
    module = _module(manifest, missing_masks=policy)
    if policy == "error":
        with pytest.raises(LayoutError, match="1 manipulated images have no mask .*f1.png"):
            module.setup()
        return
    module.setup()
    kept = next((r for split in module.splits.values() for r in split if r.path.endswith("f1.png")), None)
    assert (kept is not None) == (policy == "full") and (kept is None or kept.mask is None)


def test_a_genuine_image_that_lists_a_mask_has_no_manipulated_pixel(tmp_path):
    """Training read the mask as manipulated pixels of a genuine image; infer.py ignored it."""
    manifest = _dataset(tmp_path)
    lines = manifest.read_text().splitlines()
    lines = [line.replace("g0.png,0,,", "g0.png,0,m1.png,") for line in lines]
    manifest.write_text("\n".join(lines) + "\n")
    module = _module(manifest)
    module.setup()
    index, genuine = next((i, r) for i, r in enumerate(module.splits["train"]) if r.path.endswith("g0.png"))
    assert genuine.mask is None
    assert not module.make_dataset(module.splits["train"], None)[index]["mask"].any()


def test_missing_masks_decides_for_an_imdl_tree_too(tmp_path):
    """The IMDL reader refused the whole tree before missing_masks was read."""
    rng = np.random.default_rng(5)
    for i in range(8):
        write_image(tmp_path / "Tp" / f"t{i}.png", rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
        write_image(tmp_path / "Au" / f"a{i}.png", rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
        if i:
            write_image(tmp_path / "Gt" / f"t{i}_gt.png", np.full((40, 40), 255, np.uint8))
    for policy, kept in (("drop", 15), ("full", 16)):
        module = _module(tmp_path, missing_masks=policy, split_fractions=(0.5, 0.25, 0.25))
        module.setup()
        paths = [r.path for split in module.splits.values() for r in split]
        assert len(paths) == kept and any(p.endswith("t0.png") for p in paths) == (policy == "full")
