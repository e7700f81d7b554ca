"""Train, calibrate and test a detector.

python train.py [detector=NAME] [data=NAME] [trainer=NAME] [key=value ...]
"""

from __future__ import annotations

import logging
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.errors import InstantiationException
from lightning.fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf

from datamodules.io import looked_for
from datamodules.records import LayoutError
from detectors.blocks.released import IncompatibleWeightsError
from detectors.blocks.weights import MissingWeightsError
from detectors.build import MissingPackageError
from detectors.module import DetectorModule
from detectors.registry import create_module
from detectors.run_checkpoint import RunCheckpoint, keep_last_of_a_finished_run
from detectors.run_config import (
    apply_data_preprocess,
    check_data_overrides,
    check_localizer_data,
    check_pair_data,
    check_required,
    check_setting_types,
    check_trainer,
    data_config,
    evaluation_settings,
    weights_settings,
)
from detectors.run_directory import claimed_run_directory
from evaluation import calibration_markdown, report_records, write_metrics_json
from evaluation.calibration import row_thresholds
from evaluation.pixel import PIXEL_KEYS, PIXEL_PROTOCOL
from evaluation.summary import run_summary
from inference.cli import SettingError, expected_cause, expected_failures, run
from inference.recalibration import open_fraction
from synthesis.common import PairDataError

log = logging.getLogger("train")


def instantiate_group(group: DictConfig | None, name: str = "callbacks") -> list[Any]:
    """Every `_target_` entry of a config group such as `callbacks` or `logger`; one whose package
    is not installed (`logger=tensorboard` without tensorboard) is refused as a setting to fix, and
    so is a setting its class does not take, named by its key (`callbacks.model_checkpoint.foo`)."""
    made = []
    for key, entry in (group or {}).items():
        if not (isinstance(entry, DictConfig) and "_target_" in entry):
            continue
        try:
            with settings_checked(f"{name}.{key}"):
                made.append(hydra.utils.instantiate(entry))
        except InstantiationException as error:
            if not isinstance(error.__cause__, ImportError):
                raise
            raise LayoutError(f"{entry._target_} needs a package that is not installed: {error.__cause__}") from None
    return made


def check_resume(ckpt_path: str | None, module: Any) -> None:
    """A `ckpt_path` to resume from exists and holds this detector's weights: said before any data
    is made (Lightning would say it after, with a traceback)."""
    if not ckpt_path:
        return
    if Path(ckpt_path).is_dir():
        raise MissingWeightsError(f"ckpt_path {ckpt_path} is a folder: give a checkpoint file (checkpoints/last.ckpt)")
    if not Path(ckpt_path).is_file():
        raise MissingWeightsError(f"ckpt_path {ckpt_path} does not exist{looked_for(ckpt_path)}")
    if not zipfile.is_zipfile(ckpt_path):  # what torch.save writes; its own error on another file misleads
        raise IncompatibleWeightsError(
            f"ckpt_path {ckpt_path} is not a checkpoint this toolkit reads: give a .ckpt train.py wrote"
        )
    try:  # weights only: a checkpoint that would run code is refused here too
        saved = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
        saved = saved["state_dict"] if isinstance(saved, dict) and isinstance(saved.get("state_dict"), dict) else None
    except Exception as error:  # whatever an unreadable or foreign file makes the unpickler raise
        raise IncompatibleWeightsError(
            f"ckpt_path {ckpt_path} is not a checkpoint this toolkit reads: {error}"
        ) from None
    if saved is None:
        raise IncompatibleWeightsError(f"ckpt_path {ckpt_path} is not a checkpoint this toolkit reads: no state_dict")
    own = module.state_dict()
    differ = sorted(
        k for k in own.keys() | saved.keys() if k not in saved or k not in own or saved[k].shape != own[k].shape
    )
    if differ:
        raise IncompatibleWeightsError(
            f"ckpt_path {ckpt_path} holds the weights of another detector or size ({len(differ)} tensors differ, "
            f"e.g. {differ[0]}): resume with the detector= and detector.net settings it was trained with"
        )


@contextmanager
def settings_checked(group: str) -> Iterator[None]:
    """Constructors check their settings and raise a ValueError naming the one that is wrong (a mode
    that does not exist, a key the class does not take): said in one line with its config group
    (exit 2; `debug=true` shows the traceback), as the refusals of data are. A key the constructor
    has no argument for (`+data.<typo>=...`: Python's TypeError) is named with the group's key."""
    try:
        yield
    except Exception as error:
        cause = expected_cause(error, (ValueError, MisconfigurationException, TypeError))  # trainer=gpu, no GPU
        if isinstance(cause, TypeError) and "unexpected keyword argument" in str(cause):
            target = re.search(r"call to target '([\w.]+)'", str(error))  # Hydra's: the class the config names
            taker = (target[1] if target else str(cause).split("(")[0].removesuffix(".__init__")).split(".")[-1]
            key = str(cause).rsplit(" ", 1)[-1].strip("'")
            raise SettingError(f"{group}.{key} is not a setting of {taker}: check its spelling") from error
        if cause is None or isinstance(cause, (LayoutError, TypeError)):  # a layout refusal is said as it is
            raise
        raise SettingError(f"{group}: {cause}") from error


@contextmanager
def weights_named(net: DictConfig) -> Iterator[None]:
    """Missing weights said with the settings of this detector that name weights."""
    try:
        yield
    except MissingWeightsError as error:
        raise MissingWeightsError(f"{error}\n{weights_settings(net)}".rstrip()) from None


def keep_earlier_logs(trainer: L.Trainer, output_dir: Path, ckpt_path: str | None) -> None:
    """A run resumed in its own directory would have its CSV log started anew (Lightning replaces a
    log folder's files): the earlier rows are kept beside it as `metrics.before_resume_<n>.csv`."""
    if not ckpt_path or output_dir.resolve() not in Path(ckpt_path).resolve().parents:
        return
    for logger in trainer.loggers:
        earlier = Path(getattr(logger, "log_dir", "") or "") / "metrics.csv"
        if earlier.is_file():
            kept = earlier.with_name(f"metrics.before_resume_{len(list(earlier.parent.glob('metrics.before_*')))}.csv")
            earlier.rename(kept)
            log.info("the log of the run before this resume is kept as %s", kept)


def module_for(cfg: DictConfig) -> Any:
    """The detector's trainable module, calibrated as `target_fpr` and `calibration` say."""
    calibration = cfg.get("calibration") or {}
    with settings_checked("detector"), weights_named(cfg.detector.net):
        return create_module(
            cfg.detector,
            target_fpr=open_fraction("target_fpr", cfg.target_fpr),  # a bad one said before training
            calibrate_by=calibration.get("by"),
            calibration_rule=calibration.get("rule", "quantile"),
        )


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit on the train split, calibrate on val, test the best checkpoint; returns metrics.json. The
    run directory is claimed first (a run of train.py claimed it before Hydra wrote into it), and
    given back when a check refuses the run."""
    output_dir = Path(cfg.paths.output_dir)
    with claimed_run_directory(output_dir, cfg.get("ckpt_path")):
        if cfg.get("seed") is not None:
            L.seed_everything(cfg.seed, workers=True)
        check_required(cfg)
        apply_data_preprocess(cfg)
        module = module_for(cfg)
        check_pair_data(cfg.data, module.net)
        check_localizer_data(cfg.data, module.net)
        check_data_overrides(cfg.data, module.net.is_localizer)
        check_resume(cfg.get("ckpt_path"), module)
        data = data_config(cfg.data, module.net.is_localizer, cfg.detector.get("augment"))
        check_setting_types("data", data)
        check_trainer(cfg.trainer)
        return fit_and_test(cfg, module, data, output_dir)


def fit_and_test(cfg: DictConfig, module: DetectorModule, data: DictConfig, output_dir: Path) -> dict[str, Any]:
    """`train`'s work inside its claimed run directory, on the DataModule config `data`."""
    if getattr(module.net, "fit_without_gradients", False):  # matching-based detectors: fit + calibrate only
        from detectors.training_free import train_training_free

        callbacks = instantiate_group(cfg.get("callbacks"))
        metrics, datamodule = train_training_free(cfg, module, data, callbacks, checked=settings_checked)
        return report_and_summary(cfg, output_dir, module, datamodule, metrics)
    if cfg.get("monitor", "auto") == "auto":
        cfg.monitor = "val/pixel_f1_within_fpr" if module.net.is_localizer else "val/auroc"
    with settings_checked("data"):
        datamodule = hydra.utils.instantiate(data, preprocess=module.net.preprocess.to_dict(), _convert_="all")
    callbacks = instantiate_group(cfg.get("callbacks"))
    for callback in callbacks:  # what its best score is measured on, compared on a resume
        if isinstance(callback, RunCheckpoint):
            callback.evaluated_with = evaluation_settings(cfg, data)
    loggers = instantiate_group(cfg.get("logger"), "logger") or False
    with settings_checked("trainer"):
        trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
    keep_earlier_logs(trainer, output_dir, cfg.get("ckpt_path"))
    if trainer.is_global_zero:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    keep_last_of_a_finished_run(trainer, cfg.get("ckpt_path"))
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.get("test"):  # restores best's threshold, calibration and validation figures
        trainer.test(module, datamodule=datamodule, ckpt_path=best or None)
    elif best:  # metrics.json describes the checkpoint kept, not the last epoch
        module.on_load_checkpoint(torch.load(best, map_location="cpu", weights_only=True))
    metrics: dict[str, Any] = {"detector": cfg.detector.get("name"), "val": module.stage_metrics.get("val", {})}
    metrics = {**module.stage_metrics.get("test", {}), **metrics, "checkpoint": best or None}
    if module.calibration is not None:
        metrics["calibration"] = module.calibration
    if trainer.is_global_zero and cfg.get("test") and getattr(module.net, "is_pair_detector", False):
        from detectors.pair_net import evaluate_pair_network

        # the pair protocol dup_sift is measured by: operations, pair decisions and masks at full size
        metrics["duplication"] = evaluate_pair_network(
            module.net, datamodule.pair_sets["test"], float(module.threshold)
        )
    return report_and_summary(cfg, output_dir, module, datamodule, metrics) if trainer.is_global_zero else metrics


def report_and_summary(
    cfg: DictConfig, output_dir: Path, module: DetectorModule, datamodule: Any, metrics: dict[str, Any]
) -> dict[str, Any]:
    """metrics.json, and the test report where the test split was scored; the closing summary."""
    if "test" in module.stage_scores and datamodule is not None:
        metrics = write_test_report(
            output_dir, module, datamodule.splits["test"], metrics, html=cfg.get("report", "md") == "html"
        )
    else:
        write_metrics_json(output_dir / "metrics.json", metrics)
        if isinstance(metrics.get("test"), dict):  # a pair detector fitted without gradients: its pair figures
            write_pair_report(output_dir, metrics, html=cfg.get("report", "md") == "html")
    log.info("%s", run_summary(metrics, output_dir))
    if (metrics.get("calibration") or {}).get("warning"):
        log.warning("calibration: %s", metrics["calibration"]["warning"])
    elif not metrics.get("calibration"):
        log.warning(
            "calibration: no genuine validation image was scored, so the threshold %g is the default, not "
            "calibrated; calibrate it on genuine images of your own: python calibrate.py model=<checkpoint> "
            "input=<genuine images>",
            float(module.threshold),
        )
    return metrics


def write_test_report(
    output_dir: Path, module: DetectorModule, test_records: list, extra: dict[str, Any], html: bool = False
) -> dict[str, Any]:
    """report.md, figures and metrics.json (with per-group breakdowns and bootstrap intervals) for
    the test split, at the threshold calibrated on validation genuines; validation figures nest
    under `val`. `html`: also report.html, the test images for a person to look through."""
    scored = module.stage_scores["test"]
    rows = [
        {**test_records[int(i)].to_row(), "label": int(label), "score": float(score)}
        for i, label, score in zip(scored["index"], scored["label"], scored["score"])
    ]
    threshold = float(module.threshold)
    pixel = {k: v for k, v in module.stage_metrics["test"].items() if k in PIXEL_KEYS}
    sheet = [
        (image, mask, prob.astype("float32"), f"{Path(test_records[index].path).name}  pixel F1 {f1:.2f}")
        for f1, index, image, mask, prob in module.stage_cases.get("test", [])
    ]
    if pixel:
        extra = {**extra, "pixel_protocol": PIXEL_PROTOCOL}
    report = report_records(
        output_dir,
        rows,
        threshold=threshold,
        calibrated_threshold=threshold,
        category_thresholds=module.category_thresholds or None,
        target_tnr=1.0 - module.hparams.target_fpr,
        title=f"Test report: {extra.get('detector')}",
        pixel=pixel or None,
        contact_sheet=sheet or None,
        extra=extra,
    )
    notes = [calibration_markdown(extra["calibration"])] if extra.get("calibration") else []
    if pixel:
        notes.append(f"Pixel metrics: {PIXEL_PROTOCOL}. Contact sheet: the worst and best test images by pixel F1.")
    if notes:
        markdown = report.files["report"]
        markdown.write_text(markdown.read_text() + "\n" + "\n\n".join(notes) + "\n")
    if html:
        from inference.html_report import write_run_report

        # a record's `mask` is the true mask; the page's maps are predictions, which a test run does not save
        page_rows = [{k: v for k, v in row.items() if k != "mask"} for row in rows]
        if module.category_thresholds:  # each image shown at the threshold that decided it
            own = row_thresholds([row.get("category") for row in rows], module.category_thresholds, threshold)
            page_rows = [{**row, "threshold": float(cut)} for row, cut in zip(page_rows, own)]
        page = write_run_report(
            output_dir / "report.html",
            page_rows,
            model=extra.get("checkpoint"),
            detector=str(extra.get("detector")),
            threshold=threshold,
            calibration=extra.get("calibration"),
            category_thresholds=module.category_thresholds or None,
            input="the test split",
            metrics=report.metrics,
            plots=sorted(str(p) for p in report.files.values() if str(p).endswith(".png")),
        )
        log.info("report for people to read: %s", page)
    return {**module.stage_metrics["test"], **report.metrics}


def write_pair_report(output_dir: Path, metrics: dict[str, Any], html: bool) -> None:
    """report.md of a pair detector fitted without gradients: its held-out and validation pair
    figures, and how far its calibration on pairs without duplication can be trusted. Its pairs are
    drawn in memory, with no files to show: `report=html` is said to need infer.py on pair files."""
    from evaluation.atomic import atomic_path
    from evaluation.report import pair_figures_markdown

    lines = [f"# Test report: {metrics.get('detector')}", ""]
    lines += pair_figures_markdown("Test pairs", metrics["test"])
    lines += pair_figures_markdown("Validation pairs", metrics.get("val") or {})
    if metrics.get("calibration"):
        lines += [calibration_markdown(metrics["calibration"]), ""]
    with atomic_path(output_dir / "report.md") as written:  # whole or not at all, as every report
        written.write_text("\n".join(lines), encoding="utf-8")
    if html:
        log.warning(
            "report=html: this detector's pairs were drawn in memory, with no image files for a page; its report "
            "is %s. For a page of pairs: python infer.py model=<its best.ckpt> input=<a folder or pair manifest> "
            "report=html",
            output_dir / "report.md",
        )


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
@expected_failures(MissingWeightsError, MissingPackageError, IncompatibleWeightsError, LayoutError, PairDataError)
def main(cfg: DictConfig) -> None:
    train(cfg)


if __name__ == "__main__":
    run(main, config_name="train")
