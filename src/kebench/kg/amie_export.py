"""Conversions between DBpedia-style triple dumps, RDF terms and AMIE's TSV input.

AMIE reads tab-separated ``s  p  o`` lines of local names. The paper's DBpedia dump is
a TSV of full IRIs whose literal objects may themselves contain tabs and newlines,
so it is parsed by record (a line that starts ``<IRI>\\t<IRI>\\t``), not by line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyoxigraph as ox

_RECORD_START = re.compile(r"^(https?://[^\t\s]+)\t(https?://[^\t\s]+)\t(.*)$")
_IRI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")
_WHITESPACE = re.compile(r"\s+")
# Entity IRIs keep everything after these namespaces (so `AC/DC` stays whole);
# any other IRI is cut after its last '/' or '#'.
ENTITY_NAMESPACES = ("http://dbpedia.org/resource/",)


def read_dbpedia_tsv(path: str | Path) -> pd.DataFrame:
    """Read a DBpedia TSV dump of ``subject<TAB>predicate<TAB>object`` records.

    A record continues over following lines until the next line that starts with two
    tab-separated IRIs, so literals keep their tabs and newlines. Records with an
    empty literal are dropped; duplicates are dropped.

    Returns:
        A frame with columns s, p, o, o_is_literal.
    """
    path = Path(path)
    records: list[list[str]] = []
    with path.open(encoding="utf-8") as handle:
        for line_no, raw_line in enumerate(handle, start=1):
            line = raw_line.rstrip("\n")
            match = _RECORD_START.match(line)
            if match:
                records.append([match[1], match[2], match[3]])
            elif records:
                records[-1][2] += "\n" + line
            elif line.strip():
                raise ValueError(f"{path}:{line_no}: expected 'IRI<TAB>IRI<TAB>object'")
    frame = pd.DataFrame(records, columns=["s", "p", "o"])
    frame["o_is_literal"] = ~frame["o"].str.match(_IRI.pattern)
    frame = frame[~(frame["o_is_literal"] & (frame["o"].str.strip() == ""))]
    return frame.drop_duplicates(["s", "p", "o"]).reset_index(drop=True)


def triples_to_quads(triples: pd.DataFrame) -> Iterator[ox.Quad]:
    """RDF quads (default graph) for a frame with columns s, p, o, o_is_literal.

    Literals are plain strings unless the frame has ``o_lang`` (language tags).
    """
    langs = triples["o_lang"] if "o_lang" in triples else [None] * len(triples)
    for s, p, o, is_literal, lang in zip(
        triples["s"],
        triples["p"],
        triples["o"],
        triples["o_is_literal"],
        langs,
        strict=True,
    ):
        if is_literal:
            obj = (
                ox.Literal(o, language=lang)
                if isinstance(lang, str) and lang
                else ox.Literal(o)
            )
        else:
            obj = ox.NamedNode(o)
        yield ox.Quad(ox.NamedNode(s), ox.NamedNode(p), obj)


def local_name(iri: str) -> str:
    """AMIE-style local name of an IRI (``http://dbpedia.org/ontology/spouse`` -> ``spouse``)."""
    for namespace in ENTITY_NAMESPACES:
        if iri.startswith(namespace):
            return iri[len(namespace) :]
    return re.split(r"[/#]", iri)[-1]


def amie_term(value: str, is_literal: bool) -> str:
    """How AMIE input names an object: a local name, or a literal with ``_`` for spaces."""
    return _WHITESPACE.sub("_", value.strip()) if is_literal else local_name(value)


def to_amie_frame(
    triples: pd.DataFrame, include_literals: bool = False
) -> pd.DataFrame:
    """Triples as AMIE input: distinct local names, literal whitespace turned into ``_``.

    Args:
        triples: frame with columns s, p, o, o_is_literal.
        include_literals: keep literal objects (as their lexical form) or drop them.
    """
    rows = triples if include_literals else triples[~triples["o_is_literal"]]
    objects = [
        amie_term(o, is_literal)
        for o, is_literal in zip(rows["o"], rows["o_is_literal"], strict=True)
    ]
    amie = pd.DataFrame(
        {"s": rows["s"].map(local_name), "p": rows["p"].map(local_name), "o": objects}
    )
    return amie.drop_duplicates().reset_index(drop=True)


def write_amie_tsv(amie: pd.DataFrame, path: str | Path) -> None:
    """Write a frame of local names (columns s, p, o) as AMIE input lines."""
    Path(path).write_text(
        "".join(
            f"{s}\t{p}\t{o}\n"
            for s, p, o in amie[["s", "p", "o"]].itertuples(index=False)
        ),
        encoding="utf-8",
    )


def to_amie_tsv(
    triples: pd.DataFrame, path: str | Path, include_literals: bool = False
) -> int:
    """Write triples as an AMIE input TSV and return the number of lines written."""
    amie = to_amie_frame(triples, include_literals)
    write_amie_tsv(amie, path)
    return len(amie)
