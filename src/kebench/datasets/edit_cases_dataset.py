"""Edit cases of a named source, chosen with ``--params dataset=<name>``."""

from __future__ import annotations

from typing import Any

from kedro.io import AbstractDataset, DatasetError

from kebench.kg.edit_cases import RawEditCases, read_source


def source_spec(source: str, sources: dict[str, Any]) -> dict[str, Any]:
    """The configuration of one named dataset source, or a clear error listing the known ones."""
    if source not in sources:
        raise DatasetError(
            f"unknown dataset {source!r}; configured datasets: {sorted(sources)}"
        )
    return sources[source]


class EditCasesDataset(AbstractDataset[None, RawEditCases]):
    """Read-only: the raw records of the edit-case file of one configured source.

    Args:
        source: the source's name, e.g. ``demo`` or ``mquake_t``.
        sources: every configured source (``globals.yml``), each with an ``edit_cases``
            entry holding ``filepath`` (one file, or a list read in order), ``format``,
            ``risk`` and optionally
            ``skip_invalid`` (skip unusable records with a warning instead of failing).
    """

    def __init__(
        self, source: str, sources: dict[str, Any], metadata: dict | None = None
    ) -> None:
        self._source = source
        self._spec = source_spec(source, sources)["edit_cases"]
        self.metadata = metadata

    def load(self) -> RawEditCases:
        return read_source(self._source, {"edit_cases": self._spec})

    def save(self, data: RawEditCases) -> None:
        raise DatasetError("edit cases are raw input; kebench never writes them")

    def _describe(self) -> dict[str, Any]:
        return {"source": self._source, **self._spec}
