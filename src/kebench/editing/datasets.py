"""Kedro datasets of the editing pipeline: hparams files, the delta store, the stats cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kedro.io import AbstractDataset, DatasetError

from kebench.editing.hparams import HparamsFiles
from kebench.editing.store import DeltaStore, EditOutcome
from kebench.models.registry import hparams_key


class EditHparamsDataset(AbstractDataset[None, HparamsFiles]):
    """Read-only: every hparams file, ``<path>/<METHOD>/<model>.yaml``, and which
    model's files apply to the run.

    A method without a file for the model gets hparams derived from its architecture
    and a reference model's files (``kebench.editing.hparams``); the model's own file
    overrides the derived values key by key.

    Args:
        path: the hparams folder (``conf/base/hparams``).
        model: ``--params model=``; its registry entry may name another model's files
            (``hparams: llama3-8b`` for the Instruct variant).
        registry: every configured model.
    """

    def __init__(
        self,
        path: str,
        model: str,
        registry: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self._path = Path(path)
        self._model = hparams_key(model, registry or {})
        self.metadata = metadata

    def load(self) -> HparamsFiles:
        found: dict[str, dict[str, dict[str, Any]]] = {}
        for file in sorted(self._path.glob("*/*.yaml")):
            try:
                values = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
            except yaml.YAMLError as err:
                raise DatasetError(f"{file}: not valid YAML ({err})") from err
            if not isinstance(values, dict):
                raise DatasetError(f"{file}: expected a mapping of hparams")
            found.setdefault(file.stem, {})[file.parent.name] = values
        return HparamsFiles(model=self._model, files=found)

    def save(self, data: HparamsFiles) -> None:
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
