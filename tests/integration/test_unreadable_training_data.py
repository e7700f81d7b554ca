"""Training on data some of whose images cannot be read: it goes on without them, and stops with
the reason when a class it needs could not be read at all."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.io import write_image
from datamodules.records import LayoutError
from tests.helpers import prepare_train_config, small_train_overrides
from train import train


def test_a_localizer_whose_every_mask_is_unreadable_stops_after_its_first_epoch_with_the_reason(tmp_path):
    """Every manipulated image was set aside (masks of another size), training went on with genuine
    images alone, and a batch of only unreadable test images ended the run in a KeyError."""
    rng = np.random.default_rng(0)
    for i in range(12):
        write_image(tmp_path / "data" / "Tp" / f"t{i}.png", rng.integers(0, 256, (48, 48, 3), dtype=np.uint8))
        write_image(tmp_path / "data" / "Gt" / f"t{i}_gt.png", np.full((24, 24), 255, np.uint8))
        write_image(tmp_path / "data" / "Au" / f"a{i}.png", rng.integers(0, 256, (48, 48, 3), dtype=np.uint8))
    overrides = [
        "detector=seg_tiny",
        "data=localization",
        f"data.root={tmp_path / 'data'}",
        "data.num_workers=0",
        "data.batch_size=8",
        "trainer=cpu",
        "trainer.max_epochs=2",
        "trainer.enable_progress_bar=false",
        "detector.net.preprocess.size=32",
    ]
    with pytest.raises(LayoutError, match=r"first epoch read no manipulated training image: \d+ were set aside .*"
                       r"t\d+\.png: mask size \(24, 24\) differs from image size \(48, 48\)"):  # fmt: skip
        train(prepare_train_config(overrides, tmp_path / "run"))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_test_batch_of_unreadable_images_only_is_set_aside_and_the_run_ends(small_dataset, tmp_path):
    lines = small_dataset.read_text().splitlines()
    header = lines[0].split(",")
    path, split = header.index("path"), header.index("split")
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    row = [""] * len(header)
    row[path], row[split], row[header.index("label")] = str(broken), "test", "1"
    manifest = small_dataset.with_name("with_a_broken_test_image.csv")  # its paths are relative to its folder
    manifest.write_text("\n".join([*lines, ",".join(row)]) + "\n")
    overrides = [*small_train_overrides(small_dataset), f"data.manifest={manifest}", "+data.eval_batch_size=1"]
    metrics = train(prepare_train_config(overrides, tmp_path / "run"))
    assert metrics["auroc"] > 0 and (tmp_path / "run" / "checkpoints" / "best.ckpt").is_file()
