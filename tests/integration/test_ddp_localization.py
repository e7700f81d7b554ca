"""Two CPU processes give the same pixel metrics as one: each image counted once, counts gathered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import lightning as L
import pytest
import torch

from detectors.module import DetectorModule
from evaluation.pixel import PIXEL_KEYS
from tests.helpers import ROOT
from tests.localization_helpers import SEG_TINY, squares_loader

SCRIPT = textwrap.dedent("""
    import json, sys
    import lightning as L
    import torch
    from detectors.module import DetectorModule
    from tests.localization_helpers import SEG_TINY, squares_loader

    weights, output = sys.argv[1], sys.argv[2]
    module = DetectorModule(net=SEG_TINY)
    module.load_state_dict(torch.load(weights, weights_only=True))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_progress_bar=False,
                        enable_checkpointing=False, enable_model_summary=False)
    trainer.validate(module, dataloaders=squares_loader(n=9, batch_size=2))
    if trainer.is_global_zero:
        json.dump({"world": trainer.world_size, **module.stage_metrics["val"]}, open(output, "w"))
""")


@pytest.mark.slow  # two processes start Lightning: about a minute on a shared CPU
def test_two_process_pixel_metrics_equal_one_process(tmp_path):
    torch.manual_seed(0)
    module = DetectorModule(net=SEG_TINY)
    torch.save(module.state_dict(), tmp_path / "weights.pt")
    (tmp_path / "run_ddp.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "run_ddp.py"), str(tmp_path / "weights.pt"), str(tmp_path / "ddp.json")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp.json").read_text())
    assert ddp["world"] == 2

    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.validate(module, dataloaders=squares_loader(n=9, batch_size=4))
    single = module.stage_metrics["val"]
    assert ddp["n_masks"] == single["n_masks"] == 6  # 9 images on 2 ranks: the repeated one counts once
    for key in PIXEL_KEYS:
        assert ddp[key] == pytest.approx(single[key], rel=1e-6), key
    assert ddp["auroc"] == pytest.approx(single["auroc"], abs=1e-9)
