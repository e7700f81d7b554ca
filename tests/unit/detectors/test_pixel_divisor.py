"""`preprocess.pixel_divisor`: a network sees 8-bit pixels divided by what its weights expect.

Loaders always give 8-bit / 255; TruFor's published weights were trained and are run by their
authors on 8-bit / 256. The golden test (tests/integration/test_golden_localizers.py) checks the
published layout end to end; these pin the contract itself.
"""

from __future__ import annotations

import pytest
import torch

from datamodules.preprocess import Preprocess
from detectors.build import build_detector
from detectors.registry import net_config


def test_the_divisor_is_part_of_the_recorded_preprocessing_and_must_be_positive():
    config = Preprocess(size=64, pixel_divisor=256)
    assert config.to_dict()["pixel_divisor"] == 256.0
    assert Preprocess.from_config(config.to_dict()) == config
    assert Preprocess().pixel_divisor == 255.0
    with pytest.raises(ValueError, match="pixel_divisor"):
        Preprocess(pixel_divisor=0)


def test_trufor_with_divisor_256_sees_the_pixels_its_authors_loader_gives():
    torch.manual_seed(0)
    config = {**net_config("trufor_tiny"), "preprocess": {"size": 64, "pixel_divisor": 256}}
    published_scale = build_detector(config).eval()
    loader_scale = build_detector({**config, "preprocess": {"size": 64}}).eval()
    loader_scale.load_state_dict(published_scale.state_dict())
    pixels = torch.randint(0, 256, (1, 3, 37, 45)).float()
    with torch.no_grad():
        ours = published_scale(pixels / 255)
        authors = loader_scale(pixels / 256)
        unscaled = loader_scale(pixels / 255)
    for key in ("mask_logit", "confidence_logit", "logit", "fingerprint"):
        assert torch.allclose(ours[key], authors[key], atol=1e-5), key
    assert not torch.allclose(ours["fingerprint"], unscaled["fingerprint"], atol=1e-4)


def test_a_detector_that_does_not_rescale_refuses_another_divisor():
    config = {**net_config("dct_tiny"), "preprocess": {"size": 32, "pixel_divisor": 256}}
    with pytest.raises(ValueError, match="pixel_divisor 256"):
        build_detector(config)
