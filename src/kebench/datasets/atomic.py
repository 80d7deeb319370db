"""Local-file datasets whose writes are atomic.

kedro-datasets writes in place, so a crash mid-write leaves a truncated file that the
next run would read. These write a temporary file beside the target and rename it
(``kebench.atomic``).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
from kedro.io import AbstractDataset

from kebench.atomic import atomic_path


class LocalFileDataset(AbstractDataset):
    """Common parts of a dataset stored in one local file."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = PurePosixPath(filepath)
        self.metadata = metadata

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}

    def _exists(self) -> bool:
        return Path(self._filepath).is_file()


class AtomicParquetDataset(LocalFileDataset):
    """A pandas DataFrame in a local parquet file, written atomically."""

    def load(self) -> pd.DataFrame:
        return pd.read_parquet(self._filepath)

    def save(self, data: pd.DataFrame) -> None:
        with atomic_path(self._filepath) as tmp:
            data.to_parquet(tmp, index=False)


class AtomicTextDataset(LocalFileDataset):
    """A UTF-8 text file, written atomically."""

    def load(self) -> str:
        return Path(self._filepath).read_text(encoding="utf-8")

    def save(self, data: str) -> None:
        with atomic_path(self._filepath) as tmp:
            tmp.write_text(data, encoding="utf-8")


class AtomicCSVDataset(LocalFileDataset):
    """A pandas DataFrame in a local CSV file, written atomically."""

    def load(self) -> pd.DataFrame:
        return pd.read_csv(self._filepath)

    def save(self, data: pd.DataFrame) -> None:
        with atomic_path(self._filepath) as tmp:
            data.to_csv(tmp, index=False)


class AtomicJSONDataset(LocalFileDataset):
    """A JSON document in a local file, written atomically and indented for reading."""

    def load(self) -> Any:
        return json.loads(Path(self._filepath).read_text(encoding="utf-8"))

    def save(self, data: Any) -> None:
        with atomic_path(self._filepath) as tmp:
            tmp.write_text(
                json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
            )
