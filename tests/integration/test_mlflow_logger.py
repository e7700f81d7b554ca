"""`logger=mlflow`: a training run is recorded offline in a SQLite store inside its run directory,
and its parameters and metrics read back through MLflow's own client."""

from __future__ import annotations

import pytest

from train import train


@pytest.mark.slow
def test_a_run_logged_to_mlflow_reads_back_its_params_and_metrics(train_config, tmp_path):
    from mlflow.tracking import MlflowClient

    cfg = train_config("logger=mlflow", "+trainer.limit_train_batches=2", "test=false")
    store = cfg.logger.mlflow.tracking_uri
    assert store == f"sqlite:///{tmp_path / 'run'}/mlflow.db"  # offline, in the run directory
    metrics = train(cfg)

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("train")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "npr"
    assert run.data.params["net/_target_"] == "detectors.npr.NPR"
    assert float(run.data.params["target_fpr"]) == cfg.target_fpr
    assert run.data.metrics["val/auroc"] == pytest.approx(metrics["val"]["auroc"])
    assert {"val/loss", "val/ap", "epoch"} <= set(run.data.metrics)
    assert (tmp_path / "run" / "mlflow.db").is_file() and not (tmp_path / "mlruns").exists()
