"""Duplication pairs: operation sets match what was done, shared-content masks line up, per seed."""

import itertools

import cv2
import numpy as np
import pytest
from skimage import data

from synthesis.duplication import (
    GEOMETRIC,
    PARAMETERS,
    apply_geometric,
    apply_parameter,
    cmo_categories,
    global_duplication,
    local_duplication,
)

PANEL = data.immunohistochemistry()[:400, :440].copy()  # stained micrograph, > 350 x 350


@pytest.mark.parametrize("geo", GEOMETRIC)
def test_global_geometry_is_exact_and_labelled(geo):
    pair = global_duplication(PANEL, np.random.default_rng(0), geometric=geo, parameters=[])
    assert pair.operations == (geo,) and pair.scope == "global"
    assert np.array_equal(apply_geometric(pair.panel_b, geo), pair.panel_a)
    assert pair.mask_a.all() and pair.mask_b.all()


def test_global_parameters_recorded_and_applied():
    for geo, params in [
        ("hflip", ["brightness"]),
        ("direct_reuse", ["hue", "saturation"]),
        ("rotate180", ["contrast", "color_temperature"]),
    ]:
        pair = global_duplication(PANEL, np.random.default_rng(5), geometric=geo, parameters=params)
        assert set(pair.operations) == ({geo} - {"direct_reuse"}) | set(params)
        assert set(pair.meta["parameters"]) == set(params)
        undone = apply_geometric(pair.panel_b, geo)
        assert not np.array_equal(undone, pair.panel_a)
        # still the same content: strongly correlated in grey
        ga = cv2.cvtColor(pair.panel_a, cv2.COLOR_RGB2GRAY).ravel().astype(float)
        gb = cv2.cvtColor(undone, cv2.COLOR_RGB2GRAY).ravel().astype(float)
        assert np.corrcoef(ga, gb)[0, 1] > 0.8


def test_random_global_sets_have_at_most_two_parameters():
    seen = set()
    for seed in range(40):
        pair = global_duplication(PANEL, np.random.default_rng(seed))
        params = [op for op in pair.operations if op in PARAMETERS]
        assert len(params) <= 2 and len(set(params)) == len(params)
        geo = [op for op in pair.operations if op not in PARAMETERS]
        assert len(geo) <= 1
        if pair.operations == ("direct_reuse",):
            assert np.array_equal(pair.panel_a, pair.panel_b)
        seen.update(pair.operations)
    assert seen == set(GEOMETRIC) | set(PARAMETERS)


@pytest.mark.parametrize("op", PARAMETERS)
def test_each_parameter_change_moves_the_expected_statistic(op):
    rng = np.random.default_rng(1)
    out, value = apply_parameter(PANEL, op, rng)
    a, b = PANEL.astype(float), out.astype(float)
    if op == "brightness":
        assert np.sign(b.mean() - a.mean()) == np.sign(value)
    elif op == "contrast":
        assert np.sign(b.std() - a.std()) == np.sign(value - 1)
    elif op == "saturation":
        sa = cv2.cvtColor(PANEL, cv2.COLOR_RGB2HSV)[..., 1].mean()
        sb = cv2.cvtColor(out, cv2.COLOR_RGB2HSV)[..., 1].mean()
        assert np.sign(sb - sa) == np.sign(value - 1)
    elif op == "hue":
        assert np.abs(b - a).mean() > 1 and abs(value) >= 6
    else:
        assert np.sign((b[..., 0] - b[..., 2]).mean() - (a[..., 0] - a[..., 2]).mean()) == np.sign(value)


@pytest.mark.parametrize(
    "mode,geo",
    list(itertools.product(["diagonal", "vertical", "horizontal"], ["direct_reuse", "rotate180", "hflip", "vflip"])),
)
def test_local_shared_content_lines_up(mode, geo):
    pair = local_duplication(PANEL, np.random.default_rng(7), mode=mode, geometric=[geo], parameters=[])
    assert pair.operations == (geo,) and pair.scope == "local"
    assert pair.panel_a.shape == pair.panel_b.shape
    undone_b = apply_geometric(pair.panel_b, geo)
    undone_m = apply_geometric(pair.mask_b.astype(np.uint8), geo).astype(bool)
    assert pair.mask_a.sum() == undone_m.sum() > 0
    assert np.array_equal(pair.panel_a[pair.mask_a], undone_b[undone_m])
    assert pair.meta["duplication_ratio"] == pytest.approx(pair.mask_a.mean(), abs=1e-6)
    assert 0 < pair.meta["duplication_ratio"] < 1


@pytest.mark.parametrize("scale", [0.8, 1.3])
def test_local_scaling_by_reverse_cropping(scale):
    pair = local_duplication(
        PANEL,
        np.random.default_rng(3),
        mode="diagonal",
        geometric=["scaling", "hflip"],
        parameters=["contrast"],
        scale=scale,
    )
    assert set(pair.operations) == {"scaling", "hflip", "contrast"}
    assert cmo_categories(pair.operations) == {"scaling", "flip", "parameter"}
    assert pair.panel_a.shape == pair.panel_b.shape  # reverse cropping keeps the sizes equal
    x0, y0, x1, y1 = pair.meta["rect_b"]
    h, w = pair.panel_a.shape[:2]
    assert (x1 - x0) == pytest.approx(w / scale, abs=1) and (y1 - y0) == pytest.approx(h / scale, abs=1)
    assert pair.mask_b.sum() == pytest.approx(pair.mask_a.sum() * scale**2, rel=0.05)


def test_local_random_choice_is_deterministic_and_refuses_small_panels():
    a = local_duplication(PANEL, np.random.default_rng(11))
    b = local_duplication(PANEL, np.random.default_rng(11))
    assert a.operations == b.operations and np.array_equal(a.panel_b, b.panel_b)
    ops = set()
    for seed in range(30):
        ops.update(local_duplication(PANEL, np.random.default_rng(seed)).operations)
    assert {"direct_reuse", "scaling", "rotate180", "hflip", "vflip"} <= ops
    with pytest.raises(ValueError, match="350"):
        local_duplication(PANEL[:300], np.random.default_rng(0))
