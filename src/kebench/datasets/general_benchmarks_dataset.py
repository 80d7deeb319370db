"""General-knowledge benchmarks (EditAttack's BoolQ and Natural Questions JSONL)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.io import AbstractDataset, DatasetError

logger = logging.getLogger(__name__)


class GeneralBenchmarksDataset(AbstractDataset[None, dict[str, pd.DataFrame]]):
    """Read-only: the configured JSONL files of a folder, one table each.

    The benchmarks are optional reference data: a file that is absent is left out, with
    a warning, so the offline demo runs without them.

    Args:
        folder: where the files live (EditAttack's ``editattack/``).
        files: ``{name: file}``, e.g. ``{boolq: boolq.jsonl}``.
    """

    def __init__(
        self, folder: str, files: dict[str, str], metadata: dict | None = None
    ) -> None:
        self._folder = Path(folder)
        self._files = files
        self.metadata = metadata

    def load(self) -> dict[str, pd.DataFrame]:
        loaded = {}
        for name, file in self._files.items():
            path = self._folder / file
            if not path.is_file():
                logger.warning("no %s benchmark: %s does not exist", name, path)
                continue
            try:
                loaded[name] = pd.read_json(path, lines=True)
            except ValueError as err:
                raise DatasetError(f"{path}: cannot read {name!r}: {err}") from err
        return loaded

    def save(self, data: dict[str, pd.DataFrame]) -> None:
        raise DatasetError(
            "general benchmarks are raw input; kebench never writes them"
        )

    def _describe(self) -> dict[str, Any]:
        return {"folder": str(self._folder), "files": dict(self._files)}
