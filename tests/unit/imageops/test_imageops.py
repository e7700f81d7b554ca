"""One implementation of JPEG, blur, resizing and noise: training augmentation, processing chains,
generated data and robustness curves apply the same operation, and reports name the JPEG encoder."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from skimage import data

import imageops
from datamodules.io import apply_chain
from datamodules.transforms import build_transform
from evaluation.report import write_report
from evaluation.robustness import PERTURBATIONS, robustness_curves
from synthesis.damage import rerender

NO_GEOMETRY = {"size": 0, "mode": "none"}


def photo() -> np.ndarray:
    return np.ascontiguousarray(data.astronaut()[100:260, 150:330])


def pillow_jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    """An independent reference: Pillow's encoder and decoder with their defaults (4:2:0)."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    buffer.seek(0)
    with Image.open(buffer) as decoded:
        return np.asarray(decoded.convert("RGB"))


@pytest.mark.parametrize("quality", [95, 75, 30])
def test_jpeg_is_the_standard_baseline_420_encoding_of_the_rgb_planes(quality):
    """The same pixels as Pillow's JPEG: the planes go to the encoder in their true order (an RGB
    array handed to OpenCV as if it were BGR would get other chroma, up to tens of grey levels)."""
    image = photo()
    np.testing.assert_array_equal(imageops.jpeg(image, quality), pillow_jpeg(image, quality))


def test_training_chains_generation_and_robustness_apply_the_same_jpeg():
    image = photo()
    expected = imageops.jpeg(image, 70)
    augment = {"hflip": 0.0, "jpeg": 1.0, "jpeg_quality": (70, 70)}
    trained_on = build_transform(NO_GEOMETRY, train=True, augment=augment, seed=0)(image=image)["image"]
    np.testing.assert_array_equal(trained_on, expected)
    np.testing.assert_array_equal(apply_chain(image, "jpeg70"), expected)
    np.testing.assert_array_equal(PERTURBATIONS["jpeg"](image, 70), expected)


def test_generated_rerenders_are_compressed_by_the_shared_jpeg(monkeypatch):
    calls = []
    original = imageops.jpeg
    monkeypatch.setattr(imageops, "jpeg", lambda image, quality: calls.append(quality) or original(image, quality))
    _, params = rerender(photo(), np.random.default_rng(0))
    assert calls == [params["jpeg_quality"]]


def test_blur_is_the_same_in_training_chains_and_robustness():
    image = photo()
    expected = imageops.gaussian_blur(image, 1.5)
    augment = {"hflip": 0.0, "blur": 1.0, "blur_sigma": (1.5, 1.5)}
    trained_on = build_transform(NO_GEOMETRY, train=True, augment=augment, seed=0)(image=image)["image"]
    np.testing.assert_array_equal(trained_on, expected)
    np.testing.assert_array_equal(apply_chain(image, "blur1.5"), expected)
    np.testing.assert_array_equal(PERTURBATIONS["blur"](image, 1.5), expected)
    assert np.abs(expected.astype(int) - image).mean() > 1  # the blur did something


def test_rescale_shrinks_by_area_and_enlarges_bilinearly_and_chains_name_the_kernel():
    image = photo()
    assert imageops.rescale(image, 0.5).shape == (80, 90, 3)
    np.testing.assert_array_equal(imageops.rescale(image, 0.5), imageops.resize(image, (90, 80), "area"))
    np.testing.assert_array_equal(imageops.rescale(image, 1.5), imageops.resize(image, (270, 240), "bilinear"))
    np.testing.assert_array_equal(apply_chain(image, "resize0.75_bicubic"), imageops.rescale(image, 0.75, "bicubic"))
    with pytest.raises(ValueError, match="unknown resampling kernel"):
        imageops.resize(image, (10, 10), "sinc")


def test_noise_has_the_asked_spread_and_follows_its_generator():
    grey = np.full((200, 200, 3), 128, np.uint8)
    noisy = imageops.gaussian_noise(grey, 0.05, np.random.default_rng(3))
    assert np.std(noisy.astype(float) - 128) == pytest.approx(0.05 * 255, rel=0.03)
    np.testing.assert_array_equal(noisy, imageops.gaussian_noise(grey, 0.05, np.random.default_rng(3)))
    augment = {"hflip": 0.0, "noise": 1.0, "noise_std": (0.05, 0.05)}
    trained_on = build_transform(NO_GEOMETRY, train=True, augment=augment, seed=0)(image=grey)["image"]
    assert np.std(trained_on.astype(float) - 128) == pytest.approx(0.05 * 255, rel=0.03)


def test_operations_refuse_what_is_not_an_rgb_uint8_image():
    with pytest.raises(ValueError, match="uint8 H x W x 3"):
        imageops.jpeg(photo().astype(np.float32), 90)
    with pytest.raises(ValueError, match="quality must lie in 1-100"):
        imageops.jpeg(photo(), 0)


def test_robustness_curves_and_reports_name_the_jpeg_encoder(tmp_path):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (24, 24, 3), dtype=np.uint8) for _ in range(6)]
    labels = np.array([0, 1] * 3)

    def score(batch):  # a toy detector
        return np.array([float(im.std()) / 128 for im in batch])

    def score_perturbed(perturb):
        return score([perturb(im) if perturb else im for im in images])

    result = robustness_curves(score_perturbed, labels, levels={"jpeg": (90, 40), "blur": (1.0,)})
    assert result["curves"]["jpeg"]["codec"] == imageops.jpeg_codec()
    assert imageops.jpeg_codec().startswith("OpenCV ") and "4:2:0" in imageops.jpeg_codec()
    assert "codec" not in result["curves"]["blur"]
    write_report(tmp_path, {"auroc": 0.5}, robustness=result)
    assert f"JPEG encoder: {imageops.jpeg_codec()}." in (tmp_path / "report.md").read_text()
