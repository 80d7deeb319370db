"""The KG as N-Triples and as AMIE's tab-separated input."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyoxigraph as ox

from kebench.atomic import atomic_path
from kebench.datasets.atomic import LocalFileDataset
from kebench.kg.amie_export import triples_to_quads, write_amie_tsv


class NTriplesDataset(LocalFileDataset):
    """``kg_triples`` as an N-Triples file (serialised and escaped by pyoxigraph)."""

    def load(self) -> pd.DataFrame:
        rows = [
            {
                "s": t.subject.value,
                "p": t.predicate.value,
                "o": t.object.value,
                "o_is_literal": isinstance(t.object, ox.Literal),
                "o_lang": getattr(t.object, "language", None),
            }
            for t in ox.parse(path=str(self._filepath), format=ox.RdfFormat.N_TRIPLES)
        ]
        return pd.DataFrame(rows, columns=["s", "p", "o", "o_is_literal", "o_lang"])

    def save(self, data: pd.DataFrame) -> None:
        with atomic_path(self._filepath) as tmp:
            ox.serialize(
                (q.triple for q in triples_to_quads(data)),
                output=str(tmp),
                format=ox.RdfFormat.N_TRIPLES,
            )


class AmieTsvDataset(LocalFileDataset):
    """AMIE's input format: one ``s<TAB>p<TAB>o`` line of local names per triple."""

    def load(self) -> pd.DataFrame:
        lines = Path(self._filepath).read_text(encoding="utf-8").splitlines()
        return pd.DataFrame(
            [line.split("\t") for line in lines if line], columns=["s", "p", "o"]
        )

    def save(self, data: pd.DataFrame) -> None:
        with atomic_path(self._filepath) as tmp:
            write_amie_tsv(data, tmp)
