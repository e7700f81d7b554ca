"""Which tile settings change a model's scores: a classifier's tiles are its input size, reduced by
`tile_reduce`; a localizer's are `tile_size` overlapping by `tile_overlap`, its score their highest.
A calibration and a resumed run are compared on those alone (a classifier calibrated with tiles
warned, and a resume was refused, over a tile_size it never uses)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from datamodules.preprocess import Preprocess
from infer import InferenceFailed, infer, scoring_as_asked
from inference.runtime import OnnxRuntime
from inference.tiling import TiledLocalizer, scoring_tiles
from tests.helpers import ROOT, compose_config, write_images

CALIBRATED = {"tiles": True, "tile_reduce": "max", "tile_size": None, "tile_overlap": 0.25}


def localizer(calibrated=CALIBRATED):
    crop = Preprocess(size=64, mode="center_crop")
    return SimpleNamespace(
        name="loc", threshold=0.5, is_localizer=True, preprocess=crop.whole(), trained_preprocess=crop,
        calibrated_tiles=calibrated,
    )  # fmt: skip


def test_a_classifier_is_compared_on_tiles_and_tile_reduce_a_localizer_on_tiles_size_and_overlap():
    classifier = SimpleNamespace(is_localizer=False)
    assert scoring_tiles({**CALIBRATED, "tile_size": 96, "tile_overlap": 0.5}, classifier) == {
        "tiles": True,
        "tile_reduce": "max",
    }
    assert scoring_tiles({**CALIBRATED, "tile_reduce": "mean"}, localizer()) == {
        "tiles": True,
        "tile_size": 64,  # none given: the training crop, as the tiles are cut
        "tile_overlap": 0.25,
    }
    assert scoring_tiles({"tiles": False, "tile_reduce": "max", "tile_size": 96}, localizer()) == {"tiles": False}


def warnings_of(runtime, caplog, *options):
    caplog.clear()
    cfg = OmegaConf.merge(OmegaConf.load(ROOT / "configs" / "infer.yaml"), OmegaConf.from_dotlist(list(options)))
    with caplog.at_level(logging.WARNING, logger="infer"):
        scoring_as_asked(cfg, runtime)
    return [r.getMessage() for r in caplog.records if "calibrated on scores made" in r.getMessage()]


def test_a_classifier_calibrated_on_tiles_is_not_warned_of_tile_size_or_overlap_it_never_uses(tiny_model, caplog):
    runtime = OnnxRuntime(tiny_model["onnx"], "cpu")
    runtime.calibrated_tiles = CALIBRATED
    assert warnings_of(runtime, caplog, "tiles=true", "tile_reduce=max", "tile_size=96", "tile_overlap=0.5") == []
    said = warnings_of(runtime, caplog, "tiles=true", "tile_reduce=mean")
    assert said and "made with tiles (tile_reduce=max), this run scores with tiles (tile_reduce=mean)" in said[0]


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        (("tiles=true", "tile_reduce=mean"), False),  # its score is the highest tile's whatever the reduction
        (("tiles=true", "tile_size=64"), False),  # the training crop, named
        (("tiles=true", "tile_size=48"), True),
        (("tiles=true", "tile_overlap=0.5"), True),
        (("tiles=true", "tile_overlap=0.255"), False),  # 16.32 px of 64: cut as 16, as 0.25 is
        (("tiles=true", "tile_overlap=0.26"), True),  # 16.64 px: cut as 17
    ],
)
def test_a_localizer_is_warned_only_of_the_tile_settings_it_scores_by(caplog, options, warned):
    assert bool(warnings_of(localizer(), caplog, *options)) is warned


def test_a_resume_is_refused_only_over_tile_settings_that_change_the_scores(tiny_model, tmp_path):
    write_images(tmp_path / "in", [(40, 50), (36, 70)])
    output = tmp_path / "scores.csv"

    def run(*options):
        base = [f"model={tiny_model['onnx']}", f"input={tmp_path / 'in'}", f"output={output}", "progress=false"]
        return infer(compose_config("infer", [*base, *options]))

    run("tiles=false", "tile_reduce=max")
    run("resume=true", "tiles=false", "tile_reduce=mean", "tile_size=96")  # no tiles: their settings unused
    run("tiles=true", "tile_reduce=max")
    run("resume=true", "tiles=true", "tile_reduce=max", "tile_size=96", "tile_overlap=0.5")  # a classifier's
    with pytest.raises(InferenceFailed, match="scored_with .*would mix two runs' decisions"):
        run("resume=true", "tiles=true", "tile_reduce=mean")


def test_overlaps_that_come_to_the_same_pixels_are_one_setting_and_others_are_not():
    at = {fraction: scoring_tiles({**CALIBRATED, "tile_overlap": fraction}, localizer()) for fraction in (0.25, 0.251)}
    assert at[0.25] == at[0.251] == {"tiles": True, "tile_size": 64, "tile_overlap": 0.25}  # 16 px of 64
    assert scoring_tiles({**CALIBRATED, "tile_overlap": 0.3}, localizer())["tile_overlap"] == 19 / 64
    tiles = {**CALIBRATED, "tile_size": 36}
    assert scoring_tiles({**tiles, "tile_overlap": 0.125}, localizer()) == scoring_tiles(
        {**tiles, "tile_overlap": 0.11}, localizer()
    )  # 4.5 and 3.96 px: both cut as 4
    assert TiledLocalizer(localizer(), 36, 0.125).overlap == TiledLocalizer(localizer(), 36, 0.11).overlap == 4
