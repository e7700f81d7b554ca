"""How an entry point's task ends on a failure the user can fix: one line naming what to do, status 2."""

from __future__ import annotations

import logging

import pytest
from omegaconf import OmegaConf

from inference.cli import EXPECTED_FAILURE, expected_failures


def test_a_required_setting_left_out_is_named_with_how_to_give_it_and_exits_2(caplog):
    @expected_failures(LookupError)
    def task(cfg):
        return cfg.model  # `model: ???` in the entry point's config, not given

    with caplog.at_level(logging.ERROR, logger="toolkit"), pytest.raises(SystemExit) as stop:
        task(OmegaConf.create({"model": "???", "input": "photos/"}))
    assert stop.value.code == EXPECTED_FAILURE
    assert "model is required: give it on the command line (model=...)" in caplog.text


def test_an_unexpected_error_still_propagates():
    @expected_failures(LookupError)
    def task(cfg):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        task(OmegaConf.create({}))


@pytest.mark.parametrize(
    "options, message",
    [
        (["report=htm"], "report must be none or html, got 'htm'"),
        (["output=scores.txt"], "output must end in .csv or .jsonl"),
        (["batch_size=0"], "batch_size must be a whole number of at least 1, got 0"),
        (["batch_size=abc"], "batch_size must be a whole number of at least 1, got 'abc'"),
        (["threshold=2"], "threshold must be a number from 0 to 1"),
        (["threshold=abc"], "threshold must be a number from 0 to 1"),
        (["review_aggregation=foo"], "review_aggregation must be one of max, mean, noisy_or"),
        (["resume=maybe"], "resume must be true or false, got 'maybe'"),
    ],
)
def test_bad_options_are_refused_before_the_model_is_read(tmp_path, options, message):
    from infer import InferenceFailed, infer
    from tests.helpers import compose_config

    cfg = compose_config("infer", [f"model={tmp_path / 'absent.ckpt'}", f"input={tmp_path}", *options])
    with pytest.raises(InferenceFailed, match=message):
        infer(cfg)


def test_the_input_manifest_as_output_and_a_users_folder_named_like_the_report_are_refused(tmp_path):
    from infer import InferenceFailed, infer
    from tests.helpers import compose_config

    manifest = tmp_path / "manifest.csv"
    manifest.write_text("path,label\na.png,0\n")
    base = [f"model={tmp_path / 'absent.ckpt'}"]
    with pytest.raises(InferenceFailed, match="is the input: the scores would overwrite it"):
        infer(compose_config("infer", [*base, f"input={manifest}", f"output={manifest}"]))
    assert manifest.read_text() == "path,label\na.png,0\n"
    (tmp_path / "case_report_files").mkdir()
    (tmp_path / "case_report_files" / "evidence.jpg").write_bytes(b"the user's")
    with pytest.raises(InferenceFailed, match="holds files no report writes \\(evidence.jpg\\)"):
        infer(compose_config("infer", [*base, f"input={tmp_path}", f"output={tmp_path / 'case.csv'}", "report=html"]))
    assert (tmp_path / "case_report_files" / "evidence.jpg").read_bytes() == b"the user's"


def test_a_mistyped_key_is_answered_with_the_closest_setting_of_the_composed_config():
    from inference.cli import misspelled_keys

    assert misspelled_keys("infer", ["model=m.ckpt", "inputs=photos/"]) == [
        "'inputs' is not a setting; did you mean input=photos/?"
    ]
    # a group choice changes which keys exist: the detector's own settings are looked up in it
    assert misspelled_keys("train", ["detector=seg_tiny", "detector.net.encoder_nme=x"]) == [
        "'detector.net.encoder_nme' is not a setting; did you mean detector.net.encoder=x?"
    ]
    assert misspelled_keys("train", ["data.batch_size=3", "+extra=1", "zzzz=1"]) == []


def test_a_key_under_a_setting_that_is_an_interpolated_value_gets_no_advice_and_no_traceback():
    """`trainer.default_root_dir` is `${paths.output_dir}`, which reads the run's Hydra config: a key
    under it is answered by Hydra's own message alone, not by a second traceback of this lookup."""
    from inference.cli import misspelled_keys

    assert misspelled_keys("train", ["trainer.default_root_dir.x=1"]) == []
    assert misspelled_keys("train", ["paths.output_dir.x=1", "paths.log_dri=logs"]) == [
        "'paths.log_dri' is not a setting; did you mean paths.log_dir=logs?"
    ]


def test_a_setting_out_of_its_range_is_an_expected_failure(caplog):
    from inference.cli import SettingError

    @expected_failures()
    def task(cfg):
        raise SettingError("target_fpr must be a number between 0 and 1 (0.01 for 1 %), got 2")

    with caplog.at_level(logging.ERROR, logger="toolkit"), pytest.raises(SystemExit) as stop:
        task(OmegaConf.create({}))
    assert stop.value.code == EXPECTED_FAILURE and "target_fpr must be a number between 0 and 1" in caplog.text


def test_train_refuses_a_target_fpr_outside_0_and_1_before_training():
    from inference.cli import SettingError
    from tests.helpers import compose_config
    from train import module_for

    for value in ("2", "0", "abc"):
        with pytest.raises(SettingError, match="target_fpr must be a number between 0 and 1"):
            module_for(compose_config("train", [f"target_fpr={value}"]))


def test_an_output_under_a_file_is_refused_naming_the_file(tmp_path):
    from infer import InferenceFailed, infer
    from tests.helpers import compose_config

    (tmp_path / "notes").write_text("a file")
    cfg = compose_config(
        "infer", [f"model={tmp_path / 'absent.ckpt'}", f"input={tmp_path}", f"output={tmp_path}/notes/s.csv"]
    )
    with pytest.raises(InferenceFailed, match="notes is a file, not a folder"):
        infer(cfg)


@pytest.mark.parametrize(
    "options, message",
    [
        (["output=model.txt"], "output must end in .onnx, got model.txt"),
        (["precision=int9"], "precision must be one of"),
    ],
)
def test_export_refuses_a_bad_output_name_or_precision_before_reading_the_model(tmp_path, options, message):
    from export import export
    from exporting.onnx_export import ExportError
    from exporting.variants import VariantRefused
    from tests.helpers import compose_config

    with pytest.raises((ExportError, VariantRefused), match=message):
        export(compose_config("export", [f"model={tmp_path / 'absent.ckpt'}", *options]))


def needs_a_missing_package(**_):
    import a_package_nobody_installed  # noqa: F401


def test_a_logger_whose_package_is_not_installed_is_a_setting_to_fix():
    from datamodules.records import LayoutError
    from train import instantiate_group

    group = OmegaConf.create({"tensorboard": {"_target_": f"{__name__}.needs_a_missing_package", "save_dir": "."}})
    with pytest.raises(LayoutError, match="needs a package that is not installed: No module named"):
        instantiate_group(group)
    assert instantiate_group(OmegaConf.create({"none": {"name": "csv"}})) == []  # no target: nothing made


@pytest.fixture
def in_a_sweep(monkeypatch):
    """The task runs as job `number` of a sweep (`-m`) with the given overrides, as Hydra sets it."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import open_dict

    import inference.cli as cli
    from tests.helpers import compose_config

    monkeypatch.setattr(cli, "_sweep", {"jobs": {}, "refused": {}, "failed": {}}, raising=False)

    def job(number: int, overrides: list[str]) -> None:
        config = compose_config("infer", overrides)
        with open_dict(config):
            config.hydra.mode, config.hydra.job.num = RunMode.MULTIRUN, number
            config.hydra.overrides.task = overrides
        HydraConfig.instance().set_config(config)

    yield job
    HydraConfig.instance().cfg = None


def test_a_refused_job_of_a_sweep_lets_the_other_jobs_run_and_the_sweep_ends_naming_it_with_status_2(
    in_a_sweep, caplog, capsys
):
    """A SystemExit would end the whole sweep at its first refused job, with no word of the others:
    the job fails as Hydra records a job's failure (its message, not a traceback), the next runs."""
    from hydra.errors import CompactHydraException

    from inference.cli import SettingError, run

    @expected_failures()
    def task(cfg):
        if cfg.threshold > 1:
            raise SettingError(f"threshold must be between 0 and 1, got {cfg.threshold}")
        return "scored"

    outcomes = []
    for number, threshold in enumerate([2, 0.5, 3]):
        in_a_sweep(number, [f"threshold={threshold}", "model=m.ckpt"])
        try:
            outcomes.append(task(OmegaConf.create({"threshold": threshold})))
        except CompactHydraException as refused:  # what Hydra prints of it when the sweep ends
            outcomes.append(str(refused))
    refusal = "threshold must be between 0 and 1, got {}"
    assert outcomes == [refusal.format(2), "scored", refusal.format(3)]
    assert "threshold must be between 0 and 1, got 3" in caplog.text  # each refused job's line, as it ran

    def sweep_that_failed():  # Hydra ends a sweep with a failed job so (after its own message)
        raise SystemExit(1)

    with pytest.raises(SystemExit) as stop:
        run(sweep_that_failed)
    assert stop.value.code == EXPECTED_FAILURE
    assert capsys.readouterr().err.splitlines() == [
        "job #0 (threshold=2) was refused: threshold must be between 0 and 1, got 2",
        "job #2 (threshold=3) was refused: threshold must be between 0 and 1, got 3",
    ]


def test_a_sweep_with_a_bug_in_a_job_still_ends_with_status_1_after_naming_its_refused_jobs(in_a_sweep, capsys):
    from hydra.errors import CompactHydraException

    from inference.cli import SettingError, run

    @expected_failures()
    def task(cfg):
        raise SettingError("threshold must be between 0 and 1") if cfg.refuse else KeyError("a bug")

    for number, refuse in enumerate([True, False]):
        in_a_sweep(number, [f"+refuse={refuse}"])
        with pytest.raises(CompactHydraException if refuse else KeyError):
            task(OmegaConf.create({"refuse": refuse}))

    def sweep_that_failed():
        raise SystemExit(1)

    with pytest.raises(SystemExit) as stop:
        run(sweep_that_failed)
    assert stop.value.code == 1
    assert "job #0 (+refuse=True) was refused: threshold must be between 0 and 1" in capsys.readouterr().err
