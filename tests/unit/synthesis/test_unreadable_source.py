"""One unreadable image among the sources is skipped with its reason; the set is made from the rest."""

from __future__ import annotations

import logging

import numpy as np

from datamodules.io import write_image
from synthesis.dataset import DatasetSpec, make_generated_manifest


def test_a_corrupt_source_photo_is_skipped_with_a_warning_and_the_others_are_generated(tmp_path, caplog):
    rng = np.random.default_rng(0)
    photos = []
    for name in ("a", "b"):
        photos.append(tmp_path / "src" / f"{name}.png")
        write_image(photos[-1], rng.integers(0, 256, (96, 128, 3), dtype=np.uint8))
    corrupt = tmp_path / "src" / "broken.jpg"
    corrupt.write_bytes(b"not an image")
    spec = DatasetSpec(kind="forgery", ops={"copy_move": 1.0}, crops_per_photo=0, max_side=128, min_panel_side=64)
    with caplog.at_level(logging.WARNING):
        manifest, summary = make_generated_manifest(tmp_path / "out", spec, photos=[*photos, corrupt], progress=False)
    assert "skipped a source image" in caplog.text and "broken.jpg" in caplog.text
    genuine = [line for line in manifest.read_text().splitlines()[1:] if ",0," in line]
    assert len(genuine) == 2 and summary["panels"] == 2


def test_the_quick_set_skips_a_corrupt_source_photo_too(tmp_path, caplog):
    from synthesis.embedded import make_embedded_manifest

    photo = tmp_path / "src" / "a.png"
    write_image(photo, np.random.default_rng(0).integers(0, 256, (96, 96, 3), dtype=np.uint8))
    (tmp_path / "src" / "broken.jpg").write_bytes(b"not an image")
    with caplog.at_level(logging.WARNING):
        manifest = make_embedded_manifest(
            tmp_path / "out", photos=[photo, tmp_path / "src" / "broken.jpg"], crop_size=48, scales=(1.0,)
        )
    assert "broken.jpg" in caplog.text
    assert {line.split(",")[4] for line in manifest.read_text().splitlines()[1:]} == {"a"}


def test_a_source_folder_that_does_not_exist_is_named_as_missing_not_as_empty(tmp_path):
    import pytest

    from datamodules.records import LayoutError
    from generate import find_photos

    with pytest.raises(LayoutError, match="does not exist or is not a folder"):
        find_photos(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(LayoutError, match="no images found"):
        find_photos(str(tmp_path / "empty"))
