"""A detector of pairs given images (or one of images given pairs) is told which data to choose,
before any data is made: the data module would otherwise fail on an argument it does not take."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from datamodules.records import LayoutError
from detectors.run_config import check_pair_data
from tests.helpers import compose_config

PAIRS, IMAGES = SimpleNamespace(is_pair_detector=True), SimpleNamespace()


@pytest.mark.parametrize("data", ["duplication_pairs", "duplication_pair_images"])
def test_pair_detectors_take_the_pair_data_configs_and_image_detectors_are_refused_them(data):
    config = compose_config("train", [f"data={data}"]).data
    check_pair_data(config, PAIRS)
    with pytest.raises(LayoutError, match="this detector scores single images"):
        check_pair_data(config, IMAGES)


def test_a_pair_detector_on_the_default_image_data_is_told_which_data_to_give():
    config = compose_config("train", ["detector=dup_sift_tiny"]).data
    with pytest.raises(LayoutError, match="data=duplication_pairs \\(dup_sift\\) or data=duplication_pair_images"):
        check_pair_data(config, PAIRS)
    check_pair_data(config, IMAGES)


@pytest.mark.parametrize(
    "detector, data, other",
    [
        ("dup_sift_tiny", "duplication_pairs", "duplication_pair_images"),
        ("pairnet_tiny", "duplication_pair_images", "duplication_pairs"),
    ],
)
def test_each_pair_detector_is_told_which_of_the_two_pair_configs_it_trains_on(detector, data, other):
    from detectors.registry import create_detector

    net = create_detector(detector)
    check_pair_data(compose_config("train", [f"data={data}"]).data, net)
    with pytest.raises(LayoutError, match=f"trains on data={data}, not data={other}"):
        check_pair_data(compose_config("train", [f"data={other}"]).data, net)


@pytest.mark.parametrize("data", ["manifest", "folder", "layout"])
def test_a_localizer_on_data_without_masks_is_told_to_use_the_localization_data(data):
    """It ended in a KeyError 'mask' in its first validation step (training-free ones too)."""
    from detectors.run_config import check_localizer_data

    localizer = SimpleNamespace(learns_from_masks=True)
    with pytest.raises(LayoutError, match="a localizer trains on images with masks: data=localization"):
        check_localizer_data(compose_config("train", [f"data={data}"]).data, localizer)
    for fine in ("localization", "embedded", "embedded_localization"):  # embedded: its `localizers` variant
        check_localizer_data(compose_config("train", [f"data={fine}"]).data, localizer)
    check_localizer_data(compose_config("train", [f"data={data}"]).data, SimpleNamespace(learns_from_masks=False))


def test_trufors_fingerprint_phase_trains_on_processing_chains_without_masks():
    """Phase 1 learns the noise fingerprint from chains of processing (data=chains): no mask is
    needed, and its recipe must not be refused as a localizer without masks (phases 2 and 3 are)."""
    from detectors.build import build_detector
    from detectors.run_config import check_localizer_data

    cfg = compose_config("train", ["experiment=trufor_fingerprint", "detector=trufor_tiny"])
    net = build_detector(cfg.detector.net)
    assert net.is_localizer and not net.learns_from_masks
    check_localizer_data(cfg.data, net)
    net.set_phase("localize")
    assert net.learns_from_masks
    with pytest.raises(LayoutError, match="a localizer trains on images with masks"):
        check_localizer_data(cfg.data, net)
