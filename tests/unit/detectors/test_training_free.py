"""The training-free localizers (docs/training_free.md): each finds a region whose traces differ
from the rest of the image (another noise level, a donor JPEG-compressed or resampled before
pasting)
without ever being trained, at any image size, deterministically, and runs
through infer.py from a saved checkpoint like any trained detector."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from detectors.noise_level import NoiseLevelLocalizer
from detectors.registry import create_detector, create_module, detector_class
from inference.writer import read_results
from tests.helpers import compose_config

# the detectors of residual statistics; JPEG ghosts look at quantization instead
TRAINING_FREE = ["noise_level_tiny", "noise_level", "splicebuster_tiny", "splicebuster"]
EVERY = [*TRAINING_FREE, "jpeg_ghost_tiny", "jpeg_ghost", "jpeg_grid_tiny", "jpeg_grid"]
HEIGHT, WIDTH = 160, 224  # non-square on purpose
REGION = (slice(40, 120), slice(64, 160))  # rows, columns of the region with other traces


def smooth_scene(seed: int) -> np.ndarray:
    """A photo-like 8-bit-range scene: gradients and soft blobs, no noise yet (H, W, 3 floats)."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:HEIGHT, 0:WIDTH] / max(HEIGHT, WIDTH)
    scene = 60 + 120 * rows * cols + 30 * np.sin(6 * cols + rng.uniform(0, 3))
    return np.repeat(scene[..., None], 3, axis=2) + rng.uniform(-10, 10, size=(1, 1, 3))


def as_input(pixels: np.ndarray) -> torch.Tensor:
    """Rounded to 8 bits, as a decoded file would be, -> (1, 3, H, W) in [0, 1]."""
    eight_bit = np.clip(np.round(pixels), 0, 255).astype(np.float32) / 255
    return torch.from_numpy(eight_bit).permute(2, 0, 1).unsqueeze(0)


def region_with_other_noise(sigma_outside: float, sigma_inside: float, seed: int = 0) -> torch.Tensor:
    """A scene with Gaussian noise `sigma_outside`, and `sigma_inside` in REGION (a splice from a
    camera with another noise level, or an inpainted / smoothed region when lower)."""
    rng = np.random.default_rng(seed)
    pixels = smooth_scene(seed) + rng.normal(0, sigma_outside, size=(HEIGHT, WIDTH, 3))
    pixels[REGION] = smooth_scene(seed)[REGION] + rng.normal(0, sigma_inside, size=(80, 96, 3))
    return as_input(pixels)


def inside_and_outside(mask_logit: torch.Tensor) -> tuple[float, float]:
    """Mean map value inside REGION (its 8 px border excluded) and well outside it."""
    probability = torch.sigmoid(mask_logit[0, 0])
    inside = probability[48:112, 72:152].mean().item()
    outside_mask = torch.ones(HEIGHT, WIDTH, dtype=torch.bool)
    outside_mask[24:136, 48:176] = False
    return inside, probability[outside_mask].mean().item()


@pytest.mark.parametrize("name", TRAINING_FREE)
@pytest.mark.parametrize(
    ("sigma_outside", "sigma_inside"), [(2.0, 8.0), (6.0, 1.0)], ids=["noisier_splice", "smoothed_region"]
)
def test_a_region_with_another_noise_level_scores_higher_inside_than_outside(name, sigma_outside, sigma_inside):
    net = create_detector(name).eval()
    with torch.no_grad():
        outputs = net(region_with_other_noise(sigma_outside, sigma_inside))
    inside, outside = inside_and_outside(outputs["mask_logit"])
    assert inside > 0.5 > outside and inside - outside > 0.4, f"inside {inside:.3f}, outside {outside:.3f}"


@pytest.mark.parametrize(
    ("sigma_outside", "sigma_inside"), [(2.0, 8.0), (6.0, 1.0)], ids=["noisier_splice", "smoothed_region"]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_noise_level_traces_a_region_to_within_its_fine_windows_not_its_blocks(sigma_outside, sigma_inside, seed):
    """32 px blocks place a region only to within half a block; around the deviating blocks each
    pixel's own 16 px window decides (`fine_block`), and the marked region fits the true one."""
    truth = torch.zeros(HEIGHT, WIDTH, dtype=torch.bool)
    truth[REGION] = True
    image = region_with_other_noise(sigma_outside, sigma_inside, seed)

    def f1(net: NoiseLevelLocalizer) -> float:
        with torch.no_grad():
            marked = net.eval()(image)["mask_logit"][0, 0] > 0
        return 2 * (marked & truth).sum().item() / (marked.sum().item() + truth.sum().item())

    blocks_only, fine = f1(NoiseLevelLocalizer(fine_block=0)), f1(create_detector("noise_level"))
    assert fine > 0.9 and fine > blocks_only + 0.05, f"fine windows {fine:.3f}, blocks only {blocks_only:.3f}"


def test_noise_level_fine_windows_find_a_smoothed_strip_narrower_than_half_a_block():
    """A 12 px strip with less noise dilutes every 32 px block it crosses: blocks alone mark a
    third of it too little. Around the deviating blocks the pixel's own window marks it whole."""
    rng = np.random.default_rng(0)
    pixels = smooth_scene(0) + rng.normal(0, 6.0, size=(HEIGHT, WIDTH, 3))
    pixels[:, 100:112] = smooth_scene(0)[:, 100:112] + rng.normal(0, 1.0, size=(HEIGHT, 12, 3))
    truth = torch.zeros(HEIGHT, WIDTH, dtype=torch.bool)
    truth[:, 100:112] = True

    def recall(net: NoiseLevelLocalizer) -> float:
        with torch.no_grad():
            marked = net.eval()(as_input(pixels))["mask_logit"][0, 0] > 0
        return (marked & truth).sum().item() / truth.sum().item()

    assert recall(NoiseLevelLocalizer(fine_block=0)) < 0.7 and recall(create_detector("noise_level")) > 0.95


def test_noise_level_fine_windows_mark_nothing_far_from_the_deviating_blocks():
    """One noise level throughout: no block deviates, and the fine windows, noisier, add nothing."""
    rng = np.random.default_rng(0)
    image = as_input(smooth_scene(0) + rng.normal(0, 4.0, size=(HEIGHT, WIDTH, 3)))
    with torch.no_grad():
        blocks_only = NoiseLevelLocalizer(fine_block=0).eval()(image)["mask_logit"]
        fine = NoiseLevelLocalizer().eval()(image)["mask_logit"]
    assert not (blocks_only > 0).any() and not (fine > 0).any()
    assert (fine <= blocks_only).all()  # away from deviating blocks a pixel scores the lower of the two


def region_from_a_processed_donor(processing: str) -> torch.Tensor:
    """A scene with noise sigma 3 and REGION pasted from another photo with the same noise, then
    JPEG-compressed at quality 70 or upscaled 1.5 x (bilinear) before pasting."""
    import cv2

    rng = np.random.default_rng(0)
    pixels = smooth_scene(0) + rng.normal(0, 3, size=(HEIGHT, WIDTH, 3))
    donor = np.clip(np.round(smooth_scene(1) + rng.normal(0, 3, size=pixels.shape)), 0, 255).astype(np.uint8)
    if processing == "jpeg70":
        donor = cv2.imdecode(cv2.imencode(".jpg", donor, [cv2.IMWRITE_JPEG_QUALITY, 70])[1], cv2.IMREAD_COLOR)
    else:
        donor = cv2.resize(donor, None, fx=1.5, fy=1.5, interpolation=cv2.INTER_LINEAR)
    pixels[REGION] = donor[REGION]
    return as_input(pixels)


@pytest.mark.parametrize("name", TRAINING_FREE)
@pytest.mark.parametrize("processing", ["jpeg70", "upscaled"])
def test_a_region_spliced_from_a_differently_processed_donor_scores_higher_inside(name, processing):
    net = create_detector(name).eval()
    with torch.no_grad():
        outputs = net(region_from_a_processed_donor(processing))
    inside, outside = inside_and_outside(outputs["mask_logit"])
    assert inside > 0.5 > outside and inside - outside > 0.4, f"inside {inside:.3f}, outside {outside:.3f}"


@pytest.mark.parametrize("name", TRAINING_FREE)
def test_an_image_with_one_noise_level_throughout_has_a_lower_score_than_a_spliced_one(name):
    net = create_detector(name).eval()
    with torch.no_grad():
        genuine = net(region_with_other_noise(3.0, 3.0, seed=1))["logit"]
        spliced = net(region_with_other_noise(3.0, 9.0, seed=1))["logit"]
    assert spliced.item() > genuine.item()
    assert torch.sigmoid(genuine).item() < 0.5


@pytest.mark.parametrize("name", EVERY)
def test_the_map_has_the_input_size_and_the_detector_nothing_to_train(name):
    net = create_detector(name).eval()
    assert list(net.parameters()) == [] and detector_class(name).fit_without_gradients
    for height, width in [(97, 101), (64, 300)]:  # splicebuster: 16 blocks or more
        with torch.no_grad():
            outputs = net(torch.rand(2, 3, height, width))
        assert outputs["mask_logit"].shape == (2, 1, height, width)
        assert outputs["logit"].shape == (2,) and torch.isfinite(outputs["mask_logit"]).all()


# why each detector refuses an 8 x 11 image (it maps one of its `min_image_side`)
TOO_SMALL = {
    "noise_level": lambda net: f"at least {net.block // 2 + 1} px on each side .*got 8 x 11",  # half a block
    "jpeg_ghost": lambda net: f"at least {8 * net.window} px on each side .*got 8 x 11",  # a window of blocks
    "splicebuster": lambda net: f"at least 16 blocks of {net.block} px .*a 8 x 11 image has 0",  # a two-class fit
}


@pytest.mark.parametrize("name", [*EVERY, "copy_move_selfmatch"])
def test_an_image_too_small_for_the_detector_is_refused_with_the_smallest_size_or_mapped(name):
    """A detector whose statistics need more of an image refuses a smaller one with a clear error
    (which infer.py turns into the image's error row), not a confident "nothing here"; jpeg_grid and
    self-matching map an 8 x 11 image (nothing to find in it)."""
    net = create_detector(name).eval()
    small = torch.rand(1, 3, 8, 11)
    with torch.no_grad():
        if name.removesuffix("_tiny") in TOO_SMALL:
            with pytest.raises(ValueError, match=TOO_SMALL[name.removesuffix("_tiny")](net)):
                net(small)
            side = net.min_image_side
            assert net(torch.rand(1, 3, side, side))["mask_logit"].shape == (1, 1, side, side)
        else:
            outputs = net(small)
            assert outputs["mask_logit"].shape == (1, 1, 8, 11) and torch.isfinite(outputs["mask_logit"]).all()


def test_splicebuster_among_the_evidence_maps_maps_a_small_training_crop_instead():
    from detectors.evidence import build_evidence_detector

    net = build_evidence_detector("splicebuster", {})
    with torch.no_grad():
        assert torch.isfinite(net(torch.rand(1, 3, 8, 11))["mask_logit"]).all()


@pytest.mark.parametrize("name", EVERY)
def test_the_same_image_gives_the_same_map_alone_or_in_a_batch(name):
    net = create_detector(name).eval()
    image = region_with_other_noise(2.0, 8.0)
    with torch.no_grad():
        first = net(image)["mask_logit"]
        again = net(image.clone())["mask_logit"]
        batched = net(torch.cat([torch.rand_like(image), image]))["mask_logit"][1:]
    assert torch.equal(first, again)
    torch.testing.assert_close(batched, first, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["noise_level", "splicebuster", "jpeg_ghost"])
def test_infer_scores_and_maps_images_from_a_saved_checkpoint(name, tmp_path: Path):
    from infer import infer
    from tools.released import save_checkpoint

    checkpoint = save_checkpoint(create_module(name).eval(), tmp_path / f"{name}.ckpt")
    folder = tmp_path / "images"
    folder.mkdir()
    spliced = (region_with_other_noise(2.0, 8.0)[0].permute(1, 2, 0).numpy() * 255).round()
    Image.fromarray(spliced.astype(np.uint8)).save(folder / "spliced.png")
    output = tmp_path / "scores.csv"
    infer(
        compose_config(
            "infer",
            [
                f"model={checkpoint}",
                f"input={folder}",
                f"output={output}",
                "num_workers=0",
                "progress=false",
                "save_masks=true",
                "device=cpu",
            ],
        )
    )
    row = read_results(output)[0]
    assert row["status"] == "ok" and 0.0 <= row["score"] <= 1.0, row
    mask_path = Path(row["mask"]) if Path(row["mask"]).is_absolute() else output.parent / row["mask"]
    mask = np.asarray(Image.open(mask_path), dtype=np.float64) / 255
    assert mask.shape == (HEIGHT, WIDTH)
    assert mask[48:112, 72:152].mean() > mask[:24].mean() + 0.4


def test_splicebuster_export_is_refused_with_the_reason(tmp_path: Path):
    from exporting.onnx_export import ExportError, export_onnx

    with pytest.raises(ExportError, match="fits a two-class model to each image"):
        export_onnx(create_module("splicebuster_tiny"), tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


def jpeg(pixels: np.ndarray, quality: int) -> np.ndarray:
    import cv2

    encoded = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])[1]
    return cv2.imdecode(encoded, cv2.IMREAD_COLOR)


def double_compressed(first_quality: int, last_quality: int = 90) -> torch.Tensor:
    """REGION pasted (on the 8 x 8 grid) from a donor JPEG-compressed at `first_quality`, then the
    whole image saved at `last_quality`: the REGION's ghost lies at `first_quality`."""
    rng = np.random.default_rng(0)
    shape = (HEIGHT, WIDTH, 3)
    background = np.clip(np.round(smooth_scene(0) + rng.normal(0, 3, size=shape)), 0, 255)
    donor = np.clip(np.round(smooth_scene(1) + rng.normal(0, 3, size=shape)), 0, 255)
    pixels = background.astype(np.uint8)
    pixels[REGION] = jpeg(donor.astype(np.uint8), first_quality)[REGION]
    return as_input(jpeg(pixels, last_quality).astype(np.float64))


@pytest.mark.parametrize("name", ["jpeg_ghost_tiny", "jpeg_ghost"])
def test_a_region_first_compressed_at_a_lower_jpeg_quality_scores_higher_inside(name):
    net = create_detector(name).eval()
    with torch.no_grad():
        spliced = net(double_compressed(60))
        single = net(double_compressed(90))  # the donor at the image's own quality: no ghost
    inside, outside = inside_and_outside(spliced["mask_logit"])
    assert inside > 0.5 > outside and inside - outside > 0.4, f"inside {inside:.3f}, outside {outside:.3f}"
    assert spliced["logit"].item() > single["logit"].item()
    assert max(inside_and_outside(single["mask_logit"])) < 0.5
