"""How an entry point's task ends on a failure the user can fix: one line naming what to do, status 2."""

from __future__ import annotations

import logging

import pytest
from omegaconf import OmegaConf

from inference.cli import EXPECTED_FAILURE, expected_failures


def test_a_required_setting_left_out_is_named_with_how_to_give_it_and_exits_2(caplog):
    @expected_failures(LookupError)
    def task(cfg):
        return cfg.model  # `model: ???` in the entry point's config, not given

    with caplog.at_level(logging.ERROR, logger="toolkit"), pytest.raises(SystemExit) as stop:
        task(OmegaConf.create({"model": "???", "input": "photos/"}))
    assert stop.value.code == EXPECTED_FAILURE
    assert "model is required: give it on the command line (model=...)" in caplog.text


def test_an_unexpected_error_still_propagates():
    @expected_failures(LookupError)
    def task(cfg):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        task(OmegaConf.create({}))


def test_an_unknown_report_kind_is_refused_before_the_model_is_read(tmp_path):
    from infer import InferenceFailed, infer
    from tests.helpers import compose_config

    cfg = compose_config("infer", [f"model={tmp_path / 'absent.ckpt'}", f"input={tmp_path}", "report=htm"])
    with pytest.raises(InferenceFailed, match="report must be none or html, got 'htm'"):
        infer(cfg)


def test_a_mistyped_key_is_answered_with_the_closest_setting_of_the_composed_config():
    from inference.cli import misspelled_keys

    assert misspelled_keys("infer", ["model=m.ckpt", "inputs=photos/"]) == [
        "'inputs' is not a setting; did you mean input=photos/?"
    ]
    # a group choice changes which keys exist: the detector's own settings are looked up in it
    assert misspelled_keys("train", ["detector=seg_tiny", "detector.net.encoder_nme=x"]) == [
        "'detector.net.encoder_nme' is not a setting; did you mean detector.net.encoder=x?"
    ]
    assert misspelled_keys("train", ["data.batch_size=3", "+extra=1", "zzzz=1"]) == []
