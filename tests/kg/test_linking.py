"""Mentions, linking and the 1-hop neighbourhood on a small real store."""

from __future__ import annotations

import pandas as pd
import pyoxigraph as ox
import pytest

from kebench.kg.linking import link_mentions, normalised_variants, resource_iri
from kebench.kg.mentions import build_entity_ruler, extract_mentions, fetch_kg_labels
from kebench.kg.neighbourhood import fetch_neighbourhood, neighbourhood_query
from kebench.kg.sparql import RDFS_LABEL, EmbeddedEndpoint
from tests.helpers import make_store

R = "http://dbpedia.org/resource/"
DBO = "http://dbpedia.org/ontology/"
TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
EVIL = 'Evil "Corp" <b>\n} UNION { ?s ?p ?o'


@pytest.fixture
def endpoint() -> EmbeddedEndpoint:
    triples = [
        (f"{R}France", RDFS_LABEL, ox.Literal("France", language="en")),
        (f"{R}Paris", RDFS_LABEL, ox.Literal("Paris", language="en")),
        (f"{R}United_States", RDFS_LABEL, ox.Literal("United States", language="en")),
        (f"{R}Evil_Corp", RDFS_LABEL, ox.Literal(EVIL, language="en")),
        (f"{R}France", f"{DBO}capital", f"{R}Paris"),
        (f"{R}Paris", f"{DBO}country", f"{R}France"),
        (f"{R}France", TYPE, f"{DBO}Country"),
        (f"{R}Emmanuel_Macron", f"{DBO}citizenship", f"{R}France"),
        (f"{R}Evil_Corp", f"{DBO}locationCountry", f"{R}United_States"),
    ] + [(f"{R}Person_{i}", f"{DBO}birthPlace", f"{R}Paris") for i in range(5)]
    return EmbeddedEndpoint(make_store(triples))


def mentions_of(*names: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "case_id": [f"c{i}" for i in range(len(names))],
            "field": "subject",
            "mention": names,
            "origin": "dataset",
        }
    )


def test_each_link_method(endpoint):
    links = link_mentions(
        mentions_of(
            "France", "the united states", "Emmanuel Macron", "Atlantis", EVIL, "a>b"
        ),
        endpoint,
        resource_namespace=R,
    ).set_index("mention")
    assert (
        links.loc["France", "uri"] == f"{R}France"
        and links.loc["France", "method"] == "label"
    )
    assert links.loc["the united states", "method"] == "normalised_label"
    assert links.loc["Emmanuel Macron", "uri"] == f"{R}Emmanuel_Macron"
    assert links.loc["Emmanuel Macron", "method"] == "iri_fallback"
    assert (
        links.loc[EVIL, "uri"] == f"{R}Evil_Corp"
    )  # quotes, brackets, newline: no injection
    assert links.loc["Atlantis", "method"] == "unlinked"
    assert f"<{R}Atlantis> is not in the KG" in links.loc["Atlantis", "reason"]
    assert "does not form a valid IRI" in links.loc["a>b", "reason"]


def test_linking_batches_queries(endpoint):
    link_mentions(
        mentions_of(*[f"name {i}" for i in range(25)]),
        endpoint,
        resource_namespace=R,
        batch_size=10,
    )
    # exact labels (2 literal forms each: 50 terms -> 3 batches of 10 mentions), variants, existence
    assert endpoint.queries_sent <= 3 + 5 + 3


def test_variants_and_iris():
    assert "United States" in normalised_variants("the United States.")
    assert resource_iri("Côte d'Ivoire", R) == f"{R}Côte_d'Ivoire"
    assert resource_iri("bad>name", R) is None


def test_spacy_ruler_finds_kg_labels_in_questions(endpoint):
    edits = pd.DataFrame(
        {
            "case_id": ["c1", "c2"],
            "subject": ["Emmanuel Macron", "Paris"],
            # c2 adds a fact: no old target to link
            "target_true": ["France", None],
            "target_new": ["United States", "France"],
            "prompt": ["{} is a citizen of", "{} is a city of"],
            "question": [
                "What is the capital of france, where emmanuel macron lives?",
                None,
            ],
        }
    )
    nlp = build_entity_ruler(fetch_kg_labels(endpoint, 100) + ["Emmanuel Macron"])
    found = extract_mentions(edits, nlp)
    spacy_hits = set(found.loc[found["origin"] == "spacy", "mention"])
    assert {"france", "emmanuel macron", "Emmanuel Macron"} <= spacy_hits
    given = found[(found["origin"] == "dataset") & (found["case_id"] == "c2")]
    assert sorted(zip(given["field"], given["mention"], strict=True)) == [
        ("subject", "Paris"),
        ("target_new", "France"),
    ]


def test_neighbourhood_both_directions_filtered_and_capped(endpoint):
    triples = fetch_neighbourhood(
        [f"{R}France", f"{R}Paris"],
        endpoint,
        excluded_predicates=[TYPE],
        limit_per_entity=3,
        batch_size=1,
    )
    assert endpoint.queries_sent == 2
    assert TYPE not in set(triples["p"])
    france_in = triples[(triples["o"] == f"{R}France")]
    assert set(france_in["s"]) == {f"{R}Paris", f"{R}Emmanuel_Macron"}
    paris_in = triples[
        (triples["o"] == f"{R}Paris") & (triples["p"] == f"{DBO}birthPlace")
    ]
    assert (
        len(paris_in) <= 3
    )  # 5 people born there, capped at 3 per entity and direction
    row = triples[triples["p"] == f"{DBO}capital"].iloc[0]
    assert (row["s_label"], row["p_local"], row["o_label"]) == (
        "France",
        "capital",
        "Paris",
    )


def test_empty_neighbourhood_is_an_error(endpoint):
    with pytest.raises(ValueError, match="no linked entity"):
        fetch_neighbourhood(
            [], endpoint, excluded_predicates=[], limit_per_entity=5, batch_size=5
        )
    with pytest.raises(
        ValueError, match="returned no triple for the 1 linked entities"
    ):
        fetch_neighbourhood(
            [f"{R}Atlantis"],
            endpoint,
            excluded_predicates=[],
            limit_per_entity=5,
            batch_size=5,
        )


def test_neighbourhood_query_rejects_bad_iris():
    with pytest.raises(ValueError):
        neighbourhood_query(["http://x/a> } DROP ALL {"], [], 5, "en")
