"""Levers against a detector's reliance on one generator trace: noise re-injection (as an
augmentation and as pseudo-fakes), resampling, and sampling balanced per generator group."""

from __future__ import annotations

from collections import Counter

import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import WeightedRandomSampler

from datamodules.classification import ManifestDataModule, balanced_by, balanced_weights
from datamodules.datasets import NoiseReinjectedFakes, shot_noise
from datamodules.io import write_image
from datamodules.localization import LocalizationDataModule
from datamodules.records import Record, write_manifest
from datamodules.transforms import build_transform


def _smooth_image() -> np.ndarray:
    ramp = np.linspace(40, 200, 64, dtype=np.float32)
    return np.repeat(np.stack([ramp + 0 * c for c in range(3)], -1)[None], 64, 0).astype(np.uint8)


def _high_frequency(image: np.ndarray) -> float:
    return float(np.abs(cv2.Laplacian(image.mean(2).astype(np.float32), cv2.CV_32F)).mean())


def test_noise_reinjection_roughens_a_smooth_image_by_the_configured_amount():
    smooth = _smooth_image()
    size = {"size": 64, "mode": "center_crop"}
    weak = build_transform(size, train=True, augment={"hflip": 0, "noise": 1.0, "noise_std": (0.02, 0.02)}, seed=0)
    strong = build_transform(size, train=True, augment={"hflip": 0, "noise": 1.0, "noise_std": (0.1, 0.1)}, seed=0)
    off = build_transform(size, train=True, augment={"hflip": 0}, seed=0)
    np.testing.assert_array_equal(off(image=smooth)["image"], smooth)
    weak_out, strong_out = weak(image=smooth)["image"], strong(image=smooth)["image"]
    # a std of 0.1 of the range is about 25 grey levels per channel; 0.02 about 5
    assert np.std(strong_out.astype(float) - smooth) == pytest.approx(0.1 * 255, rel=0.15)
    assert np.std(weak_out.astype(float) - smooth) == pytest.approx(0.02 * 255, rel=0.25)
    assert _high_frequency(smooth) < 3 < _high_frequency(weak_out) < _high_frequency(strong_out)
    assert abs(float(strong_out.mean()) - float(smooth.mean())) < 2  # zero-mean: brightness kept


def test_resampling_leaves_an_up_sampling_trace_of_the_configured_factor():
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    half = build_transform(
        {"size": 64, "mode": "center_crop"},
        train=True,
        augment={"hflip": 0, "resample": 1.0, "resample_scale": (0.5, 0.5)},
        seed=0,
    )
    out = half(image=noise)["image"].astype(np.float32)
    assert out.shape == noise.shape
    # shrunk by 2 with area averaging, then enlarged bilinearly: the image is the bilinear
    # enlargement of its own 2x2 block means
    blocks = noise.astype(np.float32).reshape(32, 2, 32, 2, 3).mean((1, 3))
    expected = cv2.resize(blocks, (64, 64), interpolation=cv2.INTER_LINEAR)
    assert np.abs(out - expected).max() <= 1.0
    assert _high_frequency(out) < _high_frequency(noise) / 4


def test_noise_is_a_training_step_only():
    evaluation = build_transform({"size": 64, "mode": "center_crop"}, train=False)
    np.testing.assert_array_equal(evaluation(image=_smooth_image())["image"], _smooth_image())


RECORDS = (
    [Record(f"g{i}.png", 0, group="genuine") for i in range(60)]
    + [Record(f"a{i}.png", 1, group="ae") for i in range(30)]
    + [Record(f"d{i}.png", 1, group="ddpm") for i in range(6)]
)


def test_label_balance_gives_each_class_half_the_mass():
    weights = balanced_weights(RECORDS, "label")
    real = sum(w for w, r in zip(weights, RECORDS) if r.label == 0)
    assert real == pytest.approx(sum(weights) / 2)


def test_group_balance_gives_each_group_of_a_class_an_equal_share_of_draws():
    weights = balanced_weights(RECORDS, "group")
    draws = list(
        WeightedRandomSampler(weights, num_samples=20_000, replacement=True, generator=torch.Generator().manual_seed(0))
    )
    counts = Counter(RECORDS[i].group for i in draws)
    # genuine half the time, each of the two fake groups a quarter, though ddpm has 5x fewer images
    assert counts["genuine"] / 20_000 == pytest.approx(0.5, abs=0.02)
    assert counts["ae"] / 20_000 == pytest.approx(0.25, abs=0.02)
    assert counts["ddpm"] / 20_000 == pytest.approx(0.25, abs=0.02)
    label_only = Counter(
        RECORDS[i].group
        for i in WeightedRandomSampler(
            balanced_weights(RECORDS, "label"), 20_000, generator=torch.Generator().manual_seed(0)
        )
    )
    assert label_only["ddpm"] / 20_000 == pytest.approx(0.5 * 6 / 36, abs=0.02)  # per-image share


@pytest.mark.parametrize("value, expected", [(False, None), (True, "label"), ("label", "label"), ("group", "group")])
def test_balanced_option_values(value, expected):
    assert balanced_by(value) == expected


def test_a_mistyped_balanced_option_is_refused_when_the_data_module_is_built(tmp_path):
    with pytest.raises(ValueError, match="data.balanced must be"):
        ManifestDataModule(manifest=str(tmp_path / "m.csv"), balanced="groups")


def test_a_mistyped_genuine_noise_model_is_refused_when_the_data_module_is_built(tmp_path):
    with pytest.raises(ValueError, match="genuine_noise_model must be"):
        ManifestDataModule(manifest=str(tmp_path / "m.csv"), genuine_noise_model="poisson")


@pytest.mark.parametrize("lever", [{"pseudo_fakes": 1.5}, {"genuine_noise": -0.1}])
def test_a_share_of_draws_outside_0_1_is_refused_when_the_data_module_is_built(tmp_path, lever):
    with pytest.raises(ValueError, match="rate must lie in"):
        ManifestDataModule(manifest=str(tmp_path / "m.csv"), **lever)


def test_the_training_loader_draws_groups_evenly(tmp_path):
    for record in RECORDS:
        write_image(tmp_path / record.path, np.full((8, 8, 3), 100 if record.label else 50, np.uint8))
    split = [Record(str(tmp_path / r.path), r.label, group=r.group, source=r.path, split="train") for r in RECORDS]
    split += [
        Record(str(tmp_path / RECORDS[i].path), RECORDS[i].label, source=f"v{i}", split=s)
        for i, s in [(0, "val"), (60, "val"), (1, "test"), (61, "test")]
    ]
    write_manifest(split, tmp_path / "m.csv")
    module = ManifestDataModule(
        manifest=str(tmp_path / "m.csv"),
        preprocess={"size": 8, "mode": "center_crop"},
        batch_size=96,
        num_workers=0,
        balanced="group",
        with_groups=True,
    )
    module.setup()
    torch.manual_seed(0)
    groups = Counter(g for _ in range(40) for batch in module.train_dataloader() for g in batch["group"])
    total = sum(groups.values())
    assert groups["ddpm"] / total == pytest.approx(0.25, abs=0.03)
    assert groups["genuine"] / total == pytest.approx(0.5, abs=0.03)


class _Samples(torch.utils.data.Dataset):
    records = ["r0", "r1"]

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return {"image": torch.full((3, 32, 32), 0.5), "label": index, "group": ["genuine", "ae"][index]}


def test_pseudo_fakes_turn_genuine_draws_into_noisy_fakes_at_the_rate():
    torch.manual_seed(0)
    fakes = NoiseReinjectedFakes(_Samples(), rate=0.3, noise_std=(0.05, 0.05))
    draws = [fakes[0] for _ in range(2000)]
    made = [d for d in draws if d["label"] == 1]
    assert len(made) / 2000 == pytest.approx(0.3, abs=0.03)
    assert all(d["group"] == "pseudo_noise" for d in made)
    assert all(torch.equal(d["image"], torch.full((3, 32, 32), 0.5)) for d in draws if d["label"] == 0)
    residual = torch.stack([d["image"] for d in made]) - 0.5
    assert float(residual.std()) == pytest.approx(0.05, rel=0.05) and abs(float(residual.mean())) < 2e-3
    assert torch.equal(made[0]["image"] * 255, (made[0]["image"] * 255).round())  # 8-bit levels
    assert fakes.records == ["r0", "r1"]  # the wrapped dataset's records stay visible (balanced sampling)


def test_pseudo_fakes_leave_real_fakes_alone_and_rate_zero_changes_nothing():
    torch.manual_seed(0)
    always = NoiseReinjectedFakes(_Samples(), rate=1.0)
    assert all(
        torch.equal(always[1]["image"], _Samples()[1]["image"]) and always[1]["group"] == "ae" for _ in range(20)
    )
    never = NoiseReinjectedFakes(_Samples(), rate=0.0)
    assert all(never[0]["label"] == 0 for _ in range(200))
    with pytest.raises(ValueError, match="rate must lie in"):
        NoiseReinjectedFakes(_Samples(), rate=1.5)


def _flat_split_module(tmp_path, **levers) -> ManifestDataModule:
    """8 flat grey images per split, half genuine, and a data module over them with `levers`."""
    rows = [
        Record(str(tmp_path / f"{s}{i}.png"), i % 2, source=f"{s}{i}", split=s, group=["genuine", "ae"][i % 2])
        for s in ("train", "val", "test")
        for i in range(8)
    ]
    for row in rows:
        write_image(row.path, np.full((16, 16, 3), 120, np.uint8))
    write_manifest(rows, tmp_path / "m.csv")
    module = ManifestDataModule(
        manifest=str(tmp_path / "m.csv"),
        preprocess={"size": 16, "mode": "center_crop"},
        batch_size=8,
        num_workers=0,
        **levers,
    )
    module.setup()
    return module


def test_pseudo_fakes_are_made_in_training_only(tmp_path):
    module = _flat_split_module(tmp_path, pseudo_fakes=1.0)
    train = next(iter(module.train_dataloader()))
    assert int(train["label"].sum()) == 8  # every genuine draw became a fake
    for loader in (module.val_dataloader(), module.test_dataloader()):
        batch = next(iter(loader))
        assert int(batch["label"].sum()) == 4 and float((batch["image"] - 120 / 255).abs().max()) < 1e-6


def test_localization_refuses_pseudo_fakes(tmp_path):
    with pytest.raises(ValueError, match="pseudo_fakes"):
        LocalizationDataModule(root=str(tmp_path), pseudo_fakes=0.5)


class _Kinds(torch.utils.data.Dataset):
    """Two genuine images of different kinds: a grainy micrograph and a chart."""

    records = [Record("m.png", 0, category="fluorescence"), Record("c.png", 0, category="chart")]

    def __len__(self):
        return 2

    def __getitem__(self, index):
        return {"image": torch.full((3, 32, 32), 0.5), "label": 0, "group": "genuine"}


def test_grainy_categories_can_be_kept_out_of_the_pseudo_fakes():
    torch.manual_seed(0)
    fakes = NoiseReinjectedFakes(_Kinds(), rate=0.5, skip_categories=["fluorescence"])
    assert all(fakes[0]["label"] == 0 and torch.equal(fakes[0]["image"], _Kinds()[0]["image"]) for _ in range(200))
    assert sum(fakes[1]["label"] for _ in range(2000)) / 2000 == pytest.approx(0.5, abs=0.04)


def test_genuine_noise_roughens_genuine_draws_that_stay_genuine():
    torch.manual_seed(0)
    noisy = NoiseReinjectedFakes(_Kinds(), rate=0.0, noise_std=(0.05, 0.05), genuine_noise=0.4)
    draws = [noisy[1] for _ in range(2000)]
    assert all(d["label"] == 0 and d["group"] == "genuine" for d in draws)
    changed = [d for d in draws if not torch.equal(d["image"], _Kinds()[1]["image"])]
    assert len(changed) / 2000 == pytest.approx(0.4, abs=0.04)
    assert float((torch.stack([d["image"] for d in changed]) - 0.5).std()) == pytest.approx(0.05, rel=0.05)
    with pytest.raises(ValueError, match="genuine noise rate must lie in"):
        NoiseReinjectedFakes(_Kinds(), rate=0.0, genuine_noise=2.0)


def test_balanced_by_category_gives_every_kind_of_a_class_an_equal_share():
    records = (
        [Record(f"p{i}", 0, category="photo") for i in range(90)]
        + [Record(f"g{i}", 0, category="gel") for i in range(10)]
        + [Record(f"f{i}", 1, category="photo") for i in range(50)]
    )
    assert balanced_by("category") == "category"
    weights = balanced_weights(records, "category")

    def share(name: str, label: int) -> float:
        return sum(w for w, r in zip(weights, records) if r.category == name and r.label == label) / sum(weights)

    assert share("gel", 0) == pytest.approx(0.25) and share("photo", 0) == pytest.approx(0.25)
    assert share("photo", 1) == pytest.approx(0.5)


def test_genuine_noise_can_be_given_to_grainy_kinds_only_at_its_own_strength():
    torch.manual_seed(0)
    grain = NoiseReinjectedFakes(
        _Kinds(), rate=0.0, genuine_noise=1.0, genuine_noise_std=(0.02, 0.02), genuine_noise_categories=["fluorescence"]
    )
    micrographs, charts = [grain[0] for _ in range(200)], [grain[1] for _ in range(200)]
    assert all(d["label"] == 0 for d in micrographs + charts)
    assert all(torch.equal(d["image"], _Kinds()[1]["image"]) for d in charts)
    assert float((torch.stack([d["image"] for d in micrographs]) - 0.5).std()) == pytest.approx(0.02, rel=0.05)


def test_shot_noise_grows_with_the_signal_and_speckles_a_dark_background():
    torch.manual_seed(0)
    photons = 1 / 0.1**2  # std 0.1 at full brightness
    bright, mid = shot_noise(torch.full((4, 64, 64), 1.0), photons), shot_noise(torch.full((4, 64, 64), 0.25), photons)
    assert float(bright.mean()) == pytest.approx(1.0, abs=0.01) and float(mid.mean()) == pytest.approx(0.25, abs=0.01)
    assert float(bright.std()) == pytest.approx(0.1, rel=0.05) and float(mid.std()) == pytest.approx(0.05, rel=0.05)
    dark = shot_noise(torch.zeros(4, 64, 64), photons)
    speckled = float((dark > 0).float().mean())
    assert 0.3 < speckled < 0.5  # Poisson(0.5) > 0 in 39 % of pixels: sparse speckles, not a haze


def test_shot_grain_keeps_grainy_draws_genuine_and_a_bad_noise_model_is_refused():
    torch.manual_seed(0)
    grain = NoiseReinjectedFakes(
        _Kinds(),
        rate=0.0,
        genuine_noise=1.0,
        genuine_noise_std=(0.1, 0.1),
        genuine_noise_model="shot",
        genuine_noise_categories=["fluorescence"],
    )
    draws = torch.stack([grain[0]["image"] for _ in range(50)])
    assert float((draws - 0.5).std()) == pytest.approx(0.1 * 0.5**0.5, rel=0.1)  # std 0.1 x sqrt(0.5)
    with pytest.raises(ValueError, match="genuine_noise_model must be"):
        NoiseReinjectedFakes(_Kinds(), rate=0.0, genuine_noise_model="poisson")


def test_the_data_module_hands_its_genuine_noise_options_to_the_training_set(tmp_path):
    module = _flat_split_module(
        tmp_path,
        genuine_noise=0.5,
        genuine_noise_std=[0.1, 0.3],
        genuine_noise_categories=["gel"],
        genuine_noise_model="shot",
    )
    train = module.train_dataloader().dataset.dataset  # inside the per-draw seeding (`DrawSeeded`)
    assert isinstance(train, NoiseReinjectedFakes) and train.genuine_noise == 0.5
    assert train.genuine_noise_std == (0.1, 0.3) and train.genuine_noise_categories == {"gel"}
    assert train.genuine_noise_model == "shot"
