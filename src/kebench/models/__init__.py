"""Pretrained causal LMs from the model registry: loading, caching, devices."""

from kebench.models.loading import LoadedModel, load_model
from kebench.models.registry import (
    ModelDoesNotFitError,
    ModelError,
    ModelSpec,
    ModelUnavailableError,
    model_spec,
)

__all__ = [
    "LoadedModel",
    "ModelDoesNotFitError",
    "ModelError",
    "ModelSpec",
    "ModelUnavailableError",
    "load_model",
    "model_spec",
]
