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


def test_a_curve_is_logged_at_its_steps(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("curves")
        with mlflow.start_run() as parent:
            MlflowMethodMetricsDataset(prefix="lifelong").save(
                {"ROME": {"retention": {0: 1.0, 10: 0.75, 50: 0.25}, "collapse_at": 50}}
            )
    finally:
        mlflow.set_tracking_uri(None)
    client = MlflowClient(tracking_uri=uri)
    history = client.get_metric_history(parent.info.run_id, "lifelong.ROME.retention")
    assert sorted((m.step, m.value) for m in history) == [
        (0, 1.0),
        (10, 0.75),
        (50, 0.25),
    ]
    child = next(
        r
        for r in client.search_runs([parent.info.experiment_id])
        if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
    )
    steps = client.get_metric_history(child.info.run_id, "lifelong.retention")
    assert [m.step for m in sorted(steps, key=lambda m: m.step)] == [0, 10, 50]
    assert child.data.metrics["lifelong.collapse_at"] == 50
