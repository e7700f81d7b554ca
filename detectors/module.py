"""DetectorModule: the LightningModule every detector trains, validates and calibrates under."""

from __future__ import annotations

import functools
import logging
import math
from typing import Any, Mapping

import lightning as L
import numpy as np
import torch
import torch.distributed as dist

from datamodules.records import LayoutError
from detectors.base import Detector
from detectors.build import build_detector, to_plain
from detectors.localization_metrics import SplitPixelMetrics
from evaluation import calibrate_threshold, calibration_check, image_metrics
from evaluation.calibration import (
    GENUINE_IMAGES,
    NON_DUPLICATE_PAIRS,
    calibrate_by_category,
    check_rule,
    too_few_sentence,
)
from evaluation.pixel import f1_within_genuine_fpr

log = logging.getLogger(__name__)


class FirstEpochReads:
    """How many genuine and manipulated training images the first epoch read, and how many it set
    aside as unreadable (with one example), kept as (genuine, manipulated, set aside) counts."""

    def __init__(self) -> None:
        self.counts = torch.zeros(3)  # float32: gathered on any device (MPS has no float64)
        self.example = ""

    def note(self, batch: Mapping[str, Any]) -> None:
        labels = batch.get("label")
        if labels is not None:
            self.counts[:2] += torch.bincount(labels.detach().flatten().cpu().long().clamp(0, 1), minlength=2)[:2]
        errors = batch.get("errors") or []
        self.counts[2] += len(errors)
        if errors and not self.example:
            self.example = "{}: {}".format(*errors[0])


DEFAULT_OPTIMIZER = {"name": "AdamW", "lr": 1e-4, "weight_decay": 0.0}
DEFAULT_SCHEDULER = {"warmup_fraction": 0.05, "min_lr_ratio": 0.0}


def warmup_cosine(step: int, total: int, warmup: int, floor: float = 0.0) -> float:
    """Learning-rate factor at `step` of `total`: linear warm-up over the first `warmup` steps, then
    a cosine from 1 down to `floor` at `total` (held there after)."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def _plain(value: Any) -> int | float:
    """A metric as a plain Python number: whole-number types (counts) as int, the rest as float."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return float(value)


class DetectorModule(L.LightningModule):
    """Optimisation, loss dispatch, whole-split metrics and threshold calibration for one detector.

    Built from plain config values only (`net` holds the detector's `_target_` and arguments) and
    saved with `save_hyperparameters()`, so a checkpoint rebuilds the network without Hydra.
    After every validation the decision threshold is calibrated on the genuine validation images to
    `target_fpr`; it is a buffer, so it travels in every checkpoint and `infer.py` uses it.
    Localizers also get pixel metrics (`SplitPixelMetrics`: at `pixel_threshold`, exact under DDP);
    `contact_cases` best and worst test images are kept for the report's contact sheet.
    """

    def __init__(
        self,
        net: Mapping[str, Any],
        optimizer: Mapping[str, Any] | None = None,
        scheduler: Mapping[str, Any] | None = None,
        target_fpr: float = 0.01,
        name: str | None = None,
        pixel_threshold: float = 0.5,
        contact_cases: int = 4,
        calibrate_by: str | None = None,
        calibration_rule: str = "quantile",
    ) -> None:
        super().__init__()
        net, optimizer, scheduler = to_plain(net), to_plain(optimizer), to_plain(scheduler)
        if calibrate_by not in (None, "category"):
            raise ValueError(f"calibration.by must be null or category, got {calibrate_by!r}")
        check_rule(calibration_rule)
        self.save_hyperparameters(
            {
                "net": net,
                "optimizer": optimizer,
                "scheduler": scheduler,
                "target_fpr": float(target_fpr),
                "name": name,
                "pixel_threshold": float(pixel_threshold),
                "contact_cases": int(contact_cases),
                "calibrate_by": calibrate_by,
                "calibration_rule": calibration_rule,
            }
        )
        self.net: Detector = build_detector(net)
        self.register_buffer("threshold", torch.tensor(0.5))
        self._scores: dict[str, list[tuple[torch.Tensor, ...]]] = {"val": [], "test": []}
        # Per-batch figures of detectors with their own (`net.evaluation_metrics`), averaged per split.
        self._extras: dict[str, list[dict[str, float]]] = {"val": [], "test": []}
        self.stage_metrics: dict[str, dict[str, float]] = {}
        self.stage_scores: dict[str, dict[str, np.ndarray]] = {}
        self._pixels = (
            {
                stage: SplitPixelMetrics(pixel_threshold, keep_cases=contact_cases if stage == "test" else 0)
                for stage in ("val", "test")
            }
            if self.net.is_localizer
            else {}
        )
        self.stage_cases: dict[str, list[tuple]] = {}
        self.calibration: dict[str, Any] | None = None  # how far the last calibration can be trusted
        # calibrate_by=category: {category: threshold} for the categories with enough genuine images
        self.category_thresholds: dict[str, float] = {}
        self._first_epoch: FirstEpochReads | None = None  # what the first training epoch could read

    def forward(self, *images: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.net(*images)

    def on_fit_start(self) -> None:
        trainable = sum(p.numel() for p in self.net.parameters() if p.requires_grad)
        total = sum(p.numel() for p in self.net.parameters())
        log.info(
            "%s: %s trainable of %s parameters",
            self.hparams.name or type(self.net).__name__,
            f"{trainable:,}",
            f"{total:,}",
        )
        check_learnable = getattr(getattr(self.trainer, "datamodule", None), "check_learnable", None)
        if check_learnable is not None:
            check_learnable(self.net.is_localizer)
            self._first_epoch = FirstEpochReads()

    def on_train_epoch_end(self) -> None:
        self._check_first_epoch_reads()

    def _check_first_epoch_reads(self) -> None:
        """After the first training epoch (before its checkpoint): refuse a run that could read no
        image of a class it needs, every one set aside as unreadable (masks of another size, say)."""
        if self._first_epoch is None:
            return
        reads, self._first_epoch = self._first_epoch, None
        counts = self.all_gather(reads.counts.to(self.device)).reshape(-1, 3).sum(0).tolist()
        needed = {1: "manipulated"} if self.net.is_localizer else {0: "genuine", 1: "fake"}
        unread = [name for label, name in needed.items() if counts[label] == 0]
        if unread and counts[2]:
            raise LayoutError(
                f"the first epoch read no {unread[0]} training image: {int(counts[2])} were set aside as "
                f"unreadable, e.g. {reads.example}; mend them (see the warnings above) before training"
            )

    def training_step(self, batch: Mapping[str, Any], batch_idx: int) -> torch.Tensor:
        if self._first_epoch is not None:
            self._first_epoch.note(batch)
        if "label" not in batch:  # every image of the batch was set aside as unreadable (said by collate)
            return sum(p.sum() * 0.0 for p in self.net.parameters() if p.requires_grad)  # DDP still syncs
        outputs = self.net(*self.net.batch_inputs(batch))
        loss = self.net.loss(outputs, batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["label"]))
        return loss

    def on_validation_epoch_start(self) -> None:
        if not self.trainer.sanity_checking:
            self._check_first_epoch_reads()
        self._extras["val"] = []
        self._share_buffers_of_rank_zero()

    def on_test_epoch_start(self) -> None:
        self._extras["test"] = []
        self._share_buffers_of_rank_zero()

    def _share_buffers_of_rank_zero(self) -> None:
        """Make every rank evaluate the model that rank 0 checkpoints.

        Under DDP each rank updates BatchNorm running statistics from its own last batches, so
        without this the ranks would score their shards with slightly different networks.
        """
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            for buffer in self.net.buffers():
                dist.broadcast(buffer, src=0)

    def validation_step(self, batch: Mapping[str, Any], batch_idx: int) -> None:
        self._evaluation_step("val", batch)

    def test_step(self, batch: Mapping[str, Any], batch_idx: int) -> None:
        self._evaluation_step("test", batch)

    def _evaluation_step(self, stage: str, batch: Mapping[str, Any]) -> None:
        if "label" not in batch:  # every image of the batch was set aside as unreadable (said by collate)
            return
        outputs = self.net(*self.net.batch_inputs(batch))
        loss = self.net.loss(outputs, batch)
        self.log(f"{stage}/loss", loss, sync_dist=True, batch_size=len(batch["label"]))
        scores = torch.sigmoid(outputs["logit"].float())
        self._scores[stage].append(
            (batch["index"].detach().cpu(), scores.detach().cpu(), batch["label"].detach().cpu())
        )
        if self._pixels and "mask" in batch:
            self._pixels[stage].update(batch, outputs["mask_logit"])
        if hasattr(self.net, "evaluation_metrics"):
            self._extras[stage].append(self.net.evaluation_metrics(outputs, batch))

    def on_validation_epoch_end(self) -> None:
        gathered = self._gather("val")
        pixel = self._gather_pixels("val")
        if self.trainer.sanity_checking:
            return
        genuine = gathered["score"][gathered["label"] == 0]
        if len(genuine):
            self.threshold.fill_(calibrate_threshold(genuine, self.hparams.target_fpr, self.calibration_rule))
            negatives = NON_DUPLICATE_PAIRS if getattr(self.net, "is_pair_detector", False) else GENUINE_IMAGES
            check = calibration_check(genuine, float(self.threshold), self.hparams.target_fpr, negatives=negatives)
            sources = self._genuine_sources(gathered["index"][gathered["label"] == 0])
            self.calibration = {**check, "rule": self.calibration_rule, **sources}
            if self.hparams.get("calibrate_by") == "category":
                self._calibrate_categories(genuine, gathered["index"][gathered["label"] == 0])
        self._log_metrics("val", gathered, pixel)

    @property
    def calibration_rule(self) -> str:
        return self.hparams.get("calibration_rule", "quantile")  # checkpoints from before the rule: quantile

    def _val_records(self) -> list | None:
        return getattr(getattr(self.trainer, "datamodule", None), "splits", {}).get("val")

    def _genuine_sources(self, index: np.ndarray) -> dict[str, int]:
        """`{"genuine_sources": m}`: how many sources the validation genuines were cut from, where
        the records name them. The calibration counts crops of one source as independent draws,
        which they are not; the report says so beside the count."""
        records = self._val_records()
        genuine = [records[int(i)] for i in index] if records else []
        if not any(record.source for record in genuine):
            return {}
        return {"genuine_sources": len({record.source or record.path for record in genuine})}

    def _calibrate_categories(self, genuine: np.ndarray, index: np.ndarray) -> None:
        """One threshold per category of the validation genuines that has enough of them; the
        others keep the global threshold and are named in the calibration's warning."""
        records = self._val_records()
        if not records:
            log.warning(
                "calibration.by=category: the data module names no validation records; one global threshold is used"
            )
            return
        categories = [records[int(i)].category for i in index]
        result = calibrate_by_category(
            genuine,
            categories,
            self.hparams.target_fpr,
            rule=self.calibration_rule,
            other_categories=[r.category for r in records],  # a category of fakes only is named too
        )
        self.category_thresholds = result["thresholds"]
        self.calibration = {
            **self.calibration,
            "by_category": result["checks"],
            "category_thresholds": result["thresholds"],
            "too_few_by_category": {k: list(v) for k, v in result["too_few"].items()},
        }
        notes = [self.calibration.get("warning")]
        if result["too_few"]:
            few = too_few_sentence(result["too_few"], self.hparams.target_fpr)
            notes.append(f"{few}; they keep the global threshold")
        # a category's own warning (its threshold above every score: its fakes never flagged) is said
        checks = result["checks"].items()
        notes += [f"category {name}: {check['warning']}" for name, check in checks if "warning" in check]
        if warning := " ".join(filter(None, notes)):
            self.calibration["warning"] = warning

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # The calibration check belongs to the threshold saved with these weights, and so do the
        # validation figures it was chosen by (metrics.json describes the checkpoint it tests).
        checkpoint["calibration"] = self.calibration
        checkpoint["category_thresholds"] = dict(self.category_thresholds)
        # plain Python numbers (weights_only loading); counts stay ints: n_pos 130, not 130.0
        checkpoint["val_metrics"] = {key: _plain(value) for key, value in self.stage_metrics.get("val", {}).items()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.calibration = checkpoint.get("calibration")
        self.category_thresholds = dict(checkpoint.get("category_thresholds") or {})
        if "val_metrics" in checkpoint:  # checkpoints saved before it kept them: the last epoch's stay
            self.stage_metrics["val"] = dict(checkpoint["val_metrics"])

    def on_test_epoch_end(self) -> None:
        gathered = self._gather("test")
        self._log_metrics("test", gathered, self._gather_pixels("test"))

    def _gather_pixels(self, stage: str) -> dict[str, float]:
        """Pixel metrics of the whole split (every rank gets the same); {} for classifiers."""
        if not self._pixels:
            return {}
        metrics, self.stage_cases[stage] = self._pixels[stage].compute()
        return metrics

    def _log_metrics(self, stage: str, gathered: dict[str, np.ndarray], pixel: dict[str, float]) -> None:
        metrics = image_metrics(gathered["label"], gathered["score"], threshold=float(self.threshold))
        metrics.update(pixel)
        if pixel:  # what best.ckpt follows for localizers: pixel F1 within the genuine pixels' bound
            metrics["pixel_f1_within_fpr"] = f1_within_genuine_fpr(pixel)
        extras = self._extras[stage]
        for key in sorted({key for extra in extras for key in extra}):
            metrics[key] = float(np.nanmean([extra[key] for extra in extras if key in extra]))
        metrics["threshold"] = float(self.threshold)
        self.stage_metrics[stage] = metrics
        self.stage_scores[stage] = gathered
        # Every rank holds the same gathered values, so no further reduction is needed.
        self.log_dict({f"{stage}/{k}": float(v) for k, v in metrics.items()}, prog_bar=False)

    def _gather(self, stage: str) -> dict[str, np.ndarray]:
        """Index, score and label of the whole split from every rank, each image once (the
        distributed sampler pads ranks with repeated images, which would otherwise count twice)."""
        chunks = self._scores[stage]
        self._scores[stage] = []
        if chunks:
            local = tuple(torch.cat(parts).numpy() for parts in zip(*chunks))
        else:
            local = (np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int64))
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            everything: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(everything, local)
            local = tuple(np.concatenate(parts) for parts in zip(*everything))
        index, scores, labels = local
        _, first = np.unique(index, return_index=True)
        return {"index": index[first], "score": scores[first], "label": labels[first]}

    def configure_optimizers(self) -> dict[str, Any]:
        settings = {**DEFAULT_OPTIMIZER, **(self.hparams.optimizer or {})}
        # null unsets a setting a recipe inherits (an Adam recipe over a detector's SGD momentum)
        settings = {key: value for key, value in settings.items() if value is not None}
        name = settings.pop("name")
        if not hasattr(torch.optim, name):
            raise ValueError(f"optimizer.name={name!r} is not an optimizer in torch.optim")
        params = [p for p in self.net.parameters() if p.requires_grad]
        optimizer = getattr(torch.optim, name)(params, **settings)
        schedule = {**DEFAULT_SCHEDULER, **(self.hparams.scheduler or {})}
        if schedule.get("name", "cosine") == "step":
            # Recipes that decay per epoch (ForgeLens, IAPL): lr * gamma every `step_size` epochs.
            step = torch.optim.lr_scheduler.StepLR(optimizer, int(schedule["step_size"]), float(schedule["gamma"]))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": step, "interval": "epoch"}}
        if schedule.get("name", "cosine") != "cosine":
            raise ValueError(f"scheduler.name must be cosine or step, got {schedule['name']!r}")
        total = max(1, int(self.trainer.estimated_stepping_batches))
        factor = functools.partial(
            warmup_cosine,
            total=total,
            warmup=int(schedule["warmup_fraction"] * total),
            floor=float(schedule["min_lr_ratio"]),
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
