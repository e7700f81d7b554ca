"""The self-matching copy-move localizer goes where every localizer goes: checkpoint, infer.py maps,
pixel metrics."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import yaml

from datamodules.io import write_image
from detectors.module import DetectorModule
from detectors.training_free import save_checkpoint
from infer import infer
from inference.writer import read_results
from synthesis.copy_move import copy_move
from tests.helpers import CONFIGS, compose_config


@pytest.mark.slow  # about 20 s on a busy 2-core machine
def test_infer_saves_copy_move_maps_and_scores_them(tmp_path):
    from datamodules.io import read_image
    from synthesis.embedded import bundled_photo_paths

    net = yaml.safe_load((CONFIGS / "detector" / "copy_move_selfmatch.yaml").read_text())["net"]
    module = DetectorModule(net={**net, "max_side": 256}, name="copy_move_selfmatch")
    model = save_checkpoint(module, tmp_path / "best.ckpt", None)
    photo = next(read_image(p) for p in bundled_photo_paths() if p.name == "astronaut.png")
    genuine = cv2.resize(photo, (256, 256), interpolation=cv2.INTER_AREA)
    forged = copy_move(genuine, np.random.default_rng(0), scale=(0.8, 1.25), rotation=(-30.0, 30.0))
    write_image(tmp_path / "genuine.png", genuine)
    write_image(tmp_path / "forged.png", forged.image)
    write_image(tmp_path / "forged_mask.png", forged.mask.astype(np.uint8) * 255)
    (tmp_path / "manifest.csv").write_text("path,label,mask\ngenuine.png,0,\nforged.png,1,forged_mask.png\n")
    output = tmp_path / "scores.csv"
    infer(
        compose_config(
            "infer",
            [
                f"model={model}",
                f"input={tmp_path / 'manifest.csv'}",
                f"output={output}",
                "save_masks=true",
                "num_workers=0",
                "progress=false",
            ],
        )
    )
    rows = {row["path"].rsplit("/", 1)[-1]: row for row in read_results(output)}
    assert rows["forged.png"]["label"] == 1 and rows["genuine.png"]["label"] == 0
    assert read_image(rows["forged.png"]["mask"]).shape[:2] == (256, 256)
    metrics = json.loads(output.with_suffix(".metrics.json").read_text())
    assert metrics["pixel_f1"] > 0.7 and metrics["pixel_fpr_genuine"] == 0.0
