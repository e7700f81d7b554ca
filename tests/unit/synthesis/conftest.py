"""Fixtures of the diffusers tests: a tiny random-weight pipeline on disk and a folder of small photos."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.diffusers_helpers import save_tiny_pipeline, write_small_photos


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """A Stable Diffusion pipeline of tiny random parts, saved as a downloaded one is."""
    return save_tiny_pipeline(tmp_path_factory.mktemp("models") / "tiny-sd")


@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory) -> Path:
    """Three bundled photographs, small: a source folder a tiny pipeline is quick on."""
    return write_small_photos(tmp_path_factory.mktemp("photos"))
