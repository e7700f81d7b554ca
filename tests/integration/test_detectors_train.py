"""A short training run per detector on the small generated dataset (issue 5, point 9).

The bar for "beats chance": test AUROC above 0.5 + 2 standard deviations of the AUROC of an
uninformative scorer on the same numbers of genuine and fake test images (the Mann-Whitney null
variance, (n_pos + n_neg + 1) / (12 n_pos n_neg)); with the small dataset's 12 + 12 test images
that is AUROC > 0.74, a one-sided p of about 0.02. Every run is seeded (`seed=0`).

`clip_linear_tiny` is a *frozen, randomly initialized* 2-layer CLIP ViT with a linear head: its
features are random projections, not CLIP features, and on these ~120 training images they carry
next to no signal. Measured: test AUROC 0.44-0.50 whatever the budget tried (4-8 epochs, lr 1e-3 to
1e-1, centre crop or resize, even `adapter=full` training the tower); even the best possible linear
probe on its frozen features (unregularized full-batch logistic regression) only reaches a
*training* AUROC of 0.57 and loss 0.682 (from 0.693). So neither "beats chance" nor "its loss
decreases" holds, and the test asserts what does: the run trains, calibrates and tests through
`train.py` like every other; only the head is updated (the tower is bit-identical afterwards); and
training is stable (the training-split loss does not rise above its starting value, which a wrong
loss sign or a diverging step would do).
"""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from datamodules.classification import ManifestDataModule
from datamodules.datasets import ImageDataset, collate
from datamodules.transforms import build_transform
from detectors.module import DetectorModule
from detectors.registry import create_module, detector_config, list_detectors
from inference.runtime import load_checkpoint
from tests.helpers import TINY_NPR, prepare_train_config, small_train_overrides
from train import train

# The tiny variants whose config names a budget with which a short run beats chance.
BEATS_CHANCE = [name for name in list_detectors(tiny=True) if detector_config(name).cpu_checks.get("beats_chance")]


def overrides_for(detector: str, manifest, budget: dict | None = None) -> list[str]:
    """The small-train config (1 epoch, batch 16, 64 px, CPU) on `detector`, with its `beats_chance`
    budget (`max_epochs`, `lr`) or the given one."""
    base = [o for o in small_train_overrides(manifest) if o not in TINY_NPR]
    budget = budget or detector_config(detector).cpu_checks.beats_chance
    keys = {"max_epochs": "trainer.max_epochs", "lr": "detector.optimizer.lr"}
    return [*base, f"detector={detector}", *(f"{keys[key]}={value}" for key, value in budget.items())]


def chance_bar(n_pos: int, n_neg: int) -> float:
    """0.5 + 2 standard deviations of the AUROC of an uninformative scorer (Mann-Whitney null)."""
    return 0.5 + 2.0 * math.sqrt((n_pos + n_neg + 1) / (12.0 * n_pos * n_neg))


# The whole file takes ~30 s on 2 idle cores (~2 min when the cores are shared with other jobs).
def test_the_short_runs_cover_an_artifact_a_frequency_and_a_clip_detector():
    assert {"npr_tiny", "dct_tiny", "clip_freq_tiny"} <= set(BEATS_CHANCE)


@pytest.mark.slow  # a learning check: short training per detector
@pytest.mark.parametrize("detector", BEATS_CHANCE)
def test_short_training_beats_chance_on_generated_data(detector, small_dataset, tmp_path):
    cfg = prepare_train_config(overrides_for(detector, small_dataset), tmp_path / "run")
    metrics = train(cfg)
    assert metrics["detector"] == detector
    assert metrics["n_pos"] >= 10 and metrics["n_neg"] >= 10, "too few test images to tell anything from chance"
    bar = chance_bar(metrics["n_pos"], metrics["n_neg"])
    assert metrics["auroc"] > bar, f"{detector}: test AUROC {metrics['auroc']:.3f} <= chance bar {bar:.3f}"
    # calibrated on validation genuines and tested at that threshold, like every detector
    assert 0.0 < metrics["threshold"] < 1.0 and 0.0 <= metrics["tnr"] <= 1.0
    assert (tmp_path / "run" / "checkpoints" / "best.ckpt").is_file()


@torch.no_grad()
def train_split_loss(module: DetectorModule, cfg) -> float:
    """Mean BCE of the image logit over the training split, without augmentation."""
    datamodule = ManifestDataModule(
        manifest=cfg.data.manifest,
        split_fractions=cfg.data.split_fractions,
        seed=cfg.data.seed,
        preprocess=module.net.preprocess.to_dict(),
    )
    datamodule.setup("fit")
    dataset = ImageDataset(datamodule.splits["train"], build_transform(module.net.preprocess, False, {}))
    module.eval()
    total, count = 0.0, 0
    for batch in DataLoader(dataset, batch_size=64, collate_fn=collate):
        logits = module.net(batch["image"])["logit"]
        total += float(F.binary_cross_entropy_with_logits(logits, batch["label"].float(), reduction="sum"))
        count += len(logits)
    return total / count


@pytest.mark.slow  # a training run through train.py
def test_random_tiny_clip_linear_probe_trains_only_its_head_stably_and_is_calibrated(small_dataset, tmp_path):
    budget = {"max_epochs": 4, "lr": 1e-2}
    cfg = prepare_train_config(overrides_for("clip_linear_tiny", small_dataset, budget), tmp_path / "run")
    L.seed_everything(cfg.seed)  # train() builds its module right after seeding the same way
    initial = create_module(cfg.detector)
    before = train_split_loss(initial, cfg)

    metrics = train(cfg)
    trained = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    after = train_split_loss(trained, cfg)

    tower = {k: v for k, v in trained.net.state_dict().items() if k.startswith("encoder.")}
    start = {k: v for k, v in initial.net.state_dict().items() if k.startswith("encoder.")}
    assert tower and tower.keys() == start.keys()
    assert all(torch.equal(tower[k], start[k]) for k in start), "the frozen tower changed"
    assert not torch.equal(trained.net.head.weight, initial.net.head.weight), "the head did not train"
    assert math.isfinite(after) and after <= before + 0.01, f"training-split loss rose: {before:.4f} -> {after:.4f}"
    # calibrated on validation genuines and tested; its AUROC is reported (about chance), not required
    assert metrics["detector"] == "clip_linear_tiny" and 0.0 <= metrics["auroc"] <= 1.0
    assert 0.0 < metrics["threshold"] < 1.0 and 0.0 <= metrics["tnr"] <= 1.0
