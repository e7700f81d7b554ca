"""How train.py "trains" a detector without gradients (`fit_without_gradients`).

Pair detectors (`is_pair_detector`): fit the score models on the `train` pair set, calibrate the
threshold to `target_fpr` on the `val` set's non-duplicate pairs (`evaluation.calibrate_threshold`,
as every detector is calibrated on genuine images), measure the `test` set, and save the result as
an ordinary checkpoint (`checkpoints/best.ckpt` and `last.ckpt`, loadable by `infer.py`).
Image localizers: calibrate on the genuine validation images and test, through Lightning's
validate / test loops like any detector, then save the checkpoint.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from detectors.duplication import PairDuplicationDetector
from detectors.matching import Panel
from detectors.pair_matching import PairMatch
from evaluation import calibrate_threshold, calibration_check, write_metrics_json
from evaluation.calibration import NON_DUPLICATE_PAIRS
from evaluation.protocols.duplication import cmo_set, duplication_metrics, pair_pixel_counts, rates_by_kind

log = logging.getLogger(__name__)


def match_pair_set(detector: PairDuplicationDetector, pair_set: Any) -> list[PairMatch]:
    """Match every pair of a `synthesis.pair_set.PairSet`, describing each panel once."""
    described: dict[str, Panel] = {}

    def panel(key: str) -> Panel:
        if key not in described:
            described[key] = detector.describe(pair_set.panels[key])
        return described[key]

    return [detector.match(panel(p.id_a), panel(p.id_b)) for p in pair_set.pairs]


def has_parameter(operations: Sequence[str]) -> int:
    return int("parameter" in cmo_set(operations))


def evaluate_pair_set(
    detector: PairDuplicationDetector, pair_set: Any, threshold: float, matches: Sequence[PairMatch] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics (`evaluation.protocols.duplication`) and one row per pair, with per-kind rates."""
    matches = list(matches) if matches is not None else match_pair_set(detector, pair_set)
    rows, counts = [], []
    for pair, match in zip(pair_set.pairs, matches):
        score = detector.score(match)
        duplicated = score >= threshold
        predicted = detector.operations(match)[0] if duplicated else []
        rows.append(
            {
                "kind": pair.kind,
                "source": pair.source,
                "label": pair.label,
                "score": score,
                "predicted": set(predicted),
                "truth": cmo_set(pair.operations) if pair.label else set(),
                "method": match.method,
            }
        )
        if pair.mask_a is not None:
            empty = (np.zeros(match.mask_a.shape, bool), np.zeros(match.mask_b.shape, bool))
            pred_a, pred_b = (match.mask_a, match.mask_b) if duplicated else empty
            counts.append(pair_pixel_counts(pair.mask_a, pair.mask_b, pred_a, pred_b))
        else:
            counts.append(None)
    metrics = duplication_metrics(rows, threshold, counts)
    metrics["by_kind"] = rates_by_kind(rows, threshold)
    return metrics, rows


def fit_pair_detector(
    detector: PairDuplicationDetector, splits: Mapping[str, Any], target_fpr: float, rule: str = "quantile"
) -> dict[str, Any]:
    """Fit on `train`, calibrate on `val`, measure `test` (when given); returns the figures."""
    started = time.perf_counter()
    train = splits["train"]
    matches = match_pair_set(detector, train)
    fitted = detector.fit(
        matches, [p.label for p in train.pairs], [has_parameter(p.operations) if p.label else None for p in train.pairs]
    )
    log.info("score models fitted on %(score_pairs)d pairs (%(parameter_pairs)d for parameters)", fitted)
    val = splits["val"]
    val_matches = match_pair_set(detector, val)
    negatives = np.asarray([detector.score(m) for m, p in zip(val_matches, val.pairs) if p.label == 0])
    threshold = calibrate_threshold(negatives, target_fpr, rule)
    check = {**calibration_check(negatives, threshold, target_fpr, negatives=NON_DUPLICATE_PAIRS), "rule": rule}
    result: dict[str, Any] = {
        "threshold": threshold,
        "calibration": check,
        "fitted": fitted,
        "val": evaluate_pair_set(detector, val, threshold, val_matches)[0],
    }
    if "test" in splits:
        result["test"] = evaluate_pair_set(detector, splits["test"], threshold)[0]
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def save_checkpoint(module: Any, path: Path, calibration: dict[str, Any] | None) -> Path:
    """An ordinary toolkit checkpoint (hyper-parameters + state dict + calibration), weights only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict(), "calibration": calibration}, path
    )
    return path


def train_training_free(
    cfg: Any,
    module: Any,
    data: Any,
    callbacks: list[Any],
    checked: Callable[[str], AbstractContextManager[Any]] = lambda group: nullcontext(),
) -> tuple[dict[str, Any], Any]:
    """train.py's path for `fit_without_gradients` detectors (see the module docstring); `data` is
    the data config train.py chose for this detector, `callbacks` its instantiated callbacks, and
    `checked(group)` the context train.py builds a config group in (a setting no constructor takes
    is refused by name). Returns metrics.json's payload and the image data module (None for pair
    detectors), whose test split train.py reports on as for every detector."""
    import hydra
    from omegaconf import OmegaConf

    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    checkpoints = output_dir / "checkpoints"
    if getattr(module.net, "is_pair_detector", False):
        with checked("data"):
            splits = hydra.utils.instantiate(
                data, splits=["train", "val", "test"] if cfg.get("test") else ["train", "val"], _convert_="all"
            )
        result = fit_pair_detector(module.net, splits, float(cfg.target_fpr), module.calibration_rule)
        module.threshold.fill_(result["threshold"])
        module.calibration = result["calibration"]
        metrics, datamodule = {"detector": cfg.detector.get("name"), **result}, None
    else:
        with checked("data"):
            datamodule = hydra.utils.instantiate(data, preprocess=module.net.preprocess.to_dict(), _convert_="all")
        with checked("trainer"):
            trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=False)
        trainer.validate(module, datamodule=datamodule)  # calibrates the threshold on genuine images
        metrics = {
            "detector": cfg.detector.get("name"),
            "val": module.stage_metrics.get("val", {}),
            "calibration": module.calibration,
        }
        if cfg.get("test"):
            trainer.test(module, datamodule=datamodule)
            metrics = {**module.stage_metrics.get("test", {}), **metrics}
    for name in ("best.ckpt", "last.ckpt"):
        save_checkpoint(module, checkpoints / name, module.calibration)
    metrics["checkpoint"] = str(checkpoints / "best.ckpt")
    write_metrics_json(output_dir / "metrics.json", metrics)
    log.info(
        "training-free %s: threshold %.4f -> %s", metrics["detector"], float(module.threshold), metrics["checkpoint"]
    )
    return metrics, datamodule
