"""Vocabulary axioms: the table's reader, the KG's own statements, and their logic,
each expectation worked out by hand."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pyoxigraph as ox
import pytest

from kebench.kg.sparql import EmbeddedEndpoint
from kebench.kg.vocabulary import (
    AxiomError,
    Vocabulary,
    fetch_entity_types,
    fetch_kg_axioms,
    read_axiom_table,
    warn_contradictions,
)

DBO = "http://dbpedia.org/ontology/"
WDT = "http://www.wikidata.org/prop/direct/"
OWL = "http://www.w3.org/2002/07/owl#"
SHIPPED = Path(__file__).parents[2] / "conf/base/vocabulary/axioms.csv"

TABLE = """# a comment
relation,axiom,value,source
dbo:spouse,factual,,test
dbo:spouse,symmetric,,test
dbo:capital,inverse_of,wdt:P1376,test
dbo:leader,sub_property_of,dbo:leaderName,test
dbo:nationality,equivalent_property,dbo:citizenship,test
dbo:capital,domain,dbo:Country,test
dbo:Country,sub_class_of,dbo:PopulatedPlace,test
dbo:PopulatedPlace,sub_class_of,owl:Thing,test
dbo:City,sub_class_of,dbo:PopulatedPlace,test
dbo:Person,sub_class_of,owl:Thing,test
"""


def vocabulary() -> Vocabulary:
    return Vocabulary.from_axioms(read_axiom_table(TABLE, "t.csv"))


def test_the_table_reads_into_full_iris():
    table = read_axiom_table(TABLE, "t.csv")
    assert len(table) == 10
    row = table.iloc[2]
    assert (row["relation"], row["axiom"], row["value"]) == (
        DBO + "capital",
        "inverse_of",
        WDT + "P1376",
    )
    # line 5 of the text: the comment and the header come first
    assert row["origin"] == "t.csv:5"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("dbo:spouse,symmetric,test", "expected 4 fields"),
        ("dbo:spouse,reflexive,,test", "unknown axiom 'reflexive'"),
        ("dbo:spouse,inverse_of,,test", "takes a value"),
        ("dbo:spouse,symmetric,dbo:x,test", "takes no value"),
        ("foo:spouse,symmetric,,test", "prefixed name"),
        ("<http://a b>,symmetric,,test", "not a valid IRI"),
    ],
)
def test_a_malformed_row_names_the_file_and_line(line, message):
    text = "relation,axiom,value,source\ndbo:spouse,factual,,ok\n" + line + "\n"
    with pytest.raises(AxiomError, match=rf"^axioms\.csv:3: .*{message}"):
        read_axiom_table(text, "axioms.csv")


def test_a_wrong_header_is_refused():
    with pytest.raises(AxiomError, match=r"^a\.csv:1: header"):
        read_axiom_table("relation,kind,value,source\n", "a.csv")


def test_what_implies_a_step():
    vocab = vocabulary()
    # spouse is symmetric: a stored spouse(y, x) states spouse(x, y)
    assert vocab.implying(DBO + "spouse") == {
        (DBO + "spouse", False),
        (DBO + "spouse", True),
    }
    # capital(x, y) is stated by capital itself and by P1376(y, x)
    assert vocab.implying(DBO + "capital") == {
        (DBO + "capital", False),
        (WDT + "P1376", True),
    }
    # leaderName is stated by its sub-property leader; leader by nothing else
    assert vocab.implying(DBO + "leaderName") == {
        (DBO + "leaderName", False),
        (DBO + "leader", False),
    }
    assert vocab.implying(DBO + "leader") == {(DBO + "leader", False)}
    # equivalence goes both ways
    assert (DBO + "nationality", False) in vocab.implying(DBO + "citizenship")
    assert (DBO + "citizenship", False) in vocab.implying(DBO + "nationality")
    assert vocab.entails(WDT + "P1376", True, DBO + "capital")
    assert not vocab.entails(WDT + "P1376", False, DBO + "capital")


def test_types_against_domains_and_ranges():
    vocab = vocabulary()
    # a Country is a PopulatedPlace; a Person is not; no type or an unknown class
    # conforms (open world)
    assert vocab.conforms({DBO + "Country"}, {DBO + "PopulatedPlace"})
    assert not vocab.conforms({DBO + "Person"}, {DBO + "PopulatedPlace"})
    assert vocab.conforms(set(), {DBO + "Country"})
    assert vocab.conforms({DBO + "Spaceship"}, {DBO + "Country"})
    # a city and a populated place can be one entity; a city and a country not
    assert vocab.compatible({DBO + "City"}, {DBO + "PopulatedPlace"})
    assert not vocab.compatible({DBO + "City"}, {DBO + "Country"})


def test_the_kg_states_its_own_axioms():
    store = ox.Store()
    store.add(
        ox.Quad(
            ox.NamedNode(DBO + "spouse"),
            ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type"),
            ox.NamedNode(OWL + "SymmetricProperty"),
        )
    )
    store.add(
        ox.Quad(
            ox.NamedNode(DBO + "capital"),
            ox.NamedNode(OWL + "inverseOf"),
            ox.NamedNode(WDT + "P1376"),
        )
    )
    # a blank-node class expression is no axiom kebench reads
    store.add(
        ox.Quad(
            ox.NamedNode(DBO + "spouse"),
            ox.NamedNode("http://www.w3.org/2000/01/rdf-schema#range"),
            ox.BlankNode(),
        )
    )
    axioms = fetch_kg_axioms(EmbeddedEndpoint(store, "kg"))
    values = [v if isinstance(v, str) else None for v in axioms["value"]]
    assert set(zip(axioms["relation"], axioms["axiom"], values)) == {
        (DBO + "capital", "inverse_of", WDT + "P1376"),
        (DBO + "spouse", "symmetric", None),
    }


def test_entity_types_come_from_the_endpoint():
    store = ox.Store()
    rdf_type = ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
    paris = ox.NamedNode("http://dbpedia.org/resource/Paris")
    store.add(ox.Quad(paris, rdf_type, ox.NamedNode(DBO + "City")))
    types = fetch_entity_types(
        ["http://dbpedia.org/resource/Paris", "http://dbpedia.org/resource/Nowhere"],
        EmbeddedEndpoint(store, "kg"),
        batch_size=1,
    )
    assert list(zip(types["uri"], types["type"])) == [
        ("http://dbpedia.org/resource/Paris", DBO + "City")
    ]


def test_a_functional_axiom_the_kg_contradicts_is_warned_with_counts(caplog):
    vocab = Vocabulary(functional=frozenset({DBO + "birthPlace"}))
    triples = pd.DataFrame(
        {
            "s": ["a", "a", "b", "c", "c"],
            "p": [DBO + "birthPlace"] * 4 + [DBO + "spouse"],
            "o": ["x", "y", "x", "z", "w"],
        }
    )
    with caplog.at_level(logging.WARNING):
        assert warn_contradictions(vocab, triples) == {DBO + "birthPlace": 1}
    assert "gives 1 subjects several objects" in caplog.text


def test_the_shipped_table_reads_and_allows_no_link_predicate():
    table = read_axiom_table(SHIPPED.read_text(encoding="utf-8"), str(SHIPPED))
    factual = set(table.loc[table["axiom"] == "factual", "relation"])
    assert DBO + "spouse" in factual and DBO + "capital" in factual
    for link in (
        "http://www.w3.org/2000/01/rdf-schema#seeAlso",
        "http://xmlns.com/foaf/0.1/name",
        "http://dbpedia.org/property/name",
        "http://dbpedia.org/property/commonName",
        DBO + "wikiPageWikiLink",
        DBO + "wikiPageDisambiguates",
        OWL + "sameAs",
        "http://purl.org/dc/terms/subject",
        DBO + "thumbnail",
    ):
        assert link not in factual
