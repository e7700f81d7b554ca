"""Where train.py's runs go, settled before Hydra writes into them (a Hydra callback, configs/train.yaml).

The run and sweep folders are built from `paths.*`, which read the run's own Hydra config
(`${hydra:runtime.cwd}`): Hydra sets that config before it resolves a single run's folder, but a
sweep's folder is resolved first, before any job, where it is not set yet.
"""

from __future__ import annotations

from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class RunDirectories(Callback):
    """Lets `python train.py -m ...` resolve its sweep folder (`hydra.sweep.dir`) as a single run
    resolves its run folder: from the sweep's own Hydra config, which Hydra sets for each job only."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)  # what Hydra's run_job does before a job's folder
