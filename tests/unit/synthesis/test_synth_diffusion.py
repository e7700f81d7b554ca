"""Diffusion-style generators trained here: the latent autoencoder and the small DDPM (SDEdit, inpainting)."""

import numpy as np
import pytest
import torch
from skimage import data

from synthesis.diffusion import DenoisingUNet, inpaint, load_diffusion, save_diffusion, sdedit, train_diffusion
from synthesis.generator import psnr
from synthesis.latent import LatentAutoencoder, load_latent, save_latent, train_latent_autoencoder

TRAIN = [data.astronaut()[::8, ::8].copy(), data.coffee()[::8, ::8].copy()]  # 64 x 64, 50 x 75
IMAGE = data.chelsea()[::4, ::4].copy()  # 75 x 113: not a multiple of 4 or 8


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny convolutions: extra threads only add contention


@pytest.fixture(scope="module")
def ddpm():
    torch.set_num_threads(1)
    return train_diffusion(TRAIN, steps=80, seed=0, width=8, mults=(1, 2), crop=16, batch_size=8, lr=3e-3)


@pytest.fixture(scope="module")
def latent():
    torch.set_num_threads(1)
    return train_latent_autoencoder(TRAIN, steps=5, seed=0, width=8, crop=32, batch_size=2)


def test_latent_autoencoder_compresses_8x_into_few_channels_and_keeps_any_size():
    model = LatentAutoencoder(latent_channels=4, width=8).eval()
    with torch.no_grad():
        z = model.encode(torch.rand(2, 3, 64, 48))
        assert z.shape == (2, 4, 8, 6)
        assert model.decode(z).shape == (2, 3, 64, 48)
        out = model(torch.rand(1, 3, 37, 53))
    assert out.shape == (1, 3, 37, 53) and 0.0 <= float(out.min()) and float(out.max()) <= 1.0
    # its decoder up-samples by nearest neighbour followed by convolutions, as LDM VAE decoders do
    assert sum(isinstance(m, torch.nn.Upsample) and m.mode == "nearest" for m in model.decoder.modules()) == 3


def test_latent_scale_makes_the_latent_about_unit_variance_and_survives_save_load(latent, tmp_path):
    with torch.no_grad():
        z = latent.encode(torch.from_numpy(TRAIN[0]).permute(2, 0, 1).float()[None] / 255)
    assert 0.3 < float(z.std()) < 3.0
    again = load_latent(save_latent(latent, tmp_path / "vae.pt"))
    assert float(again.scale) == pytest.approx(float(latent.scale))
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(again(x), latent(x))


def test_ddpm_training_loss_falls(ddpm):
    losses = ddpm.training_losses
    assert len(losses) == 80
    assert np.mean(losses[-20:]) < 0.6 * np.mean(losses[:5])


def test_sdedit_low_strength_stays_close_and_high_strength_changes_more(ddpm):
    low = sdedit(ddpm, IMAGE, 0.02, np.random.default_rng(0), steps=20)
    high = sdedit(ddpm, IMAGE, 0.8, np.random.default_rng(0), steps=20)
    assert low.shape == high.shape == IMAGE.shape and low.dtype == np.uint8
    assert psnr(low, IMAGE) > 28.0
    assert psnr(high, IMAGE) < psnr(low, IMAGE) - 8.0
    # deterministic per generator seed
    assert np.array_equal(
        sdedit(ddpm, IMAGE, 0.3, np.random.default_rng(1), steps=5),
        sdedit(ddpm, IMAGE, 0.3, np.random.default_rng(1), steps=5),
    )


@pytest.mark.parametrize("space", ["pixel", "latent"])
def test_inpainting_changes_only_the_masked_region(ddpm, latent, space):
    model = (
        ddpm
        if space == "pixel"
        else train_diffusion(TRAIN, steps=3, seed=0, latent=latent, width=8, mults=(1,), crop=4, batch_size=2)
    )
    mask = np.zeros(IMAGE.shape[:2], bool)
    mask[20:50, 30:70] = True
    edit = inpaint(model, IMAGE, mask, np.random.default_rng(0), steps=4, latent=latent if space == "latent" else None)
    assert edit.image.shape == IMAGE.shape and edit.meta["space"] == space
    assert np.array_equal(edit.image[~mask], IMAGE[~mask])  # outside: the input, exactly
    assert np.abs(edit.image[mask].astype(int) - IMAGE[mask]).mean() > 5  # inside: regenerated
    assert np.array_equal(edit.mask, mask)


def test_latent_diffusion_needs_its_autoencoder(latent):
    model = train_diffusion(TRAIN, steps=1, seed=0, latent=latent, width=8, mults=(1,), crop=4, batch_size=2)
    assert model.config["space"] == "latent" and model.config["in_channels"] == 4
    with pytest.raises(ValueError, match="latent autoencoder"):
        sdedit(model, IMAGE, 0.5, np.random.default_rng(0))
    assert sdedit(model, IMAGE, 0.5, np.random.default_rng(0), steps=2, latent=latent).shape == IMAGE.shape


def test_diffusion_checkpoint_round_trip_and_bad_inputs(ddpm, tmp_path):
    again = load_diffusion(save_diffusion(ddpm, tmp_path / "ddpm.pt"))
    x, t = torch.rand(1, 3, 16, 16), torch.tensor([10])
    with torch.no_grad():
        assert torch.equal(again(x, t), ddpm(x, t))
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a diffusion checkpoint"):
        load_diffusion(tmp_path / "other.pt")
    with pytest.raises(ValueError, match="strength"):
        sdedit(ddpm, IMAGE, 0.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="empty region"):
        inpaint(ddpm, IMAGE, np.zeros(IMAGE.shape[:2], bool), np.random.default_rng(0))
    with pytest.raises(ValueError, match="space"):
        DenoisingUNet(space="wavelet")
