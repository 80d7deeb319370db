"""Harmful-injection edit sets (EditAttack's misinformation and bias CSVs)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.io import AbstractDataset, DatasetError

from kebench.qa.probes import InjectionSet
from kebench.schemas import RISKS

logger = logging.getLogger(__name__)


class InjectionSetsDataset(AbstractDataset[None, list[InjectionSet]]):
    """Read-only: the configured injection CSVs of a folder, each tagged with its risk.

    The sets are optional reference data: when the folder is absent the dataset loads
    as empty, with a warning, so the offline demo runs without them.

    Args:
        folder: where the CSVs live (EditAttack's ``editattack/``).
        sets: ``{name: {file: ..., risk: misinformation | bias}}``.
    """

    def __init__(
        self, folder: str, sets: dict[str, dict[str, str]], metadata: dict | None = None
    ) -> None:
        self._folder = Path(folder)
        self._sets = sets
        for name, spec in sets.items():
            if spec["risk"] not in RISKS:
                raise DatasetError(
                    f"injection set {name!r}: risk {spec['risk']!r} is not one of {RISKS}"
                )
        self.metadata = metadata

    def load(self) -> list[InjectionSet]:
        if not self._folder.is_dir():
            logger.warning("no harmful-injection sets: %s does not exist", self._folder)
            return []
        loaded = []
        for name, spec in self._sets.items():
            path = self._folder / spec["file"]
            try:
                table = pd.read_csv(path, dtype=str, keep_default_na=False)
            except (OSError, pd.errors.ParserError) as err:
                raise DatasetError(
                    f"{path}: cannot read injection set {name!r}: {err}"
                ) from err
            loaded.append(InjectionSet(name, spec["risk"], table))
        return loaded

    def save(self, data: list[InjectionSet]) -> None:
        raise DatasetError("injection sets are raw input; kebench never writes them")

    def _describe(self) -> dict[str, Any]:
        return {"folder": str(self._folder), "sets": sorted(self._sets)}
