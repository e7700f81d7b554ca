"""Models written by an earlier version of the toolkit keep loading and scoring the same.

`tests/data/legacy/` holds a tiny NPR checkpoint (saved by a Lightning trainer, as train.py saves
them) and its ONNX export, both written before the scoring pipeline moved into `inference/`, with
the scores they gave on a fixed input. A checkpoint names its network's class by module path
(`detectors.npr.NPR`), so moving a detector class, renaming a parameter or changing the ONNX
reading would break users' files: this test fails first.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from inference.runtime import load_runtime

LEGACY = Path(__file__).resolve().parents[2] / "data" / "legacy"


@pytest.mark.parametrize("suffix, tolerance", [(".ckpt", 1e-6), (".onnx", 1e-4)])
def test_models_written_before_still_load_and_score_the_same(suffix, tolerance):
    expected = json.loads((LEGACY / "npr_legacy.json").read_text())
    runtime = load_runtime(LEGACY / f"npr_legacy{suffix}", "cpu")
    assert runtime.threshold == pytest.approx(expected["threshold"])
    assert runtime.preprocess.size == 32 and not runtime.is_localizer
    image = torch.rand(*expected["input_shape"], generator=torch.Generator().manual_seed(expected["input_seed"]))
    scores = runtime.predict(image)["score"]
    np.testing.assert_allclose(scores, expected["score"], rtol=0, atol=tolerance)


def test_scoring_rebuilds_the_same_detector_as_the_training_module_and_refuses_the_same_files(tmp_path):
    from inference.runtime import ModelLoadError, load_checkpoint, load_detector

    detector, module = load_detector(LEGACY / "npr_legacy.ckpt"), load_checkpoint(LEGACY / "npr_legacy.ckpt")
    assert detector.name == module.hparams.name and detector.threshold == float(module.threshold)
    trained = module.net.state_dict()
    assert all(torch.equal(value, trained[key]) for key, value in detector.net.state_dict().items())
    checkpoint = torch.load(LEGACY / "npr_legacy.ckpt", weights_only=True)
    checkpoint["state_dict"]["extra.weight"] = torch.zeros(1)
    torch.save(checkpoint, tmp_path / "extra.ckpt")
    for load in (load_detector, load_checkpoint):
        with pytest.raises(ModelLoadError, match="cannot rebuild the detector"):
            load(tmp_path / "extra.ckpt")


@pytest.mark.slow
def test_scoring_a_checkpoint_does_not_import_lightning():
    import subprocess
    import sys

    code = (
        "import sys; from inference.runtime import load_runtime; "
        f"load_runtime({str(LEGACY / 'npr_legacy.ckpt')!r}, 'cpu'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'torchmetrics')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[3],
        check=True,
    )
    assert done.stdout.strip() == "[]"
