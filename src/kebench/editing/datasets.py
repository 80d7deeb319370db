"""Kedro datasets of the editing pipeline: hparams files, the delta store, the stats cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kedro.io import AbstractDataset, DatasetError

from kebench.editing.store import DeltaStore, EditOutcome


class EditHparamsDataset(AbstractDataset[None, dict[str, dict[str, Any]]]):
    """Read-only: every method's hparams for one model, ``<path>/<METHOD>/<model>.yaml``.

    Args:
        path: the hparams folder (``conf/base/hparams``).
        model: the registry name of the model, e.g. ``smollm2-135m``.
    """

    def __init__(
        self, path: str, model: str, metadata: dict[str, Any] | None = None
    ) -> None:
        self._path = Path(path)
        self._model = model
        self.metadata = metadata

    def load(self) -> dict[str, dict[str, Any]]:
        found = {}
        for file in sorted(self._path.glob(f"*/{self._model}.yaml")):
            values = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
            if not isinstance(values, dict):
                raise DatasetError(f"{file}: expected a mapping of hparams")
            found[file.parent.name] = values
        return found

    def save(self, data: dict[str, dict[str, Any]]) -> None:
        raise DatasetError("hparams are configuration; kebench never writes them")

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path), "model": self._model}


class DeltaStoreDataset(AbstractDataset[EditOutcome, DeltaStore]):
    """The deltas and manifest rows of one model on one dataset.

    ``load`` gives the store (what earlier runs finished, possibly killed ones);
    ``save`` stores one ``EditOutcome``, so a generator node saves edit by edit.

    Args:
        filepath: the store's folder.
    """

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = Path(filepath)
        self.metadata = metadata

    def load(self) -> DeltaStore:
        return DeltaStore(self._filepath)

    def save(self, data: EditOutcome) -> None:
        DeltaStore(self._filepath).write(data)

    def _exists(self) -> bool:
        return self._filepath.is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class StatsCacheDataset(AbstractDataset[None, Path]):
    """Read-only: the folder where covariance statistics are cached, created on demand.

    Args:
        filepath: the folder (``data/06_models/stats``).
    """

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = Path(filepath)
        self.metadata = metadata

    def load(self) -> Path:
        return self._filepath

    def save(self, data: Path) -> None:
        raise DatasetError("statistics are written by the methods that compute them")

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}
