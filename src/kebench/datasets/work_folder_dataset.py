"""A folder that domain code reads and writes itself, file by file, as work goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset, DatasetError


class WorkFolderDataset(AbstractDataset[None, Path]):
    """Read-only: the folder's path, created on demand by the code that writes it
    (covariance statistics, a lifelong stream's checkpoints). Its files are written
    one by one and atomically, so that a killed run keeps what it finished; a Kedro
    save at the end would lose it.

    Args:
        filepath: the folder.
    """

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = Path(filepath)
        self.metadata = metadata

    def load(self) -> Path:
        return self._filepath

    def save(self, data: Path) -> None:
        raise DatasetError(f"{self._filepath} is written by the code that uses it")

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}
