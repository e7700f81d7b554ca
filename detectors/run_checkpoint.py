"""The checkpoint of the best validation epoch, kept across a resume into a new run directory."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from datamodules.records import SettingError

log = logging.getLogger(__name__)


class RunCheckpoint(ModelCheckpoint):
    """Lightning's `ModelCheckpoint`, whose best survives a resume into another directory.

    A run resumed with `ckpt_path` writes a new run directory; Lightning then forgets the best
    score so far (it reloads it only into the same directory), so the resumed run's first epoch
    becomes its "best" however poor, and the run tests it. Here the best checkpoint so far is
    copied into the new directory and its score is the one to beat: the run keeps and tests the
    best epoch of the whole run, as it would have uninterrupted.

    A best score is only comparable with scores measured the same way: `evaluated_with` (the
    validation data, target FPR and calibration settings, set by train.py) travels in the state, and a
    resume with other ones chooses its best among its own epochs, said (its test would otherwise
    have been the earlier run's checkpoint at the earlier threshold). So it does, said, when the
    earlier best file is no longer where it was (only `last.ckpt` copied to another machine)."""

    evaluated_with: dict[str, Any] | None = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A `monitor` this detector's validation does not log is said in one line, with the figures
        it does log (Lightning says it with a traceback)."""
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking  # when a checkpoint is kept
        if self.monitor and fitting and self.monitor not in trainer.callback_metrics:
            logged = sorted(key for key in trainer.callback_metrics if key.startswith("val/"))
            raise SettingError(
                f"monitor={self.monitor} is not a figure this detector's validation gives; it gives "
                f"{', '.join(logged) or 'none'}"
            )
        super().on_validation_end(trainer, pl_module)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "evaluated_with": self.evaluated_with}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        before, best = state_dict.get("dirpath"), state_dict.get("best_model_path") or ""
        score = state_dict.get("best_model_score")
        measured = state_dict.get("evaluated_with")
        if measured is not None and self.evaluated_with is not None and measured != self.evaluated_with:
            changed = sorted(k for k in self.evaluated_with if measured.get(k) != self.evaluated_with[k])
            log.warning(
                "this run validates otherwise than the run it resumes (%s changed): the best checkpoint is chosen "
                "among this run's epochs, not against the earlier best (%s)",
                ", ".join(changed),
                best or "none",
            )
            return
        if score is not None and best and not Path(best).is_file():
            log.warning(
                "the resumed run's best checkpoint %s is not on this machine: the best is chosen among the "
                "epochs from here on",
                best,
            )
            return
        if self.dirpath and before and before != self.dirpath and score is not None and Path(best).is_file():
            kept = Path(self.dirpath) / Path(best).name
            kept.parent.mkdir(parents=True, exist_ok=True)
            if not kept.exists():
                shutil.copy2(best, kept)
            state_dict = {
                **state_dict,
                "dirpath": self.dirpath,
                "best_model_path": str(kept),
                "best_k_models": {str(kept): score},
                "kth_best_model_path": str(kept),
                "kth_value": score,
                "last_model_path": "",
            }
        super().load_state_dict(state_dict)


def keep_last_of_a_finished_run(trainer: L.Trainer, ckpt_path: str | None) -> None:
    """A resume of a run that had already trained its `max_epochs` trains nothing, so Lightning
    writes no checkpoint: a new run directory would hold `best.ckpt` (copied above) but no
    `last.ckpt` to resume from again. The checkpoint resumed from, the state the run ends in, is
    copied there as `last.ckpt`, and the run says it trained nothing."""
    if not ckpt_path or not trainer.is_global_zero or trainer.interrupted:  # stopped by the user: not finished
        return
    for callback in trainer.checkpoint_callbacks:
        if not isinstance(callback, ModelCheckpoint) or callback.monitor is not None or not callback.dirpath:
            continue
        last = Path(callback.dirpath) / f"{callback.filename or 'last'}{callback.FILE_EXTENSION}"
        if last.exists():
            continue
        last.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ckpt_path, last)
        log.warning(
            "the run resumed from %s had already ended (epochs done: %d, trainer.max_epochs=%s): nothing was trained; "
            "that checkpoint is kept as %s (raise trainer.max_epochs to train on)",
            ckpt_path,
            trainer.current_epoch,
            trainer.max_epochs,
            last,
        )
