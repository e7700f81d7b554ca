"""generate.py's quick AI-image set from the user's own photos: photos sharing a name are refused
(one would replace the other's crops), and a tiny photo is left without crops, not a crash."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.io import write_image
from synthesis.embedded import EmbeddedSpec, build_embedded_dataset, make_embedded_manifest


def test_two_source_photos_with_one_name_are_refused_before_anything_is_written(tmp_path):
    rng = np.random.default_rng(0)
    write_image(tmp_path / "a" / "x.jpg", rng.integers(0, 256, (120, 120, 3), dtype=np.uint8))
    write_image(tmp_path / "b" / "x.png", rng.integers(0, 256, (120, 120, 3), dtype=np.uint8))
    photos = [tmp_path / "a" / "x.jpg", tmp_path / "b" / "x.png"]
    with pytest.raises(ValueError, match="source photos sharing a name .*a/x.jpg, .*b/x.png"):
        build_embedded_dataset(tmp_path / "out", photos=photos)
    with pytest.raises(ValueError, match="source photos sharing a name"):  # generate.py's way in: stamp first
        make_embedded_manifest(tmp_path / "out", photos=photos, crop_size=48)
    assert not (tmp_path / "out").exists()  # so the corrected rerun is not refused as "made with other options"


def test_a_one_pixel_photo_gives_no_crops_and_the_others_theirs(tmp_path):
    write_image(tmp_path / "dot.png", np.zeros((1, 1, 3), np.uint8))
    write_image(tmp_path / "photo.png", np.random.default_rng(1).integers(0, 256, (100, 100, 3), dtype=np.uint8))
    rows = build_embedded_dataset(
        tmp_path / "out", EmbeddedSpec(crop_size=48), [tmp_path / "dot.png", tmp_path / "photo.png"]
    )
    assert rows and {row["category"] for row in rows} == {"photo"}
