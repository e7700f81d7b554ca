"""The autoencoder "AI generator": variants, tiny training (PSNR), save/load, re-render, region edits."""

import cv2
import numpy as np
import pytest
import torch
from skimage import data

from synthesis.common import changed_pixels
from synthesis.generator import (
    VARIANTS,
    AutoencoderGenerator,
    edit_region,
    load_generator,
    psnr,
    rerender_image,
    save_generator,
    train_generator,
)

TRAIN = [data.astronaut()[::2, ::2].copy(), data.coffee()[::2, ::2].copy()]
HELD_OUT = data.chelsea()[::2, ::2].copy()  # 150 x 226: not a multiple of 4
TINY = dict(width=16, crop=32, batch_size=8)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny convolutions: extra threads only add contention


def tiny_generator(steps: int):
    torch.set_num_threads(1)  # module fixtures run outside the one_thread fixture
    return train_generator(TRAIN, "pixel_shuffle", steps=steps, seed=0, **TINY)


@pytest.fixture(scope="module")
def trained():
    """Briefly trained (40 steps, about 2 s): what saving, re-rendering and editing need."""
    return tiny_generator(40)


@pytest.fixture(scope="module")
def well_trained():
    """Trained for 150 steps (about 10 s): what reconstruction quality is judged on."""
    return tiny_generator(150)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("depth", [2, 3])
def test_variants_keep_any_size(variant, depth):
    model = AutoencoderGenerator(variant, width=8, depth=depth).eval()
    x = torch.rand(2, 3, 37, 53)
    with torch.no_grad():
        y = model(x)
        z = model.encode(torch.nn.functional.pad(x, (0, 3, 0, 3), mode="reflect"))
    assert y.shape == x.shape and 0 <= y.min() and y.max() <= 1
    assert z.shape[-2:] == (40 // 2**depth, 56 // 2**depth)


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="pixel_shuffle"):
        AutoencoderGenerator("deconv")


def _thumbnail_psnr(image: np.ndarray, factor: int = 4) -> float:
    """PSNR of the bilinear-upsampled 1/4 thumbnail alone: what a decoder that learnt nothing gives."""
    x = torch.from_numpy(image).permute(2, 0, 1).float()[None] / 255
    h, w = x.shape[-2:]
    x = torch.nn.functional.pad(x, (0, (-w) % factor, 0, (-h) % factor), mode="reflect")
    up = torch.nn.functional.interpolate(
        torch.nn.functional.avg_pool2d(x, factor), scale_factor=factor, mode="bilinear", align_corners=False
    )[..., :h, :w]
    return psnr((up[0].permute(1, 2, 0) * 255).round().byte().numpy(), image)


@pytest.mark.slow  # a training run (~6 s)
def test_tiny_training_reconstructs_closely(well_trained):
    train_psnr = psnr(rerender_image(well_trained, TRAIN[0]), TRAIN[0])
    held_psnr = psnr(rerender_image(well_trained, HELD_OUT), HELD_OUT)
    print(
        f"generator PSNR after 150 tiny steps: train {train_psnr:.1f} dB "
        f"(thumbnail {_thumbnail_psnr(TRAIN[0]):.1f}), held-out {held_psnr:.1f} dB "
        f"(thumbnail {_thumbnail_psnr(HELD_OUT):.1f})"
    )
    assert train_psnr >= 22.0 and held_psnr >= 27.0
    # the decoder synthesizes real detail beyond the colour thumbnail it is given
    assert train_psnr >= _thumbnail_psnr(TRAIN[0]) + 1.0
    assert held_psnr >= _thumbnail_psnr(HELD_OUT) + 1.0
    assert np.isfinite(train_psnr)  # a re-render, never a copy


def test_training_is_deterministic_and_variants_differ():
    a = train_generator(TRAIN, "transposed", steps=3, seed=5, **TINY)
    b = train_generator(TRAIN, "transposed", steps=3, seed=5, **TINY)
    c = train_generator(TRAIN, "transposed", steps=3, seed=6, **TINY)
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k])
    assert any(not torch.equal(v, c.state_dict()[k]) for k, v in a.state_dict().items())
    outs = [rerender_image(train_generator(TRAIN, v, steps=3, seed=0, **TINY), HELD_OUT) for v in VARIANTS]
    assert all(not np.array_equal(outs[0], o) for o in outs[1:])


def test_save_load_round_trip(trained, tmp_path):
    path = save_generator(trained, tmp_path / "gen" / "pixel_shuffle.pt")
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["config"] == {"variant": "pixel_shuffle", "width": 16, "depth": 2}
    loaded = load_generator(path)
    assert np.array_equal(rerender_image(loaded, HELD_OUT), rerender_image(trained, HELD_OUT))
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="config"):
        load_generator(tmp_path / "other.pt")


def test_rerender_touches_the_whole_frame(trained):
    out = rerender_image(trained, HELD_OUT)
    assert out.shape == HELD_OUT.shape and out.dtype == np.uint8
    assert changed_pixels(out, HELD_OUT).mean() > 0.5


def test_region_edit_mask_covers_changes(trained):
    result = edit_region(trained, HELD_OUT, np.random.default_rng(0))
    changed = changed_pixels(result.image, HELD_OUT)
    assert changed.any() and not (changed & ~result.mask).any()
    assert 0.02 < result.mask.mean() < 0.15
    inside = np.abs(result.image.astype(float) - HELD_OUT)[result.mask].mean()
    assert inside > 3  # the region is regenerated, not copied back
    again = edit_region(trained, HELD_OUT, np.random.default_rng(0))
    assert np.array_equal(again.image, result.image) and np.array_equal(again.mask, result.mask)
    given = np.zeros(HELD_OUT.shape[:2], bool)
    given[40:90, 60:140] = True
    edited = edit_region(trained, HELD_OUT, np.random.default_rng(1), mask=given)
    assert np.array_equal(edited.mask, given)
    assert not changed_pixels(edited.image, HELD_OUT)[~given].any()
    assert edited.meta["generator"] == "pixel_shuffle"


def _residual_features(image: np.ndarray, patch: int = 32) -> np.ndarray:
    """Per-patch log energy of the Laplacian and of the NPR residual (x - up(down(x)))."""
    grey = image.astype(np.float32).mean(axis=2)
    lap = np.abs(cv2.Laplacian(grey, cv2.CV_32F))
    npr = np.abs(grey - np.repeat(np.repeat(grey[::2, ::2], 2, 0), 2, 1)[: grey.shape[0], : grey.shape[1]])
    feats = []
    for y in range(0, grey.shape[0] - patch + 1, patch):
        for x in range(0, grey.shape[1] - patch + 1, patch):
            feats.append(
                [np.log1p(lap[y : y + patch, x : x + patch].mean()), np.log1p(npr[y : y + patch, x : x + patch].mean())]
            )
    return np.array(feats)


@pytest.mark.slow  # on the generator trained for 150 steps (~10 s)
@pytest.mark.ci
def test_rerenders_are_separable_by_a_simple_detector(well_trained):
    from sklearn.linear_model import LogisticRegression

    def dataset(images):
        real = np.concatenate([_residual_features(im) for im in images])
        fake = np.concatenate([_residual_features(rerender_image(well_trained, im)) for im in images])
        return np.concatenate([real, fake]), np.r_[np.zeros(len(real)), np.ones(len(fake))]

    x_train, y_train = dataset([TRAIN[0], HELD_OUT])
    x_test, y_test = dataset([TRAIN[1], data.rocket()[::2, ::2].copy()])
    accuracy = LogisticRegression().fit(x_train, y_train).score(x_test, y_test)
    print(f"patch-level real vs re-rendered accuracy of a 2-feature logistic regression: {accuracy:.3f}")
    assert accuracy >= 0.8
