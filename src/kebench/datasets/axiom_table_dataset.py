"""The shipped table of vocabulary axioms (``conf/base/vocabulary/axioms.csv``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from kedro.io import DatasetError

from kebench.datasets.atomic import LocalFileDataset
from kebench.kg.vocabulary import read_axiom_table


class AxiomTableDataset(LocalFileDataset):
    """Read-only: an axiom table as ``AXIOMS`` rows; a malformed row is an error
    naming the file and line (``kebench.kg.vocabulary.read_axiom_table``)."""

    def load(self) -> pd.DataFrame:
        path = Path(self._filepath)
        if not path.is_file():
            raise DatasetError(
                f"vocabulary axioms: {path} not found (the shipped table is "
                "conf/base/vocabulary/axioms.csv; docs/qa_generation.md says how to "
                "write one)"
            )
        return read_axiom_table(path.read_text(encoding="utf-8"), str(path))

    def save(self, data: pd.DataFrame) -> None:
        raise DatasetError(f"{self._filepath} is read-only: edit the table by hand")
