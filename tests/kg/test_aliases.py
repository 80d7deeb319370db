"""The KG's other names of answer entities and edited subjects, from a real embedded
store, against hand-written expectations."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kebench.kg.aliases import (
    AliasSettings,
    aliased_entities,
    aliases_by_label,
    aliases_query,
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
            "subject": ["Ann"],
            "subject_uri": [f"{EX}Ann"],
            "target_true": ["United States"],
            "target_true_uri": [f"{EX}United_States"],
            "target_new": ["France"],
            "target_new_uri": [f"{EX}France"],
        }
    )
    entities = aliased_entities(kg, edits)
    assert entities == {
        f"{EX}Ann",
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


DBR = "http://dbpedia.org/resource/"
CITIZEN = "http://dbpedia.org/ontology/citizenship"


def test_an_edited_subject_gets_the_names_of_the_pages_that_redirect_to_it(tmp_path):
    """Barack Obama is edited (citizenship: United States -> Canada) and is no object
    of the KG: he is aliased as the edit's subject, and DBpedia's redirect "Obama"
    gives his other name."""
    path = tmp_path / "kg.nt"
    path.write_text(
        f"""
<{DBR}Barack_Obama> <{RDFS}> "Barack Obama"@en .
<{DBR}Barack_Obama> <{CITIZEN}> <{DBR}United_States> .
<{DBR}United_States> <{RDFS}> "United States"@en .
<{DBR}Canada> <{RDFS}> "Canada"@en .
<{DBR}Obama> <{REDIRECT}> <{DBR}Barack_Obama> .
<{DBR}Obama> <{RDFS}> "Obama"@en .
<{DBR}French_Republic> <{REDIRECT}> <{DBR}France> .
<{DBR}French_Republic> <{RDFS}> "French Republic"@en .
""",
        encoding="utf-8",
    )
    endpoint = EmbeddedEndpoint.from_files([path])
    kg = kg_frame(
        [
            (
                f"{DBR}Barack_Obama",
                "Barack Obama",
                CITIZEN,
                f"{DBR}United_States",
                "United States",
            )
        ]
    )
    edits = pd.DataFrame(
        {
            "subject": ["Barack Obama"],
            "subject_uri": [f"{DBR}Barack_Obama"],
            "target_true": ["United States"],
            "target_true_uri": [f"{DBR}United_States"],
            "target_new": ["Canada"],
            "target_new_uri": [f"{DBR}Canada"],
        }
    )
    entities = aliased_entities(kg, edits)
    assert entities == {
        f"{DBR}Barack_Obama",
        f"{DBR}United_States",
        f"{DBR}Canada",
    }
    table = fetch_aliases(entities, endpoint, SETTINGS)
    assert set(table.itertuples(index=False, name=None)) == {
        (f"{DBR}Barack_Obama", "Barack Obama", "label"),
        (f"{DBR}Barack_Obama", "Obama", "redirect"),
        (f"{DBR}United_States", "United States", "label"),
        (f"{DBR}Canada", "Canada", "label"),
    }
    # without the subject, only the answers are asked: Obama is not
    answers_only = aliased_entities(kg, edits.assign(subject_uri=None))
    assert f"{DBR}Barack_Obama" not in answers_only
