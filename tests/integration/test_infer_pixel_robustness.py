"""`infer.py robustness=true` with a localizer on input with true masks: pixel F1 / IoU / AUROC curves
through the scoring run's own path, maps compared with the masks at the images' original size."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from datamodules.preprocess import Preprocess
from datamodules.records import Record
from imageops import jpeg, rescale
from inference.perturbed_maps import score_perturbed_maps_fn
from inference.runtime import load_runtime
from tests.integration.test_infer import run_infer
from tests.localization_helpers import save_untrained_checkpoint

PIXEL_KEYS = ("pixel_f1", "pixel_iou", "pixel_auroc", "pixel_f1_best", "pixel_fpr_genuine")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("localizer") / "seg_tiny.ckpt"
    save_untrained_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    """Four manipulated images of different sizes with masks, two genuine ones."""
    rng = np.random.default_rng(0)
    data = tmp_path_factory.mktemp("data")
    (data / "masks").mkdir()
    rows = ["path,label,mask"]
    for i, (h, w) in enumerate([(48, 64), (64, 64), (72, 40), (56, 56), (40, 48), (64, 52)]):
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(image).save(data / f"{i}.png")
        if i < 4:
            mask = np.zeros((h, w), np.uint8)
            mask[h // 4 : 3 * h // 4, w // 3 : 2 * w // 3] = 255
            Image.fromarray(mask).save(data / "masks" / f"{i}.png")
            rows.append(f"{i}.png,1,masks/{i}.png")
        else:
            rows.append(f"{i}.png,0,")
    (data / "manifest.csv").write_text("\n".join(rows) + "\n")
    return data / "manifest.csv"


@pytest.mark.slow
@pytest.mark.ci  # in CI's slow phase: keeps the default run under 5 minutes
def test_identity_perturbation_reproduces_the_pixel_metrics_of_the_scoring_run(checkpoint, manifest, tmp_path):
    """Rescaling by 1 (run through the detector, not short-cut) gives the pixel metrics infer.py
    computes from its saved maps; JPEG 30 gives other ones (the perturbation reaches the pixels)."""
    output = tmp_path / "scores.csv"
    result = run_infer(checkpoint, manifest, output)
    reported = json.loads(output.with_suffix(".metrics.json").read_text())
    records = [
        Record(
            path=str(manifest.parent / f"{i}.png"),
            label=int(i < 4),
            mask=str(manifest.parent / "masks" / f"{i}.png") if i < 4 else None,
        )
        for i in range(6)
    ]
    score = score_perturbed_maps_fn(load_runtime(checkpoint, "cpu"), records, batch_size=2)
    identity = score(lambda image: rescale(image, 1.0))
    assert identity["pixel"]["n_masks"] == reported["n_masks"] == 4
    for key in PIXEL_KEYS:
        assert identity["pixel"][key] == pytest.approx(reported[key], abs=1e-12), key
    compressed = score(lambda image: jpeg(image, 30))
    assert compressed["pixel"]["pixel_auroc"] != pytest.approx(identity["pixel"]["pixel_auroc"], abs=1e-6)
    assert result["metrics"]["pixel_f1"] == reported["pixel_f1"]


@pytest.mark.slow
@pytest.mark.ci  # in CI's slow phase: keeps the default run under 5 minutes
def test_robustness_true_adds_pixel_curves_for_the_perturbations_asked(checkpoint, manifest, tmp_path):
    output = tmp_path / "scores.csv"
    result = run_infer(checkpoint, manifest, output, "robustness=true", "robustness_perturbations=[jpeg,rescale]")
    robustness = result["metrics"]["robustness"]
    assert set(robustness["curves"]) == {"jpeg", "rescale"}
    for key in PIXEL_KEYS:
        assert robustness["clean"][key] == pytest.approx(result["metrics"][key], abs=1e-12), key
    rescaled = robustness["curves"]["rescale"]
    assert rescaled["levels"] == [0.5, 0.75, 1.0, 1.25, 1.5]
    identity = rescaled["levels"].index(1.0)
    assert rescaled["metrics"]["pixel_f1"][identity] == result["metrics"]["pixel_f1"]
    assert len(robustness["curves"]["jpeg"]["metrics"]["pixel_f1"]) == 6
    assert "pixel_f1" in (tmp_path / "scores_report" / "report.md").read_text().split("## Robustness")[1]


def test_unknown_perturbation_is_one_clear_error(checkpoint, manifest, tmp_path):
    from infer import InferenceFailed

    with pytest.raises(InferenceFailed, match="unknown robustness_perturbations"):
        run_infer(checkpoint, manifest, tmp_path / "scores.csv", "robustness=true", "robustness_perturbations=[snow]")


class TopLeftLocalizer:
    """A hand-made localizer: it flags the top-left 10 x 10 pixels of whatever it is shown."""

    name, is_localizer = "top-left", True
    preprocess = Preprocess(size=None, mode="none")

    def predict(self, images):
        images = np.asarray(images)
        maps = np.zeros((len(images), 1, *images.shape[-2:]), np.float32)
        maps[:, :, :10, :10] = 1
        return {"score": maps.max(axis=(1, 2, 3)), "mask": maps}


def test_rescaled_maps_are_compared_at_the_original_size(tmp_path):
    """A 40 x 40 image whose true mask is its top-left 20 x 20: shown at half size, the detector's
    10 x 10 answer covers the mask exactly once back at 40 x 40 (F1 1); as it is, a quarter of it
    (F1 2 x 100 / (2 x 100 + 300) = 0.4); at twice the size, 5 x 5 pixels (F1 50 / 425)."""
    Image.fromarray(np.full((40, 40, 3), 90, np.uint8)).save(tmp_path / "image.png")
    mask = np.zeros((40, 40), np.uint8)
    mask[:20, :20] = 255
    Image.fromarray(mask).save(tmp_path / "mask.png")
    score = score_perturbed_maps_fn(
        TopLeftLocalizer(), [Record(str(tmp_path / "image.png"), 1, str(tmp_path / "mask.png"))]
    )
    for factor, f1 in ((0.5, 1.0), (1.0, 0.4), (2.0, 50 / 425)):
        assert score(lambda image: rescale(image, factor))["pixel"]["pixel_f1"] == pytest.approx(f1), factor


def test_a_detector_without_maps_is_refused():
    runtime = SimpleNamespace(name="npr", is_localizer=False)
    with pytest.raises(ValueError, match="not a localizer"):
        score_perturbed_maps_fn(runtime, [])
