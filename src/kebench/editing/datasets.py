"""Kedro datasets of the editing pipeline: hparams files and the delta store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kedro.io import AbstractDataset, DatasetError

from kebench.editing.hparams import FAITHFUL, FAST, HparamsFiles
from kebench.editing.store import DeltaStore, EditOutcome
from kebench.models.registry import hparams_key


class EditHparamsDataset(AbstractDataset[None, HparamsFiles]):
    """Read-only: every hparams file, ``<path>/<METHOD>/<model>.yaml``, the run
    profile's overlays, ``<path>/<METHOD>/<profile>/<model>.yaml``, the fast profile's
    (whose covariance counts derived hparams take by default), and which model's files
    apply to the run.

    A method without a file for the model gets hparams derived from its architecture
    and a reference model's files (``kebench.editing.hparams``); the model's own file
    overrides the derived values key by key.

    Args:
        path: the hparams folder (``conf/base/hparams``).
        model: ``--params model=``; its registry entry may name another model's files
            (``hparams: llama3-8b`` for the Instruct variant).
        registry: every configured model.
        profile: ``faithful`` (the files themselves) or the name of an overlay folder
            (``--params hparams_profile=fast``).
    """

    def __init__(
        self,
        path: str,
        model: str,
        registry: dict[str, Any] | None = None,
        profile: str = FAITHFUL,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self._path = Path(path)
        self._model = hparams_key(model, registry or {})
        self._profile = profile
        self.metadata = metadata

    def load(self) -> HparamsFiles:
        overlays = {}
        if self._profile != FAITHFUL:
            profiles = sorted({p.parent.name for p in self._path.glob("*/*/*.yaml")})
            if self._profile not in profiles:
                raise DatasetError(
                    f"hparams_profile {self._profile!r}: no folder "
                    f"{self._path}/<METHOD>/{self._profile}/; profiles: "
                    f"{[FAITHFUL, *profiles]}"
                )
            overlays = _read_files(self._path, f"*/{self._profile}/*.yaml")
        return HparamsFiles(
            model=self._model,
            files=_read_files(self._path, "*/*.yaml"),
            profile=self._profile,
            overlays=overlays,
            fast_overlays=_read_files(self._path, f"*/{FAST}/*.yaml"),
        )

    def save(self, data: HparamsFiles) -> None:
        raise DatasetError("hparams are configuration; kebench never writes them")

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path), "model": self._model, "profile": self._profile}


def _read_files(root: Path, pattern: str) -> dict[str, dict[str, dict[str, Any]]]:
    """stem -> method -> the values of each ``<METHOD>/[<profile>/]<stem>.yaml``."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for file in sorted(root.glob(pattern)):
        try:
            values = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            raise DatasetError(f"{file}: not valid YAML ({err})") from err
        if not isinstance(values, dict):
            raise DatasetError(f"{file}: expected a mapping of hparams")
        method = file.relative_to(root).parts[0]
        found.setdefault(file.stem, {})[method] = values
    return found


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
