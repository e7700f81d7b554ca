"""The scoring loop keeps the model busy: batches are converted to network input on the decoding
threads, and maps are encoded on a background thread while the next batch is scored, without a
row ever naming a map that is not on disk yet."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

import inference.batches as batches_module
import inference.masks as masks_module
from datamodules.io import read_image
from datamodules.preprocess import Preprocess
from inference.batches import iter_batches
from inference.scoring import score_items
from inference.writer import COLUMNS, ResultWriter, read_results
from tests.helpers import write_images


class SquareLocalizer:
    """A stand-in whole-image localizer: its map is the red channel squared, its score the map's max."""

    name, threshold, is_localizer = "square", 0.5, True
    preprocess = Preprocess(size=None, mode="none")

    def predict(self, images: np.ndarray) -> dict[str, np.ndarray]:
        maps = np.asarray(images)[:, :1] ** 2
        return {"score": maps.reshape(len(maps), -1).max(1), "mask": maps}


class CheckingWriter(ResultWriter):
    """Fails the run if a row is written before the map it names exists."""

    def write(self, rows):
        for row in rows:
            assert row.get("mask") and Path(row["mask"]).is_file(), f"row written before its map: {row}"
        super().write(rows)


def test_batches_are_converted_to_float_on_the_decoding_threads(tmp_path, monkeypatch):
    paths = write_images(tmp_path, [(24, 24)] * 5)
    threads = []
    convert = batches_module.to_network_input

    def recording(images):
        threads.append(threading.current_thread().name)
        return convert(images)

    monkeypatch.setattr(batches_module, "to_network_input", recording)
    batches = list(iter_batches(list(enumerate(map(str, paths))), lambda image: image, batch_size=2, workers=2))
    assert [b["image"].shape for b in batches] == [(2, 3, 24, 24), (2, 3, 24, 24), (1, 3, 24, 24)]
    assert len(threads) == 3 and all(name.startswith("decode") for name in threads)
    np.testing.assert_array_equal(batches[2]["image"][0], read_image(paths[4]).transpose(2, 0, 1) / np.float32(255))


def test_maps_are_written_off_the_scoring_thread_and_before_their_rows(tmp_path, monkeypatch):
    paths = write_images(tmp_path / "in", [(20, 30)] * 3 + [(31, 17)] * 4)
    threads = set()
    save = masks_module.save_mask

    def recording(*args):
        threads.add(threading.current_thread().name)
        return save(*args)

    monkeypatch.setattr(masks_module, "save_mask", recording)
    with CheckingWriter(tmp_path / "scores.csv", [*COLUMNS, "mask"]) as writer:
        counts = score_items(
            SquareLocalizer(),
            list(enumerate(map(str, paths))),
            writer,
            batch_size=3,
            num_workers=2,
            masks_dir=tmp_path / "masks",
            progress=False,
        )
    assert counts == {"ok": 7, "error": 0}
    assert threads and all(name.startswith("maps") for name in threads)
    rows = read_results(tmp_path / "scores.csv")
    assert [row["path"] for row in rows] == list(map(str, paths))  # input order, every image once
    for path, row in zip(paths, rows):
        red = read_image(path)[..., 0].astype(np.float32) / 255
        np.testing.assert_array_equal(read_image(row["mask"])[..., 0], np.rint(red**2 * 255).astype(np.uint8))
        assert row["score"] == float((red**2).max())
