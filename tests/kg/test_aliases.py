"""The KG's other names of answer entities, from a real embedded store, against
hand-written expectations."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kebench.kg.aliases import (
    AliasSettings,
    aliases_by_label,
    aliases_query,
    answer_entities,
    fetch_aliases,
)
from kebench.kg.sparql import EmbeddedEndpoint
from kebench.qa.probes import with_kg_aliases

EX = "http://example.org/"
RDFS = "http://www.w3.org/2000/01/rdf-schema#label"
FOAF = "http://xmlns.com/foaf/0.1/name"
REDIRECT = "http://dbpedia.org/ontology/wikiPageRedirects"
SAME_AS = "http://www.w3.org/2002/07/owl#sameAs"
SETTINGS = AliasSettings((RDFS, FOAF), (REDIRECT,), (SAME_AS,), batch_size=2)

NTRIPLES = f"""
<{EX}United_States> <{RDFS}> "United States"@en .
<{EX}United_States> <{RDFS}> "Vereinigte Staaten"@de .
<{EX}United_States> <{FOAF}> "USA" .
<{EX}US_redirect> <{REDIRECT}> <{EX}United_States> .
<{EX}US_redirect> <{RDFS}> "U.S." .
<{EX}Q30> <{SAME_AS}> <{EX}United_States> .
<{EX}Q30> <{RDFS}> "United States of America"@en .
<{EX}France> <{RDFS}> "France"@en .
<{EX}France> <{SAME_AS}> <{EX}Frankreich> .
<{EX}Frankreich> <{RDFS}> "French Republic" .
<{EX}Paris> <{EX}capital> <{EX}France> .
<{EX}Georgia_country> <{RDFS}> "Georgia" .
<{EX}Georgia_country> <{FOAF}> "Sakartvelo" .
<{EX}Georgia_state> <{RDFS}> "Georgia" .
<{EX}Georgia_state> <{FOAF}> "GA" .
"""


@pytest.fixture
def endpoint(tmp_path):
    path = tmp_path / "kg.nt"
    path.write_text(NTRIPLES)
    return EmbeddedEndpoint.from_files([path])


def test_labels_redirects_and_same_as_in_the_runs_language(endpoint):
    entities = [f"{EX}United_States", f"{EX}France", f"{EX}Paris"]
    table = fetch_aliases(entities, endpoint, SETTINGS)
    got = set(table.itertuples(index=False, name=None))
    assert got == {
        (f"{EX}United_States", "United States", "label"),
        (f"{EX}United_States", "USA", "label"),
        (f"{EX}United_States", "U.S.", "redirect"),
        (f"{EX}United_States", "United States of America", "same_as"),
        (f"{EX}France", "France", "label"),
        (f"{EX}France", "French Republic", "same_as"),
    }
    # a German label is not an English answer; Paris has no name at all
    assert "Vereinigte Staaten" not in set(table["alias"])


def test_an_iri_that_could_inject_sparql_is_refused():
    with pytest.raises(ValueError):
        aliases_query([EX + "x> ?p ?o } #"], SETTINGS)


def kg_frame(rows: list[tuple[str, str, str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["s", "s_label", "p", "o", "o_label"]).assign(
        o_is_literal=False
    )


def test_an_answer_label_gets_the_names_of_the_one_entity_it_labels(endpoint):
    kg = kg_frame(
        [
            (f"{EX}Ann", "Ann", f"{EX}citizen", f"{EX}United_States", "United States"),
            (f"{EX}Bo", "Bo", f"{EX}citizen", f"{EX}Georgia_country", "Georgia"),
            (f"{EX}Cy", "Cy", f"{EX}born", f"{EX}Georgia_state", "Georgia"),
        ]
    )
    edits = pd.DataFrame(
        {
            "target_true": ["United States"],
            "target_true_uri": [f"{EX}United_States"],
            "target_new": ["France"],
            "target_new_uri": [f"{EX}France"],
        }
    )
    entities = answer_entities(kg, edits)
    assert entities == {
        f"{EX}United_States",
        f"{EX}Georgia_country",
        f"{EX}Georgia_state",
        f"{EX}France",
    }
    table = fetch_aliases(entities, endpoint, SETTINGS)
    by_label = aliases_by_label(table, kg, edits)
    assert sorted(by_label["United States"]) == [
        "U.S.",
        "USA",
        "United States of America",
    ]
    assert by_label["France"] == ["French Republic"]
    # "Georgia" labels two entities: neither one's names are accepted
    assert "Georgia" not in by_label

    probes = pd.DataFrame(
        {
            "answer_old": ["United States", None],
            "answer_new": ["France", "Georgia"],
            "aliases_old": [json.dumps(["America", "USA"]), None],
            "aliases_new": [None, None],
        }
    )
    merged = with_kg_aliases(probes, by_label)
    # the dataset's aliases first, then the KG's (once each); none for an ambiguous
    # label, and an answer without any stays without
    assert json.loads(merged["aliases_old"][0]) == [
        "America",
        "USA",
        "U.S.",
        "United States of America",
    ]
    assert json.loads(merged["aliases_new"][0]) == ["French Republic"]
    assert pd.isna(merged["aliases_new"][1]) and pd.isna(merged["aliases_old"][1])
