"""Phase 1 of trufor: the chain-contrastive objective teaches a tiny extractor to tell chains apart,
its measurement compares only different photos, and the chain data gives what the objective needs."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from datamodules.chains import DEFAULT_CHAINS, ChainPatchDataset, apply_chain, collate_views
from datamodules.records import Record, read_manifest
from detectors.blocks.noiseprint import (
    NoiseFingerprint,
    chain_separation_auroc,
    patch_contrastive_loss,
    splice_anomaly_map,
    tile_spectra,
)

CHAINS = ("genuine", "jpeg60")


def chain_patches(seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat-coloured noisy 'photos' (sensor noise sigma 10), half left as they are, half JPEG 60."""
    rng = np.random.default_rng(seed)
    images, chains = [], []
    for i in range(count):
        photo = np.clip(rng.uniform(40, 215, (1, 1, 3)) + rng.normal(0, 10, (40, 40, 3)), 0, 255).astype(np.uint8)
        images.append(apply_chain(photo, CHAINS[i % 2])[4:36, 4:36])
        chains.append(i % 2)
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255, torch.tensor(chains)


def textures(kind: torch.Tensor, size: int = 32, seed: int = 0) -> torch.Tensor:
    """One-channel noise per image: kind 0 smooth (low-pass), kind 1 rough (high-pass)."""
    noise = torch.randn(len(kind), 1, size, size, generator=torch.Generator().manual_seed(seed))
    smooth = F.avg_pool2d(noise, 5, 1, 2)
    rough = noise - smooth
    return torch.where(kind.view(-1, 1, 1, 1) == 0, smooth, rough)


def test_tiles_of_one_texture_describe_alike_whatever_the_noise_draws():
    """Welch's averaged spectrum: two independent draws of one texture have near-identical
    descriptors (a single periodogram's scatter would leave their cosine near 0.75), and the two
    textures stay far apart."""
    smooth_a = textures(torch.zeros(16, dtype=torch.long), seed=1)
    smooth_b = textures(torch.zeros(16, dtype=torch.long), seed=2)
    rough = textures(torch.ones(16, dtype=torch.long), seed=3)
    a, b, c = (tile_spectra(x)[:, 0] for x in (smooth_a, smooth_b, rough))
    assert a.shape == (16, 16 * 9 - 1)  # 16 px Welch windows: 16 x 9 bins less DC
    assert (a * b).sum(-1).min() > 0.9
    assert (a * c).sum(-1).max() < 0.0


def test_contrastive_training_separates_two_chains_on_held_out_photos(one_thread):
    torch.manual_seed(0)
    train_x, train_y = chain_patches(0, 64)
    test_x, test_y = chain_patches(1, 16)
    extractor = NoiseFingerprint(depth=3, width=8)
    settings = {"patch": 8, "margin": extractor.depth}

    def separation() -> float:
        with torch.no_grad():
            return chain_separation_auroc(extractor.eval()(test_x), test_y, **settings)

    before = separation()
    optimizer = torch.optim.Adam(extractor.parameters(), 3e-3)
    losses = []
    for _ in range(100):
        batch = torch.randperm(len(train_x))[:8]
        loss = patch_contrastive_loss(extractor.train()(train_x[batch]), train_y[batch], **settings)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    after = separation()
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    # Random weights already separate the two chains somewhat (0.80 measured); training must at
    # least halve what is left of the separation error (0.97 measured).
    assert after > 0.9 and 1 - after < (1 - before) / 2, f"separation {before:.3f} -> {after:.3f}"


def test_loss_is_low_when_tiles_match_their_chain_and_high_when_they_match_the_other():
    chain = torch.tensor([0, 0, 0, 1, 1, 1])
    matching = textures(chain)
    crossed = textures(torch.tensor([0, 1, 0, 1, 0, 1]))  # each chain's images disagree
    settings = {"patch": 32}  # one tile per image
    assert patch_contrastive_loss(matching, chain, **settings) < patch_contrastive_loss(crossed, chain, **settings) - 1
    assert chain_separation_auroc(matching, chain, **settings) > 0.99


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_separation_is_measured_under_a_trainers_mixed_precision_as_in_float32(dtype):
    """Validation under `bf16-mixed` / `16-mixed` (autocast on a CPU stands in for a GPU's) gives the
    figure float32 gives, instead of stopping the run at its first validation."""
    chain = torch.tensor([0, 1]).repeat(6)
    fingerprints = textures(chain, seed=4) + 0.3 * textures(1 - chain, seed=5)
    expected = chain_separation_auroc(fingerprints, chain, patch=16)
    with torch.autocast("cpu", dtype=dtype):
        mixed = chain_separation_auroc(fingerprints, chain, patch=16)
    assert 0.5 < expected < 1.0
    assert mixed == expected


def test_separation_ignores_pairs_from_one_photo_so_a_shared_scene_does_not_count():
    """Every photo through both chains, and the chains change nothing: only the scene differs, so
    the separation must be at chance (counting same-photo pairs, identical across chains, as
    negatives would push it far below)."""
    photo = torch.arange(8).repeat_interleave(2)
    chain = torch.tensor([0, 1]).repeat(8)
    scenes = textures(torch.arange(8) % 2, seed=3).repeat_interleave(2, dim=0)
    assert abs(chain_separation_auroc(scenes, chain, photo, patch=16) - 0.5) < 0.1


def test_loss_takes_positives_only_from_other_photos():
    chain = torch.tensor([0, 1, 0, 1])
    photo = torch.tensor([0, 0, 1, 1])
    # Within a photo the chains look alike, across photos a chain looks alike: the positives
    # (same chain, other photo) are similar, the hardest negatives (same photo) are not.
    good = textures(torch.tensor([0, 1, 0, 1]))
    scene = textures(torch.tensor([0, 0, 1, 1]))
    assert patch_contrastive_loss(good, chain, photo, patch=16) < patch_contrastive_loss(scene, chain, photo, patch=16)


def test_a_batch_without_two_photos_of_one_chain_teaches_nothing_and_does_not_fail():
    fingerprint = textures(torch.tensor([0, 1])).requires_grad_()
    loss = patch_contrastive_loss(fingerprint, torch.tensor([0, 1]), torch.tensor([0, 0]), patch=16)
    loss.backward()
    assert loss.item() == 0.0 and not fingerprint.grad.any()


def test_splice_map_points_at_the_region_from_another_chain():
    smooth = textures(torch.tensor([0]), size=96)
    spliced = smooth.clone()
    spliced[..., 32:64, 40:72] = textures(torch.tensor([1]), size=96, seed=1)[..., 32:64, 40:72]
    anomaly = splice_anomaly_map(spliced, patch=16, stride=4, margin=2)[0]
    assert anomaly.shape == (96, 96) and torch.isnan(anomaly[:2]).all() and not torch.isnan(anomaly[2:-2, 2:-2]).any()
    assert anomaly[40:56, 48:64].mean() > anomaly[2:20, 2:20].mean() + 0.1


@pytest.mark.parametrize("chain", DEFAULT_CHAINS)
def test_every_default_chain_runs_and_changes_a_noisy_photo_unless_genuine(chain):
    photo = np.random.default_rng(0).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    out = apply_chain(photo, chain)
    assert out.dtype == np.uint8 and out.ndim == 3
    assert (out.shape == photo.shape and np.array_equal(out, photo)) == (chain == "genuine")


def test_unknown_chain_is_refused():
    with pytest.raises(ValueError, match="unknown processing chain"):
        apply_chain(np.zeros((8, 8, 3), np.uint8), "sharpen")


def write_photos(tmp_path, count: int) -> list[Record]:
    """Smooth random 'photos' of 80 x 90 px."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(count):
        path = tmp_path / f"photo{i}.png"
        coarse = np.random.default_rng(i).uniform(0, 255, (8, 9, 3)).astype(np.float32)
        cv2.imwrite(
            str(path), cv2.resize(coarse, (90, 80), interpolation=cv2.INTER_CUBIC).clip(0, 255).astype(np.uint8)
        )
        records.append(Record(path=str(path), label=0))
    return records


def test_evaluation_items_are_one_crop_through_every_chain(tmp_path):
    rerendered = tmp_path / "rerender.png"
    cv2.imwrite(str(rerendered), np.zeros((50, 50, 3), np.uint8))
    records = write_photos(tmp_path, 2) + [Record(path=str(rerendered), label=1, group="rerender_bicubic")]
    dataset = ChainPatchDataset(
        records, ["genuine", "jpeg75", "blur1.0"], size=32, train=False, rerender_groups=("rerender",)
    )
    batch = collate_views([dataset[i] for i in range(len(dataset))])
    assert batch["image"].shape == (7, 3, 32, 32)
    assert batch["chain"].tolist() == [0, 1, 2, 0, 1, 2, 3]  # every chain per photo, re-render its own
    assert batch["label"].tolist() == [0, 1, 1, 0, 1, 1, 1]
    assert batch["photo"].tolist() == [0, 0, 0, 1, 1, 1, 2] == batch["index"].tolist()
    assert torch.equal(dataset[1]["image"], batch["image"][3:6])  # evaluation items are reproducible


def test_training_items_show_one_crop_through_distinct_random_chains(tmp_path):
    torch.manual_seed(0)
    dataset = ChainPatchDataset(write_photos(tmp_path, 1), list(DEFAULT_CHAINS), size=32, train=True, views=3)
    item = dataset[0]
    assert item["image"].shape == (3, 3, 32, 32) and len(set(item["chain"].tolist())) == 3
    views = ChainPatchDataset(write_photos(tmp_path, 1), ["genuine", "jpeg90"], size=32, train=True)[0]["image"]
    other = ChainPatchDataset(write_photos(tmp_path, 1), ["genuine"], size=32, train=True)[0]["image"][0]
    # Views show the same crop (JPEG 90 changes pixels a little), unlike another random crop.
    assert (views[0] - views[1]).abs().mean() < 0.02 < (views[0] - other).abs().mean()


def test_photo_manifest_copies_the_photos_and_splits_by_photo(tmp_path):
    from synthesis.embedded import make_photo_manifest

    photos = [r.path for r in write_photos(tmp_path / "in", 6)]
    manifest = make_photo_manifest(tmp_path / "photos", seed=0, photos=photos)
    records = read_manifest(manifest)
    assert sorted(r.source for r in records) == [f"photo{i}" for i in range(6)]
    assert {r.split for r in records} == {"train", "val", "test"} and all(r.label == 0 for r in records)
    assert all(
        open(r.path, "rb").read() == open(p, "rb").read()
        for r, p in zip(sorted(records, key=lambda r: r.source), photos)
    )
