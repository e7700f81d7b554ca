"""DetectorModule scores localizers with pixel metrics equal to the one-shot evaluation functions."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch

from detectors.localization_metrics import SplitPixelMetrics, select_cases
from detectors.module import DetectorModule
from evaluation import pixel_metrics
from evaluation.pixel import PIXEL_KEYS
from tests.localization_helpers import SEG_TINY, SquaresDataset, squares_loader


def trainer() -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )


def test_module_pixel_metrics_equal_the_one_shot_functions():
    torch.manual_seed(0)
    module = DetectorModule(net=SEG_TINY, contact_cases=2)
    trainer().test(module, dataloaders=squares_loader(n=9, batch_size=4))
    measured = module.stage_metrics["test"]

    dataset = SquaresDataset(9)
    with torch.no_grad():
        images = torch.stack([s["image"] for s in dataset.samples])
        probs = torch.sigmoid(module.net.eval()(images)["mask_logit"])[:, 0].numpy()
    masks = [s["mask"][0].numpy() if s["label"] else None for s in dataset.samples]
    expected = pixel_metrics(masks, probs)
    assert measured["n_masks"] == expected["n_masks"] == 6
    for key in PIXEL_KEYS:
        assert measured[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-9), key
    assert measured["auroc"] == measured["auroc"]  # the image metrics are still there


def test_contact_cases_are_the_worst_and_best_images_with_their_maps():
    torch.manual_seed(0)
    module = DetectorModule(net=SEG_TINY, contact_cases=2)
    trainer().test(module, dataloaders=squares_loader(n=9, batch_size=4))
    cases = module.stage_cases["test"]
    assert len(cases) == 4
    f1s = [case[0] for case in cases]
    assert f1s == sorted(f1s)
    image, mask, prob = cases[0][2], cases[0][3], cases[0][4]
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8
    assert mask.shape == prob.shape == (32, 32) and mask.any()


def test_a_manipulated_crop_without_manipulated_pixels_counts_neither_as_mask_nor_as_genuine():
    split = SplitPixelMetrics()
    batch = {
        "index": torch.tensor([0, 1, 2]),
        "label": torch.tensor([1, 1, 0]),
        "mask": torch.zeros(3, 1, 4, 4),
        "image": torch.zeros(3, 3, 4, 4),
    }
    batch["mask"][0, 0, :2, :2] = 1
    split.update(batch, torch.full((3, 1, 4, 4), 10.0))
    metrics, _ = split.compute()
    assert metrics["n_masks"] == 1
    assert metrics["pixel_fpr_genuine"] == 1.0  # one genuine image, every pixel predicted positive
    assert metrics["pixel_f1"] == pytest.approx(2 * 4 / (2 * 4 + 12))


def test_repeated_images_count_once():
    split = SplitPixelMetrics()
    mask = torch.zeros(1, 1, 4, 4)
    mask[..., :2, :2] = 1
    for prediction in (mask * 20 - 10, mask * 20 - 10):  # the sampler's padding repeats index 7
        split.update(
            {"index": torch.tensor([7]), "label": torch.tensor([1]), "mask": mask, "image": torch.zeros(1, 3, 4, 4)},
            prediction,
        )
    split.update(
        {"index": torch.tensor([8]), "label": torch.tensor([1]), "mask": mask, "image": torch.zeros(1, 3, 4, 4)},
        torch.full((1, 1, 4, 4), -10.0),
    )
    metrics, _ = split.compute()
    assert metrics["n_masks"] == 2 and metrics["pixel_f1"] == pytest.approx(0.5)


def test_select_cases_keeps_worst_then_best():
    cases = [(f1, i) for i, f1 in enumerate([0.5, 0.1, 0.9, 0.3, 0.7])]
    assert select_cases(cases, 1) == [(0.1, 1), (0.9, 2)]
    assert select_cases(cases, 3) == sorted(cases)


def test_the_module_logs_the_checkpoint_score_of_localizers():
    torch.manual_seed(0)
    module = DetectorModule(net=SEG_TINY)  # untrained: it marks about half of the genuine pixels
    trainer().validate(module, dataloaders=squares_loader(n=9, batch_size=4))
    measured = module.stage_metrics["val"]
    assert measured["pixel_fpr_genuine"] > 0.05 and measured["pixel_f1"] > 0
    assert measured["pixel_f1_within_fpr"] == -measured["pixel_fpr_genuine"]
    assert "pixel_f1_within_fpr" not in PIXEL_KEYS  # a selection score, not a reported figure
