"""Per-method metrics: on the run, and on one child run per method with the same keys."""

from __future__ import annotations

import mlflow
from mlflow.tracking import MlflowClient

from kebench.datasets import MlflowMethodMetricsDataset


def test_each_method_gets_one_child_run_shared_by_every_pipeline(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    try:
        experiment = mlflow.set_experiment("methods")
        with mlflow.start_run() as parent:
            MlflowMethodMetricsDataset(prefix="evaluation").save(
                {"ROME": {"direct.edit_succ": 1.0}, "IKE": {"direct.edit_succ": 0.5}}
            )
            MlflowMethodMetricsDataset(prefix="stealthiness").save(
                {"ROME": {"bias.auroc": 0.8}, "IKE": {"bias.auroc": 0.6}}
            )
    finally:
        mlflow.set_tracking_uri(None)
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([experiment.experiment_id])
    run = client.get_run(parent.info.run_id)
    assert run.data.metrics == {
        "evaluation.ROME.direct.edit_succ": 1.0,
        "evaluation.IKE.direct.edit_succ": 0.5,
        "stealthiness.ROME.bias.auroc": 0.8,
        "stealthiness.IKE.bias.auroc": 0.6,
    }
    children = {
        r.data.tags["kebench.method"]: r
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
    }
    assert set(children) == {"ROME", "IKE"}
    assert children["IKE"].data.metrics == {
        "evaluation.direct.edit_succ": 0.5,
        "stealthiness.bias.auroc": 0.6,
    }
    assert set(children["ROME"].data.metrics) == set(children["IKE"].data.metrics)
    assert children["ROME"].info.run_name == "ROME"
    assert children["ROME"].info.status == "FINISHED"


def test_without_an_active_run_nothing_is_logged(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert mlflow.active_run() is None
    mlflow.set_tracking_uri(uri)
    try:
        MlflowMethodMetricsDataset(prefix="evaluation").save({"ROME": {"a": 1.0}})
    finally:
        mlflow.set_tracking_uri(None)
    client = MlflowClient(tracking_uri=uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    assert client.search_runs(experiments) == []
