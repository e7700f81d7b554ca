"""The checkpoint of the best validation epoch, kept across a resume into a new run directory."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint


class RunCheckpoint(ModelCheckpoint):
    """Lightning's `ModelCheckpoint`, whose best survives a resume into another directory.

    A run resumed with `ckpt_path` writes a new run directory; Lightning then forgets the best
    score so far (it reloads it only into the same directory), so the resumed run's first epoch
    becomes its "best" however poor, and the run tests it. Here the best checkpoint so far is
    copied into the new directory and its score is the one to beat: the run keeps and tests the
    best epoch of the whole run, as it would have uninterrupted."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        before, best = state_dict.get("dirpath"), state_dict.get("best_model_path") or ""
        score = state_dict.get("best_model_score")
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
