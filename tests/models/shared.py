"""The real default model, converted once per test session and shared by every test.

Each test folder's conftest exposes it as the session fixture ``lm``; the cache below
makes all of them the same object, so the GGUF is converted and loaded only once.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from kebench.models.loading import LoadedModel, load_model
from kebench.models.registry import model_spec
from kebench.project import load_config

MODEL = "smollm2-135m"


def registry() -> dict:
    """The project's model registry, as configured in conf/base/catalog/06_models.yml."""
    return load_config({})["catalog"]["model"]["registry"]


@cache
def _converted(base: Path) -> LoadedModel:
    return load_model(model_spec(MODEL, registry()), base / "06_models" / MODEL)


def shared_model(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    """SmolLM2-135M-Instruct from its GGUF, converted under the session's temp folder."""
    return _converted(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def lm(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    """The shared model (import this fixture into a test folder's conftest)."""
    return shared_model(tmp_path_factory)


@pytest.fixture(scope="session")
def stats_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Covariance statistics of the session, computed once and shared by every test."""
    return tmp_path_factory.getbasetemp() / "stats"
