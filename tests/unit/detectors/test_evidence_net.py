"""The `evidence` localizer (detectors/evidence_net.py): the training-free maps as input channels of
a small learned network, each image whole, each image's maps computed once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from benchmarks.bench_training_free import sample_image
from detectors.registry import create_detector, create_module
from tests.helpers import compose_config

NOISE_ONLY = ["~net.evidence", "+net.evidence={noise_level: {block: 16}}"]


def scene(height: int = 72, width: int = 96, seed: int = 3) -> torch.Tensor:
    """(1, 3, H, W) photo-like scene with a noisier central square (what noise_level finds)."""
    pixels = sample_image(max(height, width), seed=seed)[:height, :width]
    return torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1)[None].float() / 255


def test_the_map_keeps_the_input_size_and_each_image_gets_one_logit():
    net = create_detector("evidence_tiny", NOISE_ONLY).eval()
    images = torch.rand(2, 3, 70, 90)
    outputs = net(images)
    assert outputs["mask_logit"].shape == (2, 1, 70, 90) and outputs["logit"].shape == (2,)
    assert net.preprocess.mode == "none"  # each image whole: the maps need the whole image


def test_each_image_maps_are_computed_once_and_equal_the_uncached_ones():
    torch.manual_seed(0)
    cached = create_detector("evidence_tiny", NOISE_ONLY).eval()
    uncached = create_detector("evidence_tiny", [*NOISE_ONLY, "net.cache_mb=0"]).eval()
    uncached.load_state_dict(cached.state_dict())
    images = torch.rand(2, 3, 64, 80)
    with torch.no_grad():
        first = cached(images)["mask_logit"]
        reordered = cached(images.flip(0))["mask_logit"]  # the same images in another batch order
        assert cached.maps.computed == 2
        cached(torch.rand(1, 3, 64, 80))
        assert cached.maps.computed == 3
        assert torch.equal(reordered, first.flip(0))
        torch.testing.assert_close(uncached(images)["mask_logit"], first)
        uncached(images)
    assert uncached.maps.computed == 4 and not uncached.maps.cache  # cache_mb=0 keeps nothing


def test_the_cache_holds_at_most_cache_mb_and_drops_the_oldest_maps():
    one_image = 64 * 80 * 4  # one float32 map of a 64 x 80 image
    net = create_detector("evidence_tiny", [*NOISE_ONLY, f"net.cache_mb={2.5 * one_image / 2**20}"]).eval()
    images = [torch.rand(1, 3, 64, 80) for _ in range(4)]
    with torch.no_grad():
        for image in images:
            net(image)
        assert len(net.maps.cache) == 2 and net.maps.cached_bytes <= net.maps.cache_bytes
        net(images[-1])
        assert net.maps.computed == 4  # the newest is still kept
        net(images[0])
    assert net.maps.computed == 5  # the oldest was dropped


def test_a_batch_larger_than_the_cache_still_gets_every_image_its_own_maps():
    one_image = 64 * 80 * 4
    small = create_detector("evidence_tiny", [*NOISE_ONLY, f"net.cache_mb={1.5 * one_image / 2**20}"]).eval()
    uncached = create_detector("evidence_tiny", [*NOISE_ONLY, "net.cache_mb=0"]).eval()
    uncached.load_state_dict(small.state_dict())
    images = torch.rand(3, 3, 64, 80)
    with torch.no_grad():
        torch.testing.assert_close(small(images)["mask_logit"], uncached(images)["mask_logit"])
    assert len(small.maps.cache) == 1


def test_the_evidence_channels_change_the_map_and_receive_gradient(monkeypatch):
    torch.manual_seed(0)
    net = create_detector("evidence_tiny", [*NOISE_ONLY, "net.cache_mb=0"]).eval()
    image = scene()
    evidence = net.maps(image)
    assert evidence.abs().amax() > 1.0  # the scene gives the map something to say
    with torch.no_grad():
        with_maps = net(image)["mask_logit"]
        monkeypatch.setattr(net.maps, "compute", lambda image: torch.zeros_like(evidence))
        without_maps = net(image)["mask_logit"]
    assert (with_maps - without_maps).abs().amax() > 1e-3
    monkeypatch.undo()
    mask = torch.zeros_like(with_maps)
    mask[..., 24:48, 32:64] = 1
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(2):  # the U-Net's head starts at zero: its first step opens the way to the rest
        optimizer.zero_grad()
        net.loss(net(image), {"mask": mask, "label": torch.ones(1)}).backward()
        optimizer.step()
    first_layer = net.stem[0].weight.grad  # (width, 3 RGB + 1 residual + 1 map, 3, 3)
    assert first_layer[:, -1].abs().sum() > 0 and net.direct.weight.grad[0, -1].abs() > 0


def test_training_starts_from_the_sum_of_the_evidence_logits():
    net = create_detector("evidence_tiny", [*NOISE_ONLY, "net.prior_bias=2.5"]).eval()
    image = scene()
    with torch.no_grad():
        torch.testing.assert_close(net(image)["mask_logit"], net.maps(image) + 2.5)


@pytest.mark.parametrize("global_context", [False, True])
def test_with_global_context_a_pixel_reads_the_whole_image_and_without_only_its_window(global_context):
    """A change far beyond the U-Net's window moves a pixel's logit only when the decoder sees the
    image-wide mean (what tells a splice's side from the host's level)."""
    torch.manual_seed(0)
    net = create_detector("evidence_tiny", [*NOISE_ONLY, f"net.global_context={global_context}"]).eval()
    # weights at a trained network's scale (the head starts at zero and the signal through the rest is tiny)
    for conv in (m for m in net.modules() if isinstance(m, torch.nn.Conv2d)):
        torch.nn.init.kaiming_normal_(conv.weight)
    inputs = torch.rand(1, net.stem[0].in_channels, 64, 512)
    changed = inputs.clone()
    changed[..., 448:] += 1.0  # the right eighth of the image, about 400 px from the left edge
    with torch.no_grad():
        moved = (net.network(changed) - net.network(inputs))[..., :32].abs().amax()
    assert moved > 1e-3 if global_context else moved < 1e-6


def test_the_default_maps_see_a_jpeg_region_pasted_off_the_grid_before_any_training():
    """A JPEG'd donor pasted at its own scale into a photo never compressed (what the embedded
    default's splices often are): the jpeg_grid channel marks it, and the untrained network already
    marks part of it and nothing else; without that channel it marks none of it."""
    from tests.unit.detectors.test_jpeg_grid import pasted, photo

    image, mask = pasted(photo("astronaut"), 75, (3, 5))  # chelsea at JPEG 75, 3 rows and 5 columns off
    pixels = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 255

    def f1(marked: np.ndarray) -> float:
        return 2 * (marked & mask).sum() / (marked.sum() + mask.sum())

    net = create_detector("evidence_tiny").eval()
    with torch.no_grad():
        untrained = net(pixels)["mask_logit"][0, 0].numpy() > 0
        grid_channel = net.maps(pixels)[0, net.maps.names.index("jpeg_grid")].numpy() > 0
        without = create_detector("evidence_tiny", ["~net.evidence.jpeg_grid"]).eval()(pixels)["mask_logit"]
    assert f1(grid_channel) > 0.8
    assert f1(untrained) > 0.2 and not untrained[~mask].any()
    assert not (without[0, 0].numpy() > 0)[mask].any()


def test_the_full_variant_reads_every_map_the_tiny_one_reads():
    """`evidence` is the tiny variant at GPU size: a map the tiny one learned to use (jpeg_grid, for
    JPEG'd donors) is not left out of it."""
    full = compose_config("train", ["detector=evidence"]).detector.net.evidence
    tiny = compose_config("train", ["detector=evidence_tiny"]).detector.net.evidence
    assert set(tiny) <= set(full)
    assert "jpeg_grid" in full


def test_export_is_refused_with_the_reason_when_a_map_is_matched_per_image(tmp_path: Path):
    from exporting.onnx_export import ExportError, export_onnx

    with pytest.raises(
        ExportError, match="EvidenceLocalizer cannot be exported to ONNX: evidence: it matches keypoints"
    ):
        export_onnx(create_module("evidence_tiny"), tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()
    assert getattr(create_detector("evidence_tiny", NOISE_ONLY), "onnx_export_refusal", None) is None


@pytest.mark.slow
@pytest.mark.ci  # in CI's slow phase: an export takes 10-20 s
def test_an_exported_model_carries_the_smallest_image_side_its_maps_score(tmp_path: Path):
    import onnx

    from exporting.onnx_export import export_onnx

    export_onnx(create_module("evidence_tiny", NOISE_ONLY), tmp_path / "model.onnx")
    metadata = {prop.key: prop.value for prop in onnx.load(str(tmp_path / "model.onnx")).metadata_props}
    assert metadata["min_side"] == "9"  # more than half noise_level's 16 px block: the ONNX path refuses less
    assert create_detector("seg_tiny", ["+net.evidence={noise_level: {}}"]).min_image_side == 17  # fused maps too
    assert create_detector("seg_tiny").min_image_side == 1


def test_train_py_gives_the_detector_its_augmentation_only_where_the_data_config_sets_none(tmp_path: Path):
    from detectors.run_config import data_config

    default = compose_config("train", ["detector=evidence_tiny", f"paths.root_dir={tmp_path}"])
    chosen = data_config(default.data, localizer=True, augment=default.detector.augment)
    assert chosen._target_ == "datamodules.localization.LocalizationDataModule" and chosen.augment == {"hflip": 0.0}
    explicit = compose_config("train", ["detector=evidence_tiny", "data=localization", "data.augment={jpeg: 0.5}"])
    assert data_config(explicit.data, localizer=True, augment=explicit.detector.augment).augment == {"jpeg": 0.5}


def test_whole_images_are_batched_with_images_of_their_size_or_one_by_one_under_random_rescaling(tmp_path: Path):
    from datamodules.localization import LocalizationDataModule

    rows = ["path,label,mask,source,split"]
    for index, (height, width) in enumerate([(40, 48), (56, 40), (40, 40), (48, 64)] * 3):
        Image.fromarray(np.full((height, width, 3), 60 + index, np.uint8)).save(tmp_path / f"{index}.png")
        mask = ""
        if index % 2:
            Image.fromarray(np.full((height, width), 255, np.uint8)).save(tmp_path / f"m{index}.png")
            mask = f"m{index}.png"
        rows.append(f"{index}.png,{index % 2},{mask},photo{index},{('train', 'val', 'test', 'train')[index % 4]}")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")

    def train_batches(augment: dict) -> list[tuple[int, ...]]:
        data = LocalizationDataModule(
            root=str(tmp_path), batch_size=2, num_workers=0, preprocess={"mode": "none"}, augment=augment
        )
        data.setup("fit")
        loader = data.train_dataloader()
        batches = [tuple(batch["image"].shape) for batch in loader]
        assert len(batches) == len(loader)
        return sorted(batches)

    # train holds three 40 x 48 and three 48 x 64 images: batches of at most 2 of one size
    assert train_batches({"hflip": 0.0}) == [(1, 3, 40, 48), (1, 3, 48, 64), (2, 3, 40, 48), (2, 3, 48, 64)]
    assert [shape[0] for shape in train_batches({"rescale": 1.0})] == [1] * 6


def test_infer_maps_images_from_a_saved_checkpoint(tmp_path: Path):
    from infer import infer
    from inference.writer import read_results
    from tools.released import save_checkpoint

    checkpoint = save_checkpoint(create_module("evidence_tiny", NOISE_ONLY).eval(), tmp_path / "evidence.ckpt")
    folder = tmp_path / "images"
    folder.mkdir()
    pixels = (scene(72, 96)[0].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    Image.fromarray(pixels).save(folder / "scene.png")
    output = tmp_path / "scores.csv"
    overrides = [f"model={checkpoint}", f"input={folder}", f"output={output}", "num_workers=0", "progress=false"]
    infer(compose_config("infer", [*overrides, "save_masks=true", "device=cpu"]))
    row = read_results(output)[0]
    assert row["status"] == "ok" and 0.0 <= row["score"] <= 1.0, row
    mask_path = Path(row["mask"]) if Path(row["mask"]).is_absolute() else output.parent / row["mask"]
    assert np.asarray(Image.open(mask_path)).shape == (72, 96)
