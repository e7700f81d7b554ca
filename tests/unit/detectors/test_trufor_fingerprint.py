"""Phase 1 of trufor: the chain-contrastive objective teaches a tiny extractor to tell chains apart,
and the chain data gives what the objective needs."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from datamodules.chains import DEFAULT_CHAINS, ChainPatchDataset, apply_chain
from datamodules.records import Record
from detectors.blocks.noiseprint import NoiseFingerprint, chain_separation_auroc, patch_contrastive_loss

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


def test_contrastive_training_separates_two_chains_on_held_out_photos():
    torch.manual_seed(0)
    train_x, train_y = chain_patches(0, 64)
    test_x, test_y = chain_patches(1, 16)
    extractor = NoiseFingerprint(depth=3, width=8)
    settings = {"patch": 8, "pool": 8, "margin": extractor.depth}

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
    assert after > 0.85 and after > before + 0.2


def test_loss_is_low_when_tiles_match_their_chain_and_high_when_they_match_the_other():
    chain = torch.tensor([0, 0, 1, 1])
    level = torch.tensor([1.0, 1.0, 5.0, 5.0]).view(4, 1, 1, 1)
    matching = level.expand(4, 1, 16, 16)
    crossed = level[[0, 2, 1, 3]].expand(4, 1, 16, 16)  # each chain's images disagree
    settings = {"patch": 8, "pool": 4}
    assert patch_contrastive_loss(matching, chain, **settings) < 0.01
    assert patch_contrastive_loss(crossed, chain, **settings) > 1.0
    assert chain_separation_auroc(matching, chain, **settings) == 1.0


def test_loss_needs_two_images_of_a_chain():
    with pytest.raises(ValueError, match="two images of one chain"):
        patch_contrastive_loss(torch.rand(2, 1, 16, 16), torch.tensor([0, 1]), patch=8)


@pytest.mark.parametrize("chain", DEFAULT_CHAINS)
def test_every_default_chain_runs_and_changes_a_noisy_photo_unless_genuine(chain):
    photo = np.random.default_rng(0).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    out = apply_chain(photo, chain)
    assert out.dtype == np.uint8 and out.ndim == 3
    assert (out.shape == photo.shape and np.array_equal(out, photo)) == (chain == "genuine")


def test_unknown_chain_is_refused():
    with pytest.raises(ValueError, match="unknown processing chain"):
        apply_chain(np.zeros((8, 8, 3), np.uint8), "sharpen")


def test_chain_dataset_labels_patches_by_chain(tmp_path):
    paths = []
    for i in range(3):
        path = tmp_path / f"photo{i}.png"
        cv2.imwrite(str(path), np.random.default_rng(i).integers(0, 256, (80, 90, 3), dtype=np.uint8))
        paths.append(Record(path=str(path), label=0))
    rerendered = tmp_path / "rerender.png"
    cv2.imwrite(str(rerendered), np.zeros((50, 50, 3), np.uint8))
    records = paths + [Record(path=str(rerendered), label=1, group="rerender_bicubic")]
    dataset = ChainPatchDataset(records, ["genuine", "jpeg75", "blur1.0"], size=32, train=False,
                                rerender_groups=("rerender",))
    samples = [dataset[i] for i in range(len(dataset))]
    assert [s["chain"] for s in samples] == [0, 1, 2, 3]  # evaluation: chain i % 3, re-render its own
    assert [s["label"] for s in samples] == [0, 1, 1, 1]
    assert all(s["image"].shape == (3, 32, 32) for s in samples)
    assert torch.equal(dataset[1]["image"], samples[1]["image"])  # evaluation samples are reproducible
