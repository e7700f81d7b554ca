"""Pair detector and self-matching localizer: decisions, operation sets, masks, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detectors.copy_move import SelfMatchLocalizer
from detectors.duplication import LogisticScore, PairDuplicationDetector
from detectors.training_free import save_checkpoint
from inference.runtime import load_checkpoint
from synthesis.duplication import global_duplication
from tests.duplication_helpers import hand_set_pair_module


@pytest.fixture(scope="module")
def coffee() -> np.ndarray:
    from datamodules.io import read_image
    from synthesis.embedded import bundled_photo_paths

    return next(read_image(p) for p in bundled_photo_paths() if p.name == "coffee.png")[:240, :320]


@pytest.mark.parametrize("setting", [{"detect_side": 0}, {"max_side": 8}, {"n_features": 0}])
def test_a_matching_size_that_finds_no_keypoint_is_refused_not_a_detector_that_scores_every_pair_0(setting):
    with pytest.raises(ValueError, match="at least 32 px .* n_features of at least 1; got"):
        PairDuplicationDetector(**setting)


def test_the_logistic_score_reproduces_scikit_learn():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    features = rng.normal(size=(200, 3))
    labels = (features[:, 0] + 0.5 * features[:, 1] + rng.normal(0, 0.5, 200) > 0).astype(int)
    model = LogisticScore(3)
    model.fit(features, labels)
    mean, scale = features.mean(0), features.std(0)
    reference = LogisticRegression(class_weight="balanced", max_iter=1000).fit((features - mean) / scale, labels)
    expected = reference.decision_function((features - mean) / scale)
    assert np.allclose(model.logit(features), expected, atol=1e-6)


def test_an_unfitted_score_model_refuses_to_score():
    with pytest.raises(RuntimeError, match="not fitted"):
        LogisticScore(2).logit(np.zeros(2))


def test_a_flipped_brightened_copy_is_a_flip_with_changed_parameters(coffee):
    detector = hand_set_pair_module().net
    pair = global_duplication(coffee, np.random.default_rng(0), geometric="hflip", parameters=["brightness"])
    found = detector.predict_pair(detector.describe(pair.panel_a), detector.describe(pair.panel_b), 0.5)
    assert found.duplicated and found.operations == ["flip", "parameter"]
    assert found.transform["flipped"] and found.mask_a.mean() > 0.8 and found.mask_b.mean() > 0.8


def test_a_direct_copy_is_direct_reuse(coffee):
    detector = hand_set_pair_module().net
    panel = detector.describe(coffee)
    found = detector.predict_pair(panel, detector.describe(coffee.copy()), 0.5)
    assert found.operations == ["direct"]


def test_a_crop_of_a_panel_larger_than_the_working_size_is_no_scaling(coffee):
    """The panel is matched shrunk to the working size and its crop is not: the map between the
    panels as they are has scale 1, and that is what the operations are told from."""
    detector = hand_set_pair_module().net
    assert max(coffee.shape[:2]) > detector.max_side >= 160
    crop = np.ascontiguousarray(coffee[40:200, 60:220])
    found = detector.predict_pair(detector.describe(coffee), detector.describe(crop), 0.5)
    assert (
        found.duplicated and found.operations == ["direct"] and found.transform["scale"] == pytest.approx(1, abs=0.02)
    )


def test_a_pair_under_the_threshold_has_no_operations_and_empty_masks(coffee):
    detector = hand_set_pair_module().net
    other = np.ascontiguousarray(np.random.default_rng(1).integers(0, 255, coffee.shape, dtype=np.uint8))
    found = detector.predict_pair(detector.describe(coffee), detector.describe(other), 0.5)
    assert not found.duplicated and found.operations == [] and not found.mask_a.any() and not found.mask_b.any()


def test_a_pair_described_under_a_map_found_elsewhere_keeps_its_score_and_gets_operations_and_masks(coffee):
    """A collection search confirms a pair by its own map; the row still describes the pair."""
    detector = hand_set_pair_module().net
    mirrored = np.ascontiguousarray(coffee[:, ::-1])
    width = coffee.shape[1]
    a_to_b = np.array([[-1.0, 0.0, width - 1.0], [0.0, 1.0, 0.0]])  # A's pixels onto B's: the mirror
    found = detector.predict_under(detector.describe(coffee), detector.describe(mirrored), a_to_b, 0.2, "confirmed")
    assert found.duplicated and found.score == 0.2 and found.reason == "confirmed"
    assert found.method == "retrieval_map" and found.operations == ["flip"] and found.transform["flipped"]
    assert np.allclose(found.transform["matrix"], a_to_b, atol=0.02)
    assert found.mask_a.mean() > 0.8 and found.mask_b.mean() > 0.8


def test_the_pair_forward_takes_two_batches_of_tensors(coffee):
    detector = hand_set_pair_module().net
    image = torch.from_numpy(coffee).permute(2, 0, 1).float()[None] / 255
    logits = detector(image, torch.flip(image, dims=[3]))["logit"]
    assert logits.shape == (1,) and logits[0] > 0


class OnAGpu(torch.Tensor):
    """A buffer as it is on a GPU: numpy() refuses as a CUDA tensor's does, cpu() gives a plain copy."""

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() first.")

    def cpu(self, *args, **kwargs):
        return self.as_subclass(torch.Tensor).clone()


def test_a_pair_detector_moved_to_a_gpu_scores_and_names_operations_as_on_the_cpu(coffee):
    detector = hand_set_pair_module().net
    pair = global_duplication(coffee, np.random.default_rng(0), geometric="hflip", parameters=["brightness"])
    panels = detector.describe(pair.panel_a), detector.describe(pair.panel_b)
    expected = detector.predict_pair(*panels, 0.5)
    for model in (detector.score_model, detector.parameter_model):
        for name, buffer in list(model.named_buffers()):
            setattr(model, name, buffer.as_subclass(OnAGpu))
    found = detector.predict_pair(*panels, 0.5)
    assert found.score == expected.score > 0.5
    assert found.operations == expected.operations == ["flip", "parameter"]


def test_the_checkpoint_loads_weights_only_with_its_models_and_threshold(tmp_path):
    module = hand_set_pair_module(threshold=0.7)
    path = save_checkpoint(module, tmp_path / "best.ckpt", None)
    loaded = load_checkpoint(path)
    assert float(loaded.threshold) == pytest.approx(0.7)
    assert torch.equal(loaded.net.score_model.coef, module.net.score_model.coef)
    assert bool(loaded.net.parameter_model.fitted)


def test_self_matching_marks_a_rotated_copy_and_not_its_source():
    import cv2

    from datamodules.io import read_image
    from synthesis.copy_move import copy_move
    from synthesis.embedded import bundled_photo_paths

    image = next(read_image(p) for p in bundled_photo_paths() if p.name == "astronaut.png")
    image = cv2.resize(image, (256, 256), interpolation=cv2.INTER_AREA)
    forged = copy_move(image, np.random.default_rng(0), scale=(0.8, 1.25), rotation=(-30.0, 30.0))
    localizer = SelfMatchLocalizer(max_side=256)
    outputs = localizer(torch.from_numpy(forged.image).permute(2, 0, 1).float()[None] / 255)
    assert outputs["logit"].shape == (1,) and outputs["logit"][0] > 0
    assert outputs["mask_logit"].shape == (1, 1, *image.shape[:2])
    predicted = outputs["mask_logit"][0, 0].numpy() > 0
    tp = (predicted & forged.mask).sum()
    assert 2 * tp / (predicted.sum() + forged.mask.sum()) > 0.7


def _astronaut_256() -> np.ndarray:
    import cv2

    from datamodules.io import read_image
    from synthesis.embedded import bundled_photo_paths

    image = next(read_image(p) for p in bundled_photo_paths() if p.name == "astronaut.png")
    return cv2.resize(image, (256, 256), interpolation=cv2.INTER_AREA)


def test_self_matching_marks_a_shrunken_copy_and_not_its_source():
    """A copy shrunk by 0.8 and barely turned keeps as much fine detail as its source, so fine detail
    cannot tell them apart; the copy is the one that resampling its source through the map reproduces."""
    from detectors.matching import describe_panel
    from detectors.self_matching import match_self
    from synthesis.copy_move import copy_move

    forged = copy_move(_astronaut_256(), np.random.default_rng(0), scale=(0.8, 0.8), rotation=(-4.0, -4.0))
    found = match_self(describe_panel(forged.image, max_side=256))
    assert found.ordered

    def f1(predicted: np.ndarray) -> float:
        return 2 * (predicted & forged.mask).sum() / (predicted.sum() + forged.mask.sum())

    assert f1(found.target) > 0.7 and f1(found.source) < 0.2


def test_a_turned_copy_is_traced_to_its_outline_not_to_the_correlation_windows():
    """Correlation windows straddling the outline decide it only to within half a window; the pixels
    the copy's source repeats, and the feathered seam around them, trace it."""
    from detectors.matching import describe_panel
    from detectors.self_matching import match_self
    from synthesis.copy_move import copy_move

    for seed in range(3):
        forged = copy_move(_astronaut_256(), np.random.default_rng(seed), scale=(0.9, 1.1), rotation=(-15.0, 15.0))
        panel = describe_panel(forged.image, max_side=256)
        windows, traced = (match_self(panel, border_band=band).target for band in (0, 6))
        f1 = lambda predicted: 2 * (predicted & forged.mask).sum() / (predicted.sum() + forged.mask.sum())  # noqa: E731
        assert f1(traced) > max(0.92, f1(windows) + 0.02), seed


def test_a_copy_moved_by_whole_pixels_marks_both_copies():
    """A pure shift copies every pixel exactly: nothing tells the copy from its source."""
    from detectors.matching import describe_panel
    from detectors.self_matching import match_self
    from synthesis.copy_move import copy_move

    forged = copy_move(_astronaut_256(), np.random.default_rng(0))
    found = match_self(describe_panel(forged.image, max_side=256))
    assert found.matrix is not None and not found.ordered
    assert np.array_equal(found.source, found.target) and (found.target & forged.mask).sum() > 0.7 * forged.mask.sum()


def test_a_copy_is_found_behind_a_repeated_structure_that_fits_more_keypoints():
    """Five tiles in a row match one tile along (many inliers, but the two "copies" overlap: a
    repeated structure, dropped); the maps the other matches fit are tried next, and the turned copy
    is one of them. With one map only, the copy is missed."""
    import cv2

    from datamodules.io import read_image
    from detectors.copy_move import SelfMatchLocalizer
    from synthesis.copy_move import copy_move
    from synthesis.embedded import bundled_photo_paths

    coffee = next(read_image(p) for p in bundled_photo_paths() if p.name == "coffee.png")
    image = _astronaut_256()
    for x in range(8, 248, 48):
        image[8:56, x : x + 48] = cv2.resize(coffee, (48, 48), interpolation=cv2.INTER_AREA)
    region = np.zeros((256, 256), bool)
    region[150:210, 30:90] = True
    for seed in range(2):
        forged = copy_move(
            image, np.random.default_rng(seed), object_mask=region, rotation=(20.0, 25.0), min_fraction=0.01
        )
        f1 = {}
        for maps in (1, 3):
            _, logits, _ = SelfMatchLocalizer(max_side=256, max_maps=maps).locate(forged.image)
            marked = logits > 0
            f1[maps] = 2 * (marked & forged.mask).sum() / (marked.sum() + forged.mask.sum())
        assert f1[1] < 0.1 and f1[3] > 0.9, (seed, f1)


@pytest.mark.parametrize(
    ("angle", "mirror", "residual", "kept"),
    [(20.0, False, 2.0, True), (20.0, False, np.inf, False), (0.0, False, 2.0, False), (1.5, True, 2.0, False)],
)
def test_a_runner_up_map_counts_only_as_a_turned_copy_whose_resampling_was_measured(
    monkeypatch, angle, mirror, residual, kept
):
    """A few inliers over text fit look-alike words as well as a copy, a label rendered twice matches
    by a shift and a bar group its mirror image; the best map is trusted without a residual (a small
    copy), as a shift or as a mirror, its runners-up are not."""
    import cv2

    import detectors.copy_move as localizer_module
    from detectors.copy_move import SelfMatchLocalizer
    from detectors.self_matching import SelfMatch

    target = np.zeros((64, 64), bool)
    target[40:60, 40:60] = True
    source = np.roll(target, -30, (0, 1))
    structure = SelfMatch(cv2.getRotationMatrix2D((32.0, 32.0), 20.0, 1.0), 30, source, target, True, overlap=0.9)
    matrix = cv2.getRotationMatrix2D((32.0, 32.0), angle, 1.0) @ (np.diag([-1.0, 1.0, 1.0]) if mirror else np.eye(3))
    runner_up = SelfMatch(matrix, 8, source, target, True, residual=residual)
    monkeypatch.setattr(localizer_module, "self_matches", lambda *args, **kwargs: iter([structure, runner_up]))
    _, logits, found = SelfMatchLocalizer(max_side=64, dense_min_inliers=0, furniture_retry=False).locate(
        np.zeros((64, 64, 3), np.uint8)
    )
    assert (found is runner_up) == kept and (logits > 0).any() == kept
    if not kept:
        assert found.matrix is None and "overlap" in found.reason  # the best map's reason is reported


def test_configs_and_checkpoints_that_name_the_copy_move_localizer_under_its_former_module_still_load():
    from hydra.utils import get_class

    from detectors import copy_move, duplication

    assert get_class("detectors.duplication.SelfMatchLocalizer") is copy_move.SelfMatchLocalizer
    assert duplication.SelfMatchLocalizer is copy_move.SelfMatchLocalizer
    with pytest.raises(AttributeError, match="no attribute 'NoSuchDetector'"):
        duplication.NoSuchDetector  # noqa: B018


def test_training_pairs_of_one_class_are_refused_as_too_few_not_as_a_model_error():
    from types import SimpleNamespace

    from datamodules.records import LayoutError

    mapped = [SimpleNamespace(method="sift") for _ in range(3)] + [SimpleNamespace(method="none")]
    with pytest.raises(LayoutError, match="too few training pairs .* pairs duplicated and not .* \\(3 of 4 could\\)"):
        hand_set_pair_module().net.fit(mapped, [1, 1, 1, 0], [1, 0, 1, None])


def test_test_time_adaptation_asked_of_a_pair_detector_is_refused_with_the_reason(tmp_path):
    from inference.runtime import ModelLoadError, load_runtime

    model = save_checkpoint(hand_set_pair_module(), tmp_path / "dup.ckpt", None)
    with pytest.raises(ModelLoadError, match="tta=true: PairDuplicationDetector has no test-time adaptation"):
        load_runtime(model, "cpu", tta=True)
