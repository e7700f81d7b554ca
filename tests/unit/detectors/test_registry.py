"""The detector registry: configs/detector is the list of detectors, composed by Hydra.

Adding a detector is one module and two configs, nothing else: a copy of the packages in a
temporary folder gains a throw-away detector that way, and the registry there finds it, builds it,
and trains it a step as train.py would.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException, MissingConfigException

from detectors.registry import create_detector, create_module, detector_config, list_detectors, net_config
from tests.helpers import ROOT


def test_list_splits_into_tiny_variants_and_the_rest():
    every, tiny, full = list_detectors(), list_detectors(tiny=True), list_detectors(tiny=False)
    assert sorted(tiny + full) == every and not set(tiny) & set(full)
    assert "npr" in full and "npr_tiny" in tiny
    assert set(list_detectors(localizer=True)) | set(list_detectors(localizer=False)) == set(every)


def test_composing_applies_overrides_and_refuses_unknown_names_and_keys():
    assert detector_config("npr_tiny", ["net.width=4"]).net.width == 4
    assert detector_config("npr_tiny").net.width == 8  # an override does not stick to later calls
    assert net_config("npr_tiny", ["+net.residual_scale=0.5"])["residual_scale"] == 0.5
    assert create_detector("npr_tiny", ["net.width=4"]).head.in_features == 2 * 4
    with pytest.raises(MissingConfigException, match="Available options in 'detector'"):
        detector_config("nrp")
    with pytest.raises(ConfigCompositionException, match="widht"):
        detector_config("npr_tiny", ["net.widht=4"])


def test_a_single_override_string_is_one_override_not_one_per_character():
    assert detector_config("npr_tiny", "net.width=4").net.width == 4
    assert net_config("npr_tiny", "net.width=4")["width"] == 4
    assert create_detector("npr_tiny", "net.width=4").head.in_features == 2 * 4
    assert create_module("npr_tiny", "net.width=4").net.head.in_features == 2 * 4


def test_composing_leaves_a_running_hydra_app_as_it_was():
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):  # as in train.py
        running = GlobalHydra.instance().hydra
        assert detector_config("dct_tiny", ["net.width=5"]).net.width == 5  # composed now, not cached
        assert GlobalHydra.instance().is_initialized() and GlobalHydra.instance().hydra is running
        assert compose("train", overrides=["detector=dct_tiny"]).detector.name == "dct_tiny"


TOY_MODULE = '''
"""A throw-away detector: one convolution, global pooling, a linear head."""
import torch
from torch import nn

from detectors.base import Detector


class Toy(Detector):
    def __init__(self, width: int = 16, preprocess=None) -> None:
        super().__init__(preprocess or {"size": 64, "mode": "center_crop"})
        self.conv = nn.Conv2d(3, width, 3, padding=1)
        self.head = nn.Linear(width, 1)

    def forward(self, image: torch.Tensor) -> dict:
        features = self.conv(self.normalize(image)).relu().mean((2, 3))
        return {"logit": self.head(features).squeeze(1)}
'''


def toy_config(name: str, width: int, size: int) -> str:
    return textwrap.dedent(f"""\
        name: {name}
        cpu_checks:
          slow: false
        net:
          _target_: detectors.toy.Toy
          width: {width}
          preprocess: {{size: {size}, mode: center_crop}}
        optimizer: {{name: Adam, lr: 1.0e-2, weight_decay: 0.0}}
        scheduler: {{warmup_fraction: 0.0, min_lr_ratio: 0.1}}
        """)


TRAIN_ONE_STEP = """
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from detectors import registry

copy = Path(sys.argv[1])
assert Path(registry.__file__).is_relative_to(copy), registry.__file__  # the copy, not the repository
assert "toy" in registry.list_detectors(tiny=False) and "toy_tiny" in registry.list_detectors(tiny=True)
assert "toy_tiny" in registry.list_detectors(tiny=True, localizer=False)
assert registry.create_detector("toy").head.in_features == 16

with initialize_config_dir(config_dir=str(copy / "configs"), version_base="1.3"):
    cfg = compose("train", overrides=["detector=toy_tiny", "trainer=cpu"])
torch.manual_seed(0)
module = registry.create_module(cfg.detector, target_fpr=cfg.target_fpr)  # as train.py builds it
before = {name: p.detach().clone() for name, p in module.named_parameters()}
optimizer = torch.optim.Adam(module.parameters(), lr=cfg.detector.optimizer.lr)
batch = {"image": torch.rand(4, 3, 32, 32), "label": torch.tensor([0, 1, 0, 1])}
loss = module.net.loss(module(batch["image"]), batch)
loss.backward()
optimizer.step()
changed = [name for name, p in module.named_parameters() if not torch.equal(p, before[name])]
print("trained", module.hparams.name, sorted(changed), float(loss))
"""


@pytest.mark.slow  # a fresh interpreter imports torch and Lightning: 10-30 s on a shared CPU
def test_a_new_detector_is_one_module_and_two_configs(tmp_path):
    copy = tmp_path / "toolkit"
    for package in ("configs", "datamodules", "detectors", "evaluation", "imageops"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "detectors" / "toy.py").write_text(TOY_MODULE)
    (copy / "configs" / "detector" / "toy.yaml").write_text(toy_config("toy", 16, 64))
    (copy / "configs" / "detector" / "toy_tiny.yaml").write_text(toy_config("toy_tiny", 4, 32))

    result = subprocess.run(
        [sys.executable, "-c", TRAIN_ONE_STEP, str(copy)],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    trained = result.stdout.strip().splitlines()[-1].split(" ", 2)
    assert trained[:2] == ["trained", "toy_tiny"]
    assert trained[2].startswith("['net.conv.bias', 'net.conv.weight', 'net.head.bias', 'net.head.weight']")
    assert not (ROOT / "detectors" / "toy.py").exists() and "toy" not in list_detectors()


def test_the_throw_away_detector_is_a_detector_here_too():
    """The module the test above adds is a valid detector for this repository's contract."""
    namespace: dict = {}
    exec(compile(TOY_MODULE, "toy.py", "exec"), namespace)
    toy = namespace["Toy"](width=4)
    assert toy(torch.rand(2, 3, 32, 32))["logit"].shape == (2,)
