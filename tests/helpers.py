"""Small real things that tests build: RDF stores from a few triples."""

from __future__ import annotations

import pyoxigraph as ox


def make_store(triples: list[tuple[str, str, str | ox.Literal]]) -> ox.Store:
    """An in-memory store from (s, p, o) with IRIs as strings and literals as ox.Literal."""
    store = ox.Store()
    for s, p, o in triples:
        obj = o if isinstance(o, ox.Literal) else ox.NamedNode(o)
        store.add(ox.Quad(ox.NamedNode(s), ox.NamedNode(p), obj))
    return store
