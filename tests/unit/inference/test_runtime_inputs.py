"""What `predict` takes from library callers: float images in [0, 1] of any float dtype, never 8-bit pixels."""

from __future__ import annotations

import numpy as np
import pytest

from inference.runtime import load_runtime


@pytest.mark.parametrize("kind", ["ckpt", "onnx"])
def test_float64_and_float16_images_score_as_float32_does(tiny_model, kind):
    runtime = load_runtime(tiny_model[kind], device="cpu")
    images = np.random.default_rng(0).random((2, 3, 32, 32)).astype(np.float32)
    expected = runtime.predict(images)["score"]
    np.testing.assert_allclose(runtime.predict(images.astype(np.float64))["score"], expected, rtol=1e-6)
    half = images.astype(np.float16)
    np.testing.assert_allclose(runtime.predict(half)["score"], runtime.predict(half.astype(np.float32))["score"])


@pytest.mark.parametrize("kind", ["ckpt", "onnx"])
def test_integer_images_are_refused_saying_predict_takes_floats(tiny_model, kind):
    import torch

    runtime = load_runtime(tiny_model[kind], device="cpu")
    pixels = np.random.default_rng(0).integers(0, 256, (1, 3, 32, 32), dtype=np.uint8)
    for images in (pixels, torch.from_numpy(pixels)):
        with pytest.raises(TypeError, match=r"predict takes N x 3 x H x W floats in \[0, 1\], got .*uint8"):
            runtime.predict(images)
