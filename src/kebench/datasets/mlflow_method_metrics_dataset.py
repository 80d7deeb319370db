"""Per-method metrics logged to MLflow so that methods line up in the UI's compare view.

A kebench run evaluates one or several methods. Its metrics are logged twice:

- to the run itself, keyed ``<prefix>.<method>.<key>`` (one run shows every method);
- to one child run per method (run name and tag ``kebench.method`` = the method),
  keyed ``<prefix>.<key>``: the same keys for every method, in this run and in any
  other, so selecting child runs in the UI compares methods metric by metric.

Every pipeline of one ``kedro run`` logs into the same child run of a method. A value
may be a mapping ``{step: value}`` (a curve, e.g. a measure per checkpoint of a
lifelong stream): it is logged at those steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import mlflow
from kedro.io import AbstractDataset, DatasetError
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

logger = logging.getLogger(__name__)

METHOD_TAG = "kebench.method"
PARENT_TAG = "mlflow.parentRunId"


def method_run_id(client: MlflowClient, parent: mlflow.ActiveRun, method: str) -> str:
    """The child run of ``method`` under ``parent``, created on first use."""
    children = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'",
    )
    for child in children:
        if child.data.tags.get(METHOD_TAG) == method:
            return child.info.run_id
    # the parent's kebench tags (dataset, model, profile): children group and filter
    # like their parent
    inherited = {
        key: value
        for key, value in client.get_run(parent.info.run_id).data.tags.items()
        if key.startswith("kebench.")
    }
    child = client.create_run(
        parent.info.experiment_id,
        run_name=method,
        tags={**inherited, PARENT_TAG: parent.info.run_id, METHOD_TAG: method},
    )
    client.log_param(child.info.run_id, "method", method)
    return child.info.run_id


Values = dict[str, dict[str, float | Mapping[int, float]]]


def _metrics(values: Mapping[str, Any], prefix: str, now: int) -> list[Metric]:
    """MLflow metrics of ``{key: value or {step: value}}``, keys after ``prefix``."""
    metrics = []
    for key, value in values.items():
        steps = value if isinstance(value, Mapping) else {0: value}
        metrics += [
            Metric(f"{prefix}{key}", float(v), now, int(step))
            for step, v in steps.items()
        ]
    return metrics


class MlflowMethodMetricsDataset(AbstractDataset[Values, None]):
    """Write-only: ``{method: {key: value}}`` logged to the active MLflow run and to
    each method's child run (see the module). Without an active run (a pipeline run
    outside ``kedro run``), nothing is logged.

    Args:
        prefix: the pipeline's name, first in every key.
    """

    def __init__(self, prefix: str, metadata: dict[str, Any] | None = None) -> None:
        self._prefix = prefix
        self.metadata = metadata

    def save(self, data: Values) -> None:
        parent = mlflow.active_run()
        if parent is None:
            logger.info("no active MLflow run: %s metrics not logged", self._prefix)
            return
        client = MlflowClient()
        now = int(time.time() * 1000)
        flat = [
            metric
            for method, values in data.items()
            for metric in _metrics(values, f"{self._prefix}.{method}.", now)
        ]
        client.log_batch(parent.info.run_id, metrics=flat)
        for method, values in data.items():
            run_id = method_run_id(client, parent, method)
            metrics = _metrics(values, f"{self._prefix}.", now)
            client.log_batch(run_id, metrics=metrics)
            # finished between pipelines; a later pipeline of the run may log again
            client.set_terminated(run_id)

    def load(self) -> None:
        raise DatasetError("metrics are write-only; read them in the MLflow UI")

    def _describe(self) -> dict[str, Any]:
        return {"prefix": self._prefix}
