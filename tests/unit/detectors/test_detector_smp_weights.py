"""smp encoders load ImageNet-style weights from local files only, and say how to provide them."""

from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import save_file

from detectors.blocks.weights import MissingWeightsError, architecture_only, load_smp_encoder


def test_local_weights_file_is_loaded_exactly(tmp_path):
    source = load_smp_encoder("resnet18", pretrained=None)
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    save_file(state, str(tmp_path / "resnet18.safetensors"))
    loaded = load_smp_encoder("resnet18", pretrained=str(tmp_path / "resnet18.safetensors"))
    for key, value in loaded.state_dict().items():
        torch.testing.assert_close(value, state[key])
    assert len(loaded(torch.rand(1, 3, 64, 64))) == 6  # input + five stages


def test_missing_weights_are_one_clear_error_not_random_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MissingWeightsError, match="Provide them by one of") as error:
        load_smp_encoder("resnet18", pretrained="imagenet", cache_dir=str(tmp_path))
    assert "or null where the detector can start from random weights (logged as such)" in str(error.value)
    with pytest.raises(MissingWeightsError, match="no weights tagged"):
        load_smp_encoder("resnet18", pretrained="no-such-tag")


def test_random_initialization_is_logged(caplog):
    with caplog.at_level(logging.WARNING):
        load_smp_encoder("resnet18", pretrained=None)
        with architecture_only():
            load_smp_encoder("resnet18", pretrained="imagenet")
    messages = " ".join(caplog.messages)
    assert "random initialization (pretrained: null)" in messages
    assert "weights come from the checkpoint" in messages
