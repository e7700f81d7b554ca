"""Preprocessing modes give the network input the detector asked for; evaluation is deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.preprocess import Preprocess
from datamodules.transforms import build_transform, to_tensor

IMAGE = np.random.default_rng(0).integers(0, 256, (45, 71, 3), dtype=np.uint8)


@pytest.mark.parametrize("mode", ["resize", "center_crop", "pad"])
@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("size", [32, 96])
def test_fixed_size_modes_give_size_by_size(mode, train, size):
    out = build_transform({"size": size, "mode": mode}, train=train)(image=IMAGE)["image"]
    assert out.shape == (size, size, 3)


def test_none_mode_keeps_the_image_and_eval_is_deterministic():
    assert build_transform({"mode": "none", "size": None})(image=IMAGE)["image"].shape == IMAGE.shape
    transform = build_transform({"size": 32, "mode": "center_crop"})
    np.testing.assert_array_equal(transform(image=IMAGE)["image"], transform(image=IMAGE)["image"])


def test_center_crop_takes_the_centre_and_pad_keeps_the_pixel_grid_phase():
    """The centre window is torchvision's `CenterCrop` (margins 13 and 39: round(6.5) = 6,
    round(19.5) = 20, halves to even), the one released detectors were evaluated with."""
    crop = build_transform({"size": 32, "mode": "center_crop"})(image=IMAGE)["image"]
    np.testing.assert_array_equal(crop, IMAGE[6:38, 20:52])
    padded = build_transform({"size": 96, "mode": "pad"})(image=IMAGE)["image"]
    np.testing.assert_array_equal(padded[:45, :71], IMAGE)
    assert padded[45:].max() == 0 and padded[:, 71:].max() == 0


@pytest.mark.parametrize("mode", ["center_crop", "tile"])
def test_centre_window_is_torchvisions_center_crop_for_every_margin(mode):
    """Released detectors were evaluated with torchvision's CenterCrop; its window start rounds
    half-margins to even, which `(H - size) // 2` misses for margins 3, 7, 11, ..."""
    import torch
    import torchvision.transforms.functional as F

    from datamodules.geometry import eval_geometry

    for extra in range(13):
        image = np.random.default_rng(extra).integers(0, 256, (20 + extra, 33 - extra, 3), dtype=np.uint8)
        expected = F.center_crop(torch.from_numpy(image).permute(2, 0, 1), [20, 20]).permute(1, 2, 0).numpy()
        preprocess = {"size": 20, "mode": mode}
        np.testing.assert_array_equal(build_transform(preprocess)(image=image)["image"], expected)
        np.testing.assert_array_equal(eval_geometry(preprocess)(image), expected)


def test_masks_follow_the_image_geometry():
    mask = np.zeros(IMAGE.shape[:2], np.uint8)
    mask[10:20, 30:40] = 1
    out = build_transform({"size": 32, "mode": "center_crop"}, train=True, seed=1)(image=IMAGE, mask=mask)
    assert out["mask"].shape == (32, 32)


def test_transpose_moves_the_mask_with_the_image_and_channel_shuffle_reorders_colours_only():
    image = np.zeros((40, 60, 3), np.uint8)
    image[5:10, 30:50] = (200, 100, 50)
    mask = np.zeros((40, 60), np.uint8)
    mask[5:10, 30:50] = 1
    keep = {"size": None, "mode": "none"}
    turned = build_transform(keep, train=True, augment={"hflip": 0.0, "transpose": 1.0}, seed=0)(image=image, mask=mask)
    np.testing.assert_array_equal(turned["image"], image.transpose(1, 0, 2))
    np.testing.assert_array_equal(turned["mask"], mask.T)
    shuffled = build_transform(keep, train=True, augment={"hflip": 0.0, "channel_shuffle": 1.0}, seed=0)
    orders = {tuple(shuffled(image=image, mask=mask)["image"][7, 40]) for _ in range(40)}
    assert orders <= {(200, 100, 50), (200, 50, 100), (100, 200, 50), (100, 50, 200), (50, 200, 100), (50, 100, 200)}
    assert len(orders) > 1
    np.testing.assert_array_equal(shuffled(image=image, mask=mask)["mask"], mask)


def test_preprocess_rejects_unknown_modes_and_round_trips():
    with pytest.raises(ValueError, match="mode must be one of"):
        Preprocess(mode="stretch")
    config = Preprocess(size=64, mode="pad", extra={"tiles": 4})
    assert Preprocess.from_config(config.to_dict()) == config


def test_to_tensor_scales_to_unit_range():
    tensor = to_tensor(IMAGE)
    assert tensor.shape == (3, 45, 71) and tensor.dtype.is_floating_point
    assert float(tensor.max()) <= 1.0 and abs(float(tensor[0, 0, 0]) - IMAGE[0, 0, 0] / 255) < 1e-7


def test_resize_crop_scales_the_short_side_then_takes_the_centre():
    """torchvision's Resize(load_size) + CenterCrop(size), the test transform CO-SPY uses."""
    image = np.zeros((100, 200, 3), np.uint8)
    image[:, 90:110] = 255  # a bright band at the centre column
    out = build_transform({"size": 40, "load_size": 50, "mode": "resize_crop"})(image=image)["image"]
    assert out.shape == (40, 40, 3)
    # the 200 px width became 100 (short side 100 -> 50) and the crop keeps columns 30..70 of it,
    # so the band (45..55 after scaling) sits at columns 15..25 of the crop
    assert out[:, 16:24].min() > 200 and out[:, :12].max() < 50 and out[:, 28:].max() < 50
    assert Preprocess.from_config({"size": 40, "load_size": 50, "mode": "resize_crop"}).load_size == 50
