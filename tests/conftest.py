"""Shared fixtures: the reference data folder and a hermetic environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kebench  # noqa: F401 - its OpenMP setting must precede torch's import

PROJECT_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def _hermetic_environment(tmp_path_factory: pytest.TempPathFactory) -> None:
    """No telemetry, and MLflow runs go to a throwaway SQLite store."""
    os.environ["KEDRO_DISABLE_TELEMETRY"] = "1"
    store = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{store}"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The reference data (``KEBENCH_DATA_DIR``, default ``../shared/data``)."""
    path = Path(
        os.environ.get("KEBENCH_DATA_DIR", PROJECT_ROOT.parent / "shared" / "data")
    )
    if not path.is_dir():
        pytest.skip(f"reference data not found at {path}; set KEBENCH_DATA_DIR")
    return path
