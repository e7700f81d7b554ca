"""A detector whose backbone package (timm, open_clip, segmentation-models-pytorch, transformers) is
not installed is refused in one line naming the package to install and the detector that needs it,
by every entry point that builds it, instead of a traceback. The packages are made unimportable
here, nothing is uninstalled."""

from __future__ import annotations

import logging
import sys

import pytest

from detectors.build import MissingPackageError, missing_package
from detectors.registry import create_detector
from inference.runtime import ModelLoadError, load_detector
from tests.helpers import compose_config, prepare_train_config, run_without, write_images, write_pairnet_checkpoint

WHOLE_TOOLKIT = "(or the toolkit with all its dependencies: pip install -e .)"
TIMM_REFUSAL = (
    "detector detectors.pair_net.PairCorrelationNet needs timm, which is not installed: "
    f"pip install timm {WHOLE_TOOLKIT}"
)


@pytest.mark.parametrize(
    ("detector", "module", "refusal"),
    [
        ("pairnet_tiny", "timm", TIMM_REFUSAL),
        (
            "clip_linear_tiny",
            "open_clip",
            "detector detectors.clip_linear.ClipLinear needs open_clip, which is not installed: "
            f"pip install open-clip-torch {WHOLE_TOOLKIT}",
        ),
        (
            "seg_tiny",
            "segmentation_models_pytorch",
            "detector detectors.seg.SegmentationLocalizer needs segmentation_models_pytorch, which is not installed: "
            f"pip install segmentation-models-pytorch {WHOLE_TOOLKIT}",
        ),
        (
            "effort_tiny",
            "transformers",
            "detector detectors.effort.Effort needs transformers, which is not installed: pip install transformers "
            '(or the toolkit with its transformers extra: pip install -e ".[transformers]")',
        ),
    ],
    ids=["timm", "open_clip", "smp", "transformers"],
)
def test_building_a_detector_without_its_backbone_package_names_the_package_and_the_detector(
    monkeypatch, detector, module, refusal
):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as when it is not installed
    with pytest.raises(MissingPackageError) as refused:
        create_detector(detector)
    assert str(refused.value) == refusal


def test_a_missing_module_of_the_toolkit_itself_is_not_taken_for_a_package_to_install():
    bug = ModuleNotFoundError("No module named 'detectors.blocks.gone'", name="detectors.blocks.gone")
    assert missing_package("detectors.npr.NPR", bug) is None
    assert missing_package("detectors.npr.NPR", ImportError("cannot import name 'x' from 'timm'")) is None


def test_export_of_a_checkpoint_whose_backbone_package_is_missing_ends_in_one_line_naming_it(tmp_path):
    model = write_pairnet_checkpoint(tmp_path / "pair.ckpt", seed=0)
    done = run_without("timm", "export.py", f"model={model}", f"output={tmp_path / 'pair.onnx'}", cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in said, said
    assert said.strip().splitlines()[-1] == f"{model}: cannot rebuild the detector: {TIMM_REFUSAL}"
    assert not (tmp_path / "pair.onnx").exists()


def test_scoring_a_checkpoint_whose_backbone_package_is_missing_is_refused_naming_it(tmp_path, monkeypatch, caplog):
    from infer import main

    model = write_pairnet_checkpoint(tmp_path / "pair.ckpt", seed=0)
    write_images(tmp_path / "in", [(64, 64)])
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(ModelLoadError) as refused:
        load_detector(model)
    assert str(refused.value) == f"{model}: cannot rebuild the detector: {TIMM_REFUSAL}"
    cfg = compose_config("infer", [f"model={model}", f"input={tmp_path / 'in'}", f"output={tmp_path / 'out.csv'}"])
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as stop:
        main(cfg)  # Hydra hands a given config straight to the task, with its expected failures
    assert stop.value.code == 2
    assert caplog.messages[-1] == f"{model}: cannot rebuild the detector: {TIMM_REFUSAL}"
    assert not (tmp_path / "out.csv").exists()


def test_training_a_detector_whose_backbone_package_is_missing_is_refused_before_the_run_directory_is_made(
    tmp_path, monkeypatch, caplog
):
    from train import main

    cfg = prepare_train_config(["detector=pairnet_tiny", "trainer=cpu"], tmp_path / "run")
    monkeypatch.setitem(sys.modules, "timm", None)
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as stop:
        main(cfg)
    assert stop.value.code == 2
    assert caplog.messages[-1] == TIMM_REFUSAL
    assert not (tmp_path / "run").exists()
