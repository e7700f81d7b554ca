"""jpeg_grid (docs/training_free.md): a region JPEG-compressed on another 8 x 8 grid than the image's
own, or in an image that was never compressed, is marked; a genuine photograph is not, whatever its
JPEG history (saved once at any quality, cropped off its grid and saved again)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image
from skimage import data

import imageops
from detectors.jpeg_grid import JpegGridLocalizer, offsets_beside
from detectors.registry import create_detector, create_module
from inference.writer import read_results
from synthesis.genuine_kinds import GENUINE_KINDS
from tests.helpers import compose_config

SIDE = 256
REGION = (slice(64, 176), slice(80, 200))  # 112 x 120 px, about a fifth of the frame


def photo(name: str) -> np.ndarray:
    """A bundled photograph shrunk by area averaging to SIDE x SIDE: no JPEG grid is left in it."""
    image = getattr(data, name)()
    image = np.repeat(image[..., None], 3, axis=2) if image.ndim == 2 else image[..., :3]
    return cv2.resize(image, (SIDE, SIDE), interpolation=cv2.INTER_AREA)


def pasted(host: np.ndarray, quality: int, shift: tuple[int, int], region=REGION) -> tuple[np.ndarray, np.ndarray]:
    """`region` of `host` replaced by a JPEG (at `quality`) of another photo, whose grid lands `shift`
    (rows, columns) px off the host's; the image is kept as PNG. Returns the image and the mask."""
    donor = imageops.jpeg(photo("chelsea"), quality)
    (dy, dx), (rows, cols) = shift, region
    image = host.copy()
    image[region] = donor[rows.start - dy : rows.stop - dy, cols.start - dx : cols.stop - dx]
    mask = np.zeros(host.shape[:2], bool)
    mask[region] = True
    return image, mask


def marked(image: np.ndarray, name: str = "jpeg_grid") -> np.ndarray:
    net = create_detector(name).eval()
    with torch.no_grad():
        logit = net(torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float() / 255)["mask_logit"]
    return logit[0, 0].numpy() > 0


def f1(prediction: np.ndarray, truth: np.ndarray) -> float:
    return 2 * (prediction & truth).sum() / (prediction.sum() + truth.sum())


def well_outside(mask: np.ndarray, margin: int = 24) -> np.ndarray:
    """Pixels more than `margin` px from the region (the map's windows blur its outline by less)."""
    return cv2.dilate(mask.astype(np.uint8), np.ones((2 * margin + 1, 2 * margin + 1), np.uint8)) == 0


@pytest.mark.parametrize("quality", [60, 80, 90])
@pytest.mark.parametrize("shift", [(3, 5), (0, 3), (6, 0)])
def test_a_jpeg_region_pasted_into_a_photo_never_compressed_is_marked(quality, shift):
    image, mask = pasted(photo("astronaut"), quality, shift)
    prediction = marked(image)
    assert f1(prediction, mask) > 0.8 and prediction[well_outside(mask)].mean() < 0.01


@pytest.mark.parametrize("shift", [(4, 4), (0, 4), (3, 1)])
def test_a_jpeg_region_pasted_off_the_grid_of_a_jpeg_photo_is_marked_and_the_photo_is_not(shift):
    """The host's own grid lifts every offset in line with it; a donor in line ((0, 4): the same rows)
    is still found, above what the host's grid explains."""
    image, mask = pasted(imageops.jpeg(photo("astronaut"), 85), 70, shift)
    prediction = marked(image)
    assert f1(prediction, mask) > 0.8 and prediction[well_outside(mask)].mean() < 0.01


def test_a_region_covering_most_of_the_frame_is_not_taken_for_the_images_own_grid():
    """A JPEG grid is the image's own only where nearly every textured window shows it; a donor over
    60 % of a photo never compressed leaves the rest without any grid."""
    image, mask = pasted(photo("astronaut"), 75, (2, 5), region=(slice(16, 240), slice(24, 200)))
    assert mask.mean() > 0.6
    assert f1(marked(image), mask) > 0.8


def off_grid(image: np.ndarray) -> np.ndarray:
    """Saved at JPEG 90, then cropped 3 rows and 5 columns off its grid."""
    return np.ascontiguousarray(imageops.jpeg(image, 90)[3:, 5:])


HISTORIES = {
    "png": lambda image: image,
    "jpeg75": lambda image: imageops.jpeg(image, 75),
    "jpeg90": lambda image: imageops.jpeg(image, 90),
    "jpeg95": lambda image: imageops.jpeg(image, 95),
    "jpeg90_cropped_png": off_grid,
    "jpeg90_cropped_jpeg95": lambda image: imageops.jpeg(off_grid(image), 95),
}


@pytest.mark.parametrize("history", HISTORIES)
@pytest.mark.parametrize("name", ["astronaut", "coffee", "camera"])
def test_a_genuine_photograph_is_not_marked_whatever_its_jpeg_history(history, name):
    assert marked(HISTORIES[history](photo(name))).mean() < 0.01


@pytest.mark.parametrize(
    "kind", ["chart", "document", "histology", "gel", "blot", "fluorescence", "electron_micrograph"]
)
def test_genuine_figure_panels_are_not_marked(kind):
    """Charts and documents (text, rulings, flat fills), micrographs and gels, saved as their makers
    save them (PNG, or JPEG at 75-95) and cropped off the grid: text and lines lift whole rows or
    columns of offsets, which no grid of their own does."""
    for seed in range(100, 106):
        panel = GENUINE_KINDS[kind](np.random.default_rng(seed))
        pixels = panel.pixels if panel.codec == "png" else imageops.jpeg(panel.pixels, panel.quality)
        assert marked(np.ascontiguousarray(pixels[3:, 5:])).mean() < 0.01, (kind, seed)


def test_the_tiny_variant_finds_a_pasted_jpeg_region_in_its_64_px_crop():
    image, mask = pasted(photo("astronaut"), 70, (3, 5))
    crop = (slice(40, 104), slice(56, 120))  # the region's corner: 39 % of the crop
    net = create_detector("jpeg_grid_tiny").eval()
    pixels = torch.from_numpy(np.ascontiguousarray(image[crop])).permute(2, 0, 1)[None].float() / 255
    with torch.no_grad():
        prediction = net(pixels)["mask_logit"][0, 0].numpy() > 0
    assert f1(prediction, mask[crop]) > 0.7


def test_offsets_beside_differ_by_at_most_one_pixel_on_each_axis():
    beside = offsets_beside()
    assert torch.equal(beside, beside.T) and beside.diagonal().all() and (beside.sum(1) == 9).all()

    def offset(dy: int, dx: int) -> int:
        return 8 * dy + dx

    assert beside[offset(0, 0), offset(7, 1)] and beside[offset(2, 2), offset(3, 3)]  # cyclic: 7 is beside 0
    assert not beside[offset(0, 0), offset(0, 2)] and not beside[offset(0, 0), offset(4, 0)]


def test_a_grid_stands_above_its_row_and_column_of_offsets_and_lines_do_not():
    """A JPEG grid lifts its own offset most and those in line with it less; lines along one axis
    lift a whole row of offsets alike: only the first is left standing."""
    jpeg_like = torch.full((1, 64, 1, 1), 0.5)
    jpeg_like.view(8, 8)[2, :] = 0.65
    jpeg_like.view(8, 8)[:, 5] = 0.65
    jpeg_like.view(8, 8)[2, 5] = 0.9
    lines = torch.full((1, 64, 1, 1), 0.5)
    lines.view(8, 8)[2, :] = 0.9
    height = JpegGridLocalizer.above_rows_and_columns(torch.cat([jpeg_like, lines]))
    assert height[0].argmax() == 8 * 2 + 5 and height[0].max() > 0.2
    assert height[1].max() < 1e-6


def test_infer_maps_a_pasted_jpeg_region_from_a_saved_checkpoint(tmp_path: Path):
    from infer import infer
    from tools.released import save_checkpoint

    checkpoint = save_checkpoint(create_module("jpeg_grid").eval(), tmp_path / "jpeg_grid.ckpt")
    folder = tmp_path / "images"
    folder.mkdir()
    image, mask = pasted(photo("astronaut"), 70, (3, 5))
    Image.fromarray(image).save(folder / "spliced.png")
    Image.fromarray(photo("coffee")).save(folder / "genuine.png")
    output = tmp_path / "scores.csv"
    overrides = [f"model={checkpoint}", f"input={folder}", f"output={output}", "num_workers=0", "progress=false"]
    infer(compose_config("infer", [*overrides, "save_masks=true", "device=cpu"]))
    rows = {Path(row["path"]).name: row for row in read_results(output)}
    assert rows["spliced.png"]["score"] > rows["genuine.png"]["score"]
    saved = Path(rows["spliced.png"]["mask"])
    saved = saved if saved.is_absolute() else output.parent / saved
    assert f1(np.asarray(Image.open(saved)) > 127, mask) > 0.8


@pytest.mark.slow
@pytest.mark.ci  # in CI's slow phase: the export unrolls 64 grid offsets (about a minute)
def test_the_onnx_export_maps_a_pasted_jpeg_region_as_pytorch_does(tmp_path: Path):
    import onnxruntime as ort

    from exporting.onnx_export import export_onnx

    module = create_module("jpeg_grid").eval()
    report = export_onnx(module, tmp_path / "jpeg_grid.onnx")  # refuses unless parity holds on its own checks
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    image, mask = pasted(imageops.jpeg(photo("astronaut"), 85), 70, (0, 4))
    pixels = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 255
    onnx_map = session.run(None, {"image": pixels.numpy()})[1][0, 0]
    with torch.no_grad():
        torch_map = torch.sigmoid(module.net(pixels)["mask_logit"])[0, 0].numpy()
    assert ((onnx_map > 0.5) == (torch_map > 0.5)).mean() > 0.999
    assert f1(onnx_map > 0.5, mask) > 0.8
    # an image under two blocks a side, which PyTorch pads, is refused by the ONNX path with the reason
    from inference.runtime import OnnxRuntime

    with pytest.raises(ValueError, match="jpeg_grid needs an image of at least 16 px on each side; got 12 x 40"):
        OnnxRuntime(report.path, device="cpu").predict(np.random.rand(1, 3, 12, 40))
