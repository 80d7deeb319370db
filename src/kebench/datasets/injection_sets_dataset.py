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
    """Read-only: the injection CSVs of a folder that the run's dataset source asks for
    (its ``injection_sets``), each tagged with its risk. A source that names none gets
    none; the log says which.

    The sets are optional reference data: when the folder is absent the dataset loads
    as empty, with a warning, so the offline demo runs without them.

    Args:
        folder: where the CSVs live (EditAttack's ``editattack/``).
        sets: ``{name: {file: ..., risk: misinformation | bias}}``.
        source: the run's dataset source; ``sources``: every configured source.
    """

    def __init__(  # noqa: PLR0913 - the catalog entry's fields
        self,
        folder: str,
        sets: dict[str, dict[str, str]],
        source: str,
        sources: dict[str, Any],
        metadata: dict | None = None,
    ) -> None:
        self._folder = Path(folder)
        self._sets = sets
        for name, spec in sets.items():
            if spec["risk"] not in RISKS:
                raise DatasetError(
                    f"injection set {name!r}: risk {spec['risk']!r} is not one of {RISKS}"
                )
        self._source = source
        self._chosen = list(sources.get(source, {}).get("injection_sets") or [])
        unknown = sorted(set(self._chosen) - set(sets))
        if unknown:
            raise DatasetError(
                f"sources.{source}.injection_sets (conf/base/globals.yml): unknown "
                f"injection sets {unknown}; the sets: {sorted(sets)}"
            )
        self.metadata = metadata

    def load(self) -> list[InjectionSet]:
        if not self._chosen:
            logger.info(
                "dataset %s adds no harmful-injection sets (list them in "
                "sources.%s.injection_sets to add EditAttack's)",
                self._source,
                self._source,
            )
            return []
        logger.info(
            "dataset %s adds the harmful-injection sets %s (sources.%s.injection_sets)",
            self._source,
            self._chosen,
            self._source,
        )
        if not self._folder.is_dir():
            logger.warning("no harmful-injection sets: %s does not exist", self._folder)
            return []
        loaded = []
        for name in self._chosen:
            spec = self._sets[name]
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
        return {"folder": str(self._folder), "sets": self._chosen}
