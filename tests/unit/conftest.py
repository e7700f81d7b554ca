"""A tiny untrained NPR as .ckpt and .onnx, shared by the scoring and export tests (exporting takes seconds)."""

from __future__ import annotations

import pytest

from tests.helpers import write_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny_model"))
