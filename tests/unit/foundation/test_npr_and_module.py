"""NPR forward/backward, the safe detector builder, and DetectorModule's calibration and gathering."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from detectors.blocks.residuals import neighboring_pixel_residual
from detectors.build import build_detector
from detectors.module import DetectorModule
from detectors.npr import NPR
from tests.helpers import tiny_npr_net

TINY = tiny_npr_net()


@pytest.mark.parametrize("height,width", [(32, 32), (33, 47), (17, 64)])
def test_tiny_npr_forward_backward_on_odd_sizes(height, width):
    net = NPR(width=8, layers=[1, 1], block="basic")
    image = torch.rand(2, 3, height, width, requires_grad=False)
    outputs = net(image)
    assert set(outputs) == {"logit"} and outputs["logit"].shape == (2,)
    net.loss(outputs, {"label": torch.tensor([0, 1])}).backward()
    zero = [n for n, p in net.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)]
    assert zero == []  # every trainable parameter receives a non-zero gradient


def test_npr_residual_vanishes_on_nearest_upsampled_images():
    small = torch.rand(1, 3, 8, 8)
    upsampled = F.interpolate(small, scale_factor=2, mode="nearest")
    assert neighboring_pixel_residual(upsampled).abs().max() == 0
    assert neighboring_pixel_residual(torch.rand(1, 3, 16, 16)).abs().max() > 0.1


def test_builder_refuses_anything_that_is_not_a_toolkit_detector():
    assert isinstance(build_detector(TINY), NPR)
    with pytest.raises(ValueError, match="refusing to build"):
        build_detector({"_target_": "os.system", "command": "echo hacked"})
    with pytest.raises(ValueError, match="not a Detector subclass"):
        build_detector({"_target_": "detectors.build.to_plain"})
    with pytest.raises(ValueError, match="_target_"):
        build_detector({"width": 8})


def test_threshold_is_calibrated_on_genuine_validation_scores(monkeypatch):
    module = DetectorModule(net=TINY, target_fpr=0.1)
    trainer = type("T", (), {"sanity_checking": False})()
    monkeypatch.setattr(DetectorModule, "trainer", property(lambda self: trainer))
    monkeypatch.setattr(module, "log_dict", lambda *a, **k: None)
    genuine = torch.linspace(0.0, 0.99, 100)
    fake = torch.full((50,), 0.995)
    scores = torch.cat([genuine, fake])
    labels = torch.cat([torch.zeros(100, dtype=torch.long), torch.ones(50, dtype=torch.long)])
    module._scores["val"] = [(torch.arange(150), scores, labels)]
    module.on_validation_epoch_end()
    flagged = int((genuine >= module.threshold).sum())
    assert 8 <= flagged <= 10  # at most 10 % of the 100 genuine scores, and not needlessly fewer
    assert module.stage_metrics["val"]["tnr"] >= 0.9 and module.stage_metrics["val"]["tpr"] == 1.0
    assert "threshold" in module.state_dict()


def test_validation_counts_stay_whole_numbers_through_a_checkpoint(monkeypatch, tmp_path):
    """metrics.json and the report show n_pos 130, not 130.0 (130.0000 on the page)."""
    module = DetectorModule(net=TINY, target_fpr=0.1)
    trainer = type("T", (), {"sanity_checking": False})()
    monkeypatch.setattr(DetectorModule, "trainer", property(lambda self: trainer))
    monkeypatch.setattr(module, "log_dict", lambda *a, **k: None)
    labels = torch.cat([torch.zeros(70, dtype=torch.long), torch.ones(130, dtype=torch.long)])
    module._scores["val"] = [(torch.arange(200), torch.linspace(0.0, 1.0, 200), labels)]
    module.on_validation_epoch_end()
    saved: dict = {}
    module.on_save_checkpoint(saved)
    torch.save(saved, tmp_path / "best.ckpt")
    restored = DetectorModule(net=TINY, target_fpr=0.1)
    restored.on_load_checkpoint(torch.load(tmp_path / "best.ckpt", weights_only=True))
    val = restored.stage_metrics["val"]
    assert (val["n_pos"], val["n_neg"]) == (130, 70)
    assert type(val["n_pos"]) is int and type(val["n_neg"]) is int
    assert type(val["tnr"]) is float and val["tnr"] == module.stage_metrics["val"]["tnr"]


def test_gather_counts_each_image_once_even_when_padded_with_repeats(monkeypatch):
    module = DetectorModule(net=TINY)
    index = torch.tensor([0, 1, 2, 2, 0])
    module._scores["test"] = [(index, torch.tensor([0.1, 0.9, 0.4, 0.4, 0.1]), torch.tensor([0, 1, 0, 0, 0]))]
    gathered = module._gather("test")
    np.testing.assert_array_equal(gathered["index"], [0, 1, 2])
    np.testing.assert_array_equal(gathered["label"], [0, 1, 0])
    np.testing.assert_allclose(gathered["score"], [0.1, 0.9, 0.4])


def test_cosine_schedule_warms_up_then_decays():
    module = DetectorModule(
        net=TINY, optimizer={"name": "Adam", "lr": 1.0}, scheduler={"warmup_fraction": 0.1, "min_lr_ratio": 0.0}
    )
    module.__dict__["_trainer"] = type("T", (), {"estimated_stepping_batches": 100})()
    config = module.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(100):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[0] < rates[5] < rates[10] and max(rates) == pytest.approx(1.0, abs=0.02)
    assert rates[-1] < 0.01 and all(a >= b for a, b in zip(rates[10:], rates[11:]))


def test_unknown_optimizer_is_a_clear_error():
    module = DetectorModule(net=TINY, optimizer={"name": "Adamm", "lr": 1e-3})
    module.__dict__["_trainer"] = type("T", (), {"estimated_stepping_batches": 10})()
    with pytest.raises(ValueError, match="not an optimizer in torch.optim"):
        module.configure_optimizers()
