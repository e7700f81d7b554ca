"""Shared fixtures: a small generated dataset and composed train configs writing into tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

from tests.helpers import prepare_train_config, small_train_overrides


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist worker is one of as many processes as there are cores: torch's own threads on
    top oversubscribe them, and its waiting threads then cost far more than they give (the JPEG
    splicing benchmark's scoring beside one busy core: 72 s on 2 threads, 5.7 s on 1). The scripts a
    test starts (train.py, infer.py) inherit it, so they compute what the test computes in-process."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    """~160 images (64 px crops of the bundled photographs and their re-rendered fakes)."""
    from synthesis.embedded import make_embedded_manifest

    output = tmp_path_factory.mktemp("small_dataset")
    return make_embedded_manifest(output, seed=0, crop_size=64, scales=(0.5,), max_crops_per_scale=4)


@pytest.fixture
def train_config(tmp_path, small_dataset):
    """A factory: the real train config on the small dataset, run directory in tmp_path."""
    yield lambda *overrides: prepare_train_config([*small_train_overrides(small_dataset), *overrides], tmp_path / "run")
    GlobalHydra.instance().clear()


@pytest.fixture
def one_thread():
    """Torch on one thread for the test: tiny convolutions on 2 shared cores only lose to contention."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


from tests.browser_helpers import browser  # noqa: E402, F401 - the headless-Chromium fixture, for every test file
