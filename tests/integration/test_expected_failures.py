"""What a user sees when something they can fix is wrong: every entry point prints the message and
exits with status 2, without a traceback; `debug=true` or `HYDRA_FULL_ERROR=1` shows the trace.

Each case is a real command in a new process (the exit status and the printed text are the
contract), so the cases run together, several processes at a time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT

# (entry point, arguments, a phrase of the message, extra environment)
CASES = {
    "missing_weights": ("train.py", ["detector=clip_freq"], "pretrained", {}),
    "missing_weights_named": ("train.py", ["detector=effort"], "settings naming weights: detector.net.clip=", {}),
    "recipe_value_not_given": ("train.py", ["experiment=trufor_detect"], "needs detector.net.init_from: give", {}),
    "missing_weights_debug": ("train.py", ["detector=clip_freq", "debug=true"], "pretrained", {}),
    "unknown_detector": ("train.py", ["detector=no_such_detector"], "Could not find 'detector/no_such_detector'", {}),
    "mistyped_setting_value": (
        "train.py",
        ["detector=npr_tiny", "detector.net.preprocess.mode=centre_crop"],
        "detector: preprocess.mode must be one of",
        {},
    ),
    "unknown_added_setting": ("train.py", ["detector=npr_tiny", "+detector.net.widht=8"], "net.widht is not a", {}),
    "unknown_augment_option": (
        "train.py",
        ["detector=npr_tiny", "+data.augment.hflpi=0.5", "paths.data_dir=data"],
        "did you mean augment.hflip?",
        {},
    ),
    "relative_path_under_chdir": (
        "train.py",
        ["hydra.job.chdir=true", "data=manifest", "data.manifest=m.csv"],
        "/runs/relative_path_under_chdir/m.csv)",  # looked for in the run directory the command moved into
        {},
    ),
    "unknown_trainer_key": ("train.py", ["detector=npr_tiny", "+trainer.foo=1"], "trainer.foo is not a setting", {}),
    "mistyped_data_value": (
        "train.py",
        ["detector=npr_tiny", "data.balanced=yes", "paths.data_dir=data"],
        "data: data.balanced must be",
        {},
    ),
    "bad_manifest_row": ("infer.py", ["model=model.ckpt", "input=bad/manifest.csv"], "label must be 0", {}),
    "unknown_layout": ("infer.py", ["model=model.ckpt", "input=bad", "layout=nonsense"], "unknown layout", {}),
    "refused_checkpoint": ("infer.py", ["model=evil.ckpt", "input=bad"], "refusing to load", {}),
    "refused_checkpoint_full_error": (
        "infer.py",
        ["model=evil.ckpt", "input=bad"],
        "refusing to load",
        {"HYDRA_FULL_ERROR": "1"},
    ),
    "infer_without_model": ("infer.py", ["input=bad"], "model is required", {}),
    "mistyped_key": ("infer.py", ["model=model.ckpt", "inputs=bad"], "did you mean input=bad?", {}),
    "export_missing_model": ("export.py", ["model=nope.ckpt", "output=out.onnx"], "does not exist", {}),
    "generate_empty_source": ("generate.py", ["source=empty", "output=generated"], "no images found", {}),
    "generate_missing_source": ("generate.py", ["source=nope", "output=generated"], "does not exist", {}),
    "calibrate_missing_model": (
        "calibrate.py",
        ["model=nope.ckpt", "input=bad", "output=out.ckpt"],
        "does not exist",
        {},
    ),
}
if shutil.which("nvidia-smi") is None:  # a GPU trainer on a machine without one (a setting, not a crash)
    CASES["gpu_trainer_without_gpu"] = ("train.py", ["trainer=gpu"], "trainer: No supported gpu", {})
TRACED = {"missing_weights_debug", "refused_checkpoint_full_error"}


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    import torch

    from tests.helpers import write_tiny_model

    work = tmp_path_factory.mktemp("failures")
    write_tiny_model(work, onnx=False)
    torch.save({"hyper_parameters": {"net": {}}, "state_dict": {}, "payload": Evil()}, work / "evil.ckpt")
    (work / "bad").mkdir()
    (work / "bad" / "manifest.csv").write_text("path,label\nimage.png,7\n")
    (work / "empty").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    running = {}
    for name, (script, args, _, extra) in CASES.items():
        command = [sys.executable, str(ROOT / script), *args, f"hydra.run.dir={work / 'runs' / name}"]
        running[name] = subprocess.Popen(
            command, cwd=work, env={**env, **extra}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if len(running) % 3 == 0:  # a few at a time: each imports torch
            for process in running.values():
                process.wait(timeout=900)
    done = {}
    for name, process in running.items():
        out, _ = process.communicate(timeout=900)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, out, "")
    return done


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(set(CASES) - TRACED))
def test_an_expected_failure_prints_its_message_and_exits_2_without_a_traceback(outcomes, case):
    result, phrase = outcomes[case], CASES[case][2]
    assert result.returncode == 2, result.stdout
    assert phrase in result.stdout and "Traceback" not in result.stdout, result.stdout
    assert "pwned" not in result.stdout  # the refused checkpoint's code never ran


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(TRACED))
def test_debug_or_hydra_full_error_shows_the_traceback(outcomes, case):
    result, phrase = outcomes[case], CASES[case][2]
    assert result.returncode != 0 and phrase in result.stdout
    assert "Traceback" in result.stdout, result.stdout


def test_export_logs_progress_but_not_the_graph_passes_steps(capsys):
    """export.py's logging config (as Hydra applies it) keeps the exporter's own lines and drops the
    INFO lines of the ONNX graph passes."""
    import logging
    import logging.config

    from omegaconf import OmegaConf

    from tests.helpers import compose_config

    settings = OmegaConf.to_container(compose_config("export", ["model=m.ckpt"]).hydra.job_logging, resolve=True)
    previous = {name: logging.getLogger(name).level for name in ("", "onnx_ir", "onnxscript")}
    handlers = list(logging.getLogger().handlers)
    try:
        logging.config.dictConfig(settings)
        logging.getLogger("onnx_ir.passes.common.initializer_deduplication").info("Replaced initializer 'a'")
        logging.getLogger("onnxscript.optimizer").info("folded a constant")
        logging.getLogger("export").info("fp32 export: parity 1e-7")
        logging.getLogger("onnx_ir.passes").warning("a pass could not run")
    finally:
        for name, level in previous.items():
            logging.getLogger(name).setLevel(level)
        logging.getLogger().handlers[:] = handlers
    printed = capsys.readouterr().out
    assert "fp32 export" in printed and "a pass could not run" in printed
    assert "Replaced initializer" not in printed and "folded" not in printed
