"""read_image: every odd file kind becomes upright 8-bit RGB, or an ImageReadError with a reason."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from datamodules.io import ImageReadError, read_image, read_mask, write_image

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, (20, 30, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    "suffix,options",
    [(".png", {}), (".jpg", {"quality": 95}), (".webp", {"lossless": True}), (".bmp", {}), (".tiff", {})],
)
def test_common_formats_decode_to_rgb(tmp_path, suffix, options):
    path = tmp_path / f"image{suffix}"
    Image.fromarray(RGB).save(path, **options)
    image = read_image(path)
    assert image.shape == (20, 30, 3) and image.dtype == np.uint8
    if suffix != ".jpg":
        np.testing.assert_array_equal(image, RGB)


def test_exif_orientation_is_applied(tmp_path):
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    Image.fromarray(RGB).save(path, exif=exif, quality=95)
    assert read_image(path).shape == (30, 20, 3)


@pytest.mark.parametrize("mode", ["L", "P", "RGBA", "LA", "CMYK", "1"])
def test_modes_become_rgb(tmp_path, mode):
    path = tmp_path / ("image.jpg" if mode == "CMYK" else "image.png")
    Image.fromarray(RGB).convert(mode).save(path)
    image = read_image(path)
    assert image.shape == (20, 30, 3) and image.dtype == np.uint8


def test_transparent_pixels_become_white(tmp_path):
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 3] = 0
    Image.fromarray(rgba, "RGBA").save(tmp_path / "clear.png")
    assert (read_image(tmp_path / "clear.png") == 255).all()


@pytest.mark.parametrize("suffix", [".png", ".tiff"])
def test_16_bit_images_are_rescaled_not_clipped(tmp_path, suffix):
    values = np.linspace(0, 65535, 64, dtype=np.uint16).reshape(8, 8)
    path = tmp_path / f"deep{suffix}"
    Image.fromarray(values).save(path)
    image = read_image(path)
    assert image.shape == (8, 8, 3)
    assert image.min() == 0 and image.max() == 255
    assert np.all(np.diff(image[..., 0].ravel().astype(int)) >= 0)  # order preserved


@pytest.mark.parametrize("bits", [10, 12, 14])
def test_a_micrograph_of_fewer_bits_in_a_16_bit_file_is_read_at_its_own_depth(tmp_path, bits):
    """A 12-bit camera's 0..4095 stored in a 16-bit PNG: read as 0..255, not as 0..16 (nearly black)."""
    values = np.linspace(0, 2**bits - 1, 64).astype(np.uint16).reshape(8, 8)
    Image.fromarray(values).save(tmp_path / "micrograph.png")
    image = read_image(tmp_path / "micrograph.png")
    assert image.min() == 0 and image.max() == 255


def _colour_file(path, pixels, orientation=None):
    """A 16-bit colour PNG or TIFF as cameras and microscopes write them (Pillow cannot write one);
    a PNG may carry an EXIF orientation (an eXIf chunk before the image data)."""
    import struct
    import zlib

    import cv2

    ok, encoded = cv2.imencode(path.suffix, pixels[..., [2, 1, 0, 3][: pixels.shape[2]]])
    data = encoded.tobytes()
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        payload = exif.tobytes().removeprefix(b"Exif\x00\x00")
        chunk = struct.pack(">I", len(payload)) + b"eXIf" + payload + struct.pack(">I", zlib.crc32(b"eXIf" + payload))
        at = data.index(b"IDAT") - 4
        data = data[:at] + chunk + data[at:]
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("suffix", "channels"), [(".png", 3), (".tiff", 3), (".png", 4)])
def test_a_12_bit_colour_micrograph_in_a_16_bit_file_is_read_at_its_own_depth(tmp_path, suffix, channels):
    """Pillow keeps the high byte of 16-bit colour files: 0..4095 was read as 0..15 (nearly black)."""
    pixels = np.random.default_rng(channels).integers(0, 4096, (6, 9, channels)).astype(np.uint16)
    if channels == 4:
        pixels[..., 3] = 65535
    image = read_image(_colour_file(tmp_path / f"colour{suffix}", pixels))
    np.testing.assert_array_equal(image, np.rint(pixels[..., :3] / 4095 * 255).astype(np.uint8))


def test_a_16_bit_colour_file_is_turned_upright_by_its_exif_orientation_as_an_8_bit_one(tmp_path):
    pixels = np.random.default_rng(7).integers(0, 4096, (6, 9, 3)).astype(np.uint16)
    eight_bit = Image.fromarray(np.rint(pixels / 4095 * 255).astype(np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6
    eight_bit.save(tmp_path / "eight.png", exif=exif)
    turned = read_image(_colour_file(tmp_path / "wide.png", pixels, orientation=6))
    assert turned.shape == (9, 6, 3)
    np.testing.assert_array_equal(turned, read_image(tmp_path / "eight.png"))


def test_truncated_file_is_an_error_with_reason(tmp_path):
    path = tmp_path / "cut.jpg"
    Image.fromarray(RGB).save(path, quality=95)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageReadError, match="truncated"):
        read_image(path)


def test_corrupt_and_missing_files_are_errors(tmp_path):
    (tmp_path / "noise.png").write_bytes(b"not an image at all")
    with pytest.raises(ImageReadError, match="not a recognised image"):
        read_image(tmp_path / "noise.png")
    with pytest.raises(ImageReadError, match="file not found"):
        read_image(tmp_path / "absent.png")


def test_decompression_bomb_is_refused_before_decoding(tmp_path):
    path = tmp_path / "big.png"
    Image.new("RGB", (400, 300)).save(path)
    with pytest.raises(ImageReadError, match="exceeds the limit"):
        read_image(path, max_pixels=100_000)
    assert read_image(path, max_pixels=120_000).shape == (300, 400, 3)


def test_write_image_round_trips_and_read_mask_binarizes(tmp_path):
    mask = np.zeros((6, 6), np.uint8)
    mask[2:4, 1:5] = 255
    write_image(tmp_path / "sub" / "mask.png", mask)
    np.testing.assert_array_equal(read_mask(tmp_path / "sub" / "mask.png"), mask // 255)
    assert not list((tmp_path / "sub").glob(".*tmp"))


SHAPE = np.zeros((8, 10), bool)
SHAPE[2:5, 3:8] = True


def _stored_masks():
    """The same manipulated region as datasets and editors store it."""
    grey, transparent_white = SHAPE.astype(np.uint8), np.full((8, 10, 4), 255, np.uint8)
    transparent_white[..., 3] = grey * 255
    black_layer = np.zeros((8, 10, 4), np.uint8)
    black_layer[SHAPE] = 255
    grey_alpha = np.stack([grey * 255, np.full((8, 10), 255, np.uint8)], axis=-1)
    return {
        "0/255 grey": Image.fromarray(grey * 255),
        "0/1 grey": Image.fromarray(grey),
        "0/1 in 16 bits": Image.fromarray(grey.astype(np.uint16)),
        "0/65535": Image.fromarray(grey.astype(np.uint16) * 65535),
        "white shape on a transparent layer": Image.fromarray(black_layer),
        "white layer, transparent outside the shape": Image.fromarray(transparent_white),
        "opaque grey + alpha": Image.fromarray(grey_alpha),
        "bilevel": Image.fromarray(SHAPE).convert("1"),
    }


@pytest.mark.parametrize("kind", list(_stored_masks()))
def test_read_mask_finds_the_manipulated_region_however_it_is_stored(tmp_path, kind):
    """0/1 masks were read as empty, masks on a transparent layer as wholly manipulated."""
    path = tmp_path / "mask.png"
    _stored_masks()[kind].save(path)
    np.testing.assert_array_equal(read_mask(path), SHAPE.astype(np.uint8))
