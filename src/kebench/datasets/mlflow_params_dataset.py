"""Run parameters logged to the active MLflow run (kedro-mlflow logs metrics and
artifacts through its own datasets, but parameters only from ``params:`` inputs)."""

from __future__ import annotations

import logging
from typing import Any

import mlflow
from kedro.io import AbstractDataset, DatasetError

logger = logging.getLogger(__name__)

# MLflow refuses parameter values longer than this.
MAX_VALUE_LENGTH = 6000


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``, values as (truncated) strings."""
    flat: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= flatten(value, f"{name}.")
        else:
            flat[name] = str(value)[:MAX_VALUE_LENGTH]
    return flat


class MlflowParamsDataset(AbstractDataset[dict[str, Any], None]):
    """Write-only: log a nested dict as parameters of the active MLflow run; without
    an active run (a pipeline run outside ``kedro run``), nothing is logged."""

    def __init__(self, metadata: dict | None = None) -> None:
        self.metadata = metadata

    def save(self, data: dict[str, Any]) -> None:
        if mlflow.active_run() is None:
            logger.info("no active MLflow run: run parameters not logged")
            return
        mlflow.log_params(flatten(data))

    def load(self) -> None:
        raise DatasetError("run parameters are write-only; read them in the MLflow UI")

    def _describe(self) -> dict[str, Any]:
        return {}
