"""The three trufor phases through train.py as the README chains them: the fingerprint on chain
data, localization from its checkpoint, confidence and detection from that one."""

from __future__ import annotations

import pytest
import torch

from inference.runtime import load_checkpoint
from tests.helpers import prepare_train_config
from train import train

TINY = ["detector=trufor_tiny", "trainer=cpu", "trainer.enable_progress_bar=false", "data.num_workers=0"]


def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Eight bundled photos for the fingerprint, forgeries with masks from six for the rest."""
    from synthesis.embedded import bundled_photo_paths, make_photo_manifest
    from synthesis.localization import make_embedded_localization_manifest

    folder = tmp_path_factory.mktemp("trufor_phases")
    photos = bundled_photo_paths()
    chains = make_photo_manifest(folder / "photos", split_fractions=(0.5, 0.25, 0.25), photos=photos[:8])
    make_embedded_localization_manifest(folder / "forgeries", photos=photos[8:14], crops_per_photo=2)
    return chains, folder / "forgeries"


@pytest.mark.slow  # three train.py runs of the tiny network: about a minute on an idle core
@pytest.mark.ci  # in CI's slow phase: a refusal of localizers without masks once stopped phase 1 unseen
def test_three_phases_each_start_from_the_previous_checkpoint(data, tmp_path, one_thread):
    chains, forgeries = data
    first = train(
        prepare_train_config(
            [
                "experiment=trufor_fingerprint",
                *TINY,
                f"data.manifest={chains}",
                "data.create=null",
                "data.chains=[genuine,jpeg60,blur1.0]",
                "detector.net.preprocess.size=96",
                "trainer.max_epochs=2",
            ],
            tmp_path / "p1",
        )
    )
    assert 0.0 <= first["val"]["chain_auroc"] <= 1.0 and 0.0 <= first["chain_auroc"] <= 1.0
    fingerprint = load_checkpoint(tmp_path / "p1" / "checkpoints" / "last.ckpt").net

    small = [
        *TINY,
        f"data.root={forgeries}",
        "data.batch_size=4",
        "detector.net.preprocess.size=64",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=3",
    ]
    second = train(
        prepare_train_config(
            [
                "experiment=trufor_localize",
                *small,
                f"detector.net.init_from={tmp_path / 'p1' / 'checkpoints' / 'last.ckpt'}",
            ],
            tmp_path / "p2",
        )
    )
    assert 0.0 <= second["pixel_f1"] <= 1.0
    localizer = load_checkpoint(tmp_path / "p2" / "checkpoints" / "last.ckpt").net
    assert localizer.phase == "localize" and same(localizer.fingerprint, fingerprint.fingerprint)

    third = train(
        prepare_train_config(
            [
                "experiment=trufor_detect",
                *small,
                f"detector.net.init_from={tmp_path / 'p2' / 'checkpoints' / 'best.ckpt'}",
            ],
            tmp_path / "p3",
        )
    )
    assert 0.0 <= third["auroc"] <= 1.0
    detector = load_checkpoint(tmp_path / "p3" / "checkpoints" / "last.ckpt").net
    best_localizer = load_checkpoint(tmp_path / "p2" / "checkpoints" / "best.ckpt").net
    for part in ("fingerprint", "encoder", "anomaly_decoder"):
        assert same(getattr(detector, part), getattr(best_localizer, part)), part
    assert not same(detector.confidence_decoder, best_localizer.confidence_decoder)
