"""The torch-free install (onnxruntime, numpy, Pillow: docs/guides/deployment.md) meets what it lacks
with one line naming what to install, before any work, instead of a traceback (after scoring, for
a labelled input's report). The modules are made unimportable here, nothing is uninstalled."""

from __future__ import annotations

import sys

import pytest

from infer import InferenceFailed, infer
from tests.helpers import compose_config, run_without, write_images


def run_infer(model, input, output, *overrides):
    return infer(
        compose_config("infer", [f"model={model}", f"input={input}", f"output={output}", "progress=false", *overrides])
    )


def test_devices_without_lightning_is_refused_naming_it_and_the_shards_that_need_it_not(
    tiny_model, tmp_path, monkeypatch
):
    write_images(tmp_path / "in", [(40, 50)])
    monkeypatch.setitem(sys.modules, "lightning.fabric", None)  # import fails as when it is not installed
    with pytest.raises(
        InferenceFailed, match=r"devices=2 .*Lightning Fabric, which is not installed \(pip install lightning\)"
    ):
        run_infer(tiny_model["onnx"], tmp_path / "in", tmp_path / "out.csv", "devices=2", "device=cpu")
    assert not (tmp_path / "out.csv").exists()
    run_infer(tiny_model["onnx"], tmp_path / "in", tmp_path / "part.csv", "shard=1/2")  # shards: no Lightning


def test_labelled_input_without_matplotlib_is_refused_before_anything_is_scored(tiny_model, tmp_path, monkeypatch):
    write_images(tmp_path / "labelled" / "0_real", [(40, 50)])
    write_images(tmp_path / "labelled" / "1_fake", [(40, 50)], seed=1)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(
        InferenceFailed, match=r"labelled: .*need matplotlib \(pip install matplotlib\); nothing was scored"
    ):
        run_infer(tiny_model["onnx"], tmp_path / "labelled", tmp_path / "out.csv")
    assert not list(tmp_path.glob("out*"))
    run_infer(tiny_model["onnx"], tmp_path / "labelled" / "0_real", tmp_path / "rows.csv")  # unlabelled: no report
    assert (tmp_path / "rows.csv").is_file()


@pytest.mark.parametrize("module", ["torch", "lightning"])
def test_export_without_torch_or_lightning_ends_in_one_line_naming_what_to_install(tmp_path, module):
    done = run_without(module, "export.py", "model=m.ckpt", f"output={tmp_path / 'm.onnx'}", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"export.py runs the PyTorch checkpoint it exports, and {module} is not installed: pip install torch "
        "lightning onnx onnxscript (or the toolkit with all its dependencies: pip install -e .)"
    ]


def test_export_missing_a_module_of_the_toolkit_itself_is_a_bug_shown_as_one_not_an_install_to_make(tmp_path):
    done = run_without("exporting.variants", "export.py", "model=m.ckpt", f"output={tmp_path / 'm.onnx'}", cwd=tmp_path)
    assert done.returncode == 1 and "pip install" not in done.stderr
    assert "ModuleNotFoundError: import of exporting.variants halted" in done.stderr


def calibrate_settings(model, tmp_path) -> list[str]:
    write_images(tmp_path / "genuine", [(30 + i % 7, 34) for i in range(30)])
    return [f"model={model}", f"input={tmp_path / 'genuine'}", "target_fpr=0.1", "progress=false"]


def test_calibrate_without_matplotlib_writes_the_calibrated_model_and_its_report(tiny_model, tmp_path):
    settings = calibrate_settings(tiny_model["onnx"], tmp_path)
    done = run_without("matplotlib", "calibrate.py", *settings, f"output={tmp_path / 'ours.onnx'}", cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert (tmp_path / "ours.onnx").is_file()
    assert "on 30 genuine images" in (tmp_path / "ours.calibration.md").read_text()


@pytest.mark.parametrize(
    ("module", "why"),
    [
        ("scipy", "the threshold's exact (Clopper-Pearson) intervals"),
        ("onnx", "writing the threshold into the .onnx model"),
    ],
)
def test_calibrate_without_scipy_or_onnx_is_refused_in_one_line_before_anything_is_scored(
    tiny_model, tmp_path, module, why
):
    settings = calibrate_settings(tiny_model["onnx"], tmp_path)
    done = run_without(module, "calibrate.py", *settings, f"output={tmp_path / 'ours.onnx'}", cwd=tmp_path)
    said = done.stdout + done.stderr  # calibrate.py logs its refusals (Hydra's log goes to stdout)
    assert done.returncode == 2 and "Traceback" not in said, said
    refusal = f"calibrate.py needs {module} for {why}, and it is not installed: pip install {module}; "
    refusal += "nothing was scored"
    assert said.strip().splitlines()[-1].endswith(refusal)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["genuine"]  # no scores, no model
