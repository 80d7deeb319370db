"""Consequences of an edit under rules, and their questions, on small real KGs."""

from __future__ import annotations

import pandas as pd
import pytest

from kebench.qa.closure import ClosureSettings
from kebench.qa.consequences import (
    ConsequenceFinder,
    EditedFact,
    KgIndex,
    entailed_facts,
)
from kebench.qa.entailment import template_questions
from kebench.qa.verbaliser import Verbaliser, split_camel_case
from tests.qa.kgs import DBO, R, derive, edit_row, kg, rules

PAPER = {"semantics": "paper", "closure": ClosureSettings(max_groundings_per_rule=5)}
SPOUSE_RULE = (
    "R1",
    [["?g", "citizenship", "?b"], ["?g", "spouse", "?a"]],
    ["?a", "citizenship", "?b"],
)
LEADER_RULE = ("R2", [["?b", "leader", "?a"]], ["?a", "citizenship", "?b"])
GHOST_RULE = ("R3", [["?a", "ghostRelation", "?b"]], ["?a", "citizenship", "?b"])
TEMPLATES = {
    "citizenship": {"noun": "country of citizenship"},
    "spouse": {"noun": "spouse"},
}
RELATIONS = {
    "P27": {"dbpedia": [f"{DBO}citizenship"]},
    "P35": {"dbpedia": [f"{DBO}leader"]},
}


FAMILY = kg(
    ("Barack_Obama", "spouse", "Michelle_Obama"),
    ("Barack_Obama", "citizenship", "United_States"),
    ("Michelle_Obama", "citizenship", "United_States"),
    ("Spain", "leader", "Felipe_VI"),
    ("Felipe_VI", "citizenship", "Spain"),
    ("Willem-Alexander", "citizenship", "Netherlands"),
    ("Canada", "leader", "Charles_III"),
)


def finder(*specs) -> tuple[ConsequenceFinder, dict]:
    table = rules(*specs)
    by_id = {rid: ([tuple(a) for a in b], tuple(h)) for rid, b, h in specs}
    return ConsequenceFinder(KgIndex(FAMILY), table), by_id


def test_spouse_consequence_is_asked_through_the_chain():
    consequence_finder, by_id = finder(SPOUSE_RULE)
    edit = EditedFact("Barack_Obama", "citizenship", "United_States", "Canada")
    (fact,) = entailed_facts(consequence_finder, edit, by_id)
    assert (fact.subject, fact.relation) == ("Michelle_Obama", "citizenship")
    assert (fact.answer_old, fact.answer_new) == ("United_States", "Canada")
    assert fact.chain == [("spouse", "out", "Michelle_Obama")]
    question, cloze, source = Verbaliser(TEMPLATES).question(
        "Barack Obama", fact.chain, "citizenship"
    )
    assert (
        question == "What is the country of citizenship of the spouse of Barack Obama?"
    )
    assert cloze == "The country of citizenship of the spouse of Barack Obama is"
    assert source == "conf"


def test_consequence_about_the_new_object_names_it():
    consequence_finder, by_id = finder(LEADER_RULE)
    edit = EditedFact("Spain", "leader", "Felipe_VI", "Willem-Alexander")
    (fact,) = entailed_facts(consequence_finder, edit, by_id)
    assert (fact.subject, fact.answer_old, fact.answer_new) == (
        "Willem-Alexander",
        "Netherlands",
        "Spain",
    )
    question, _, _ = Verbaliser(TEMPLATES).question("Spain", fact.chain, "citizenship")
    assert question == "What is the country of citizenship of Willem-Alexander?"


def test_unchanged_and_unknown_answers_are_skipped_and_counted():
    consequence_finder, by_id = finder(LEADER_RULE)
    # Charles III has no citizenship in the KG: no old answer.
    assert (
        entailed_facts(
            consequence_finder,
            EditedFact("Spain", "leader", "Felipe_VI", "Charles_III"),
            by_id,
        )
        == []
    )
    assert consequence_finder.skipped["no old answer"] == 1
    assert (
        entailed_facts(
            consequence_finder,
            EditedFact("Spain", "leader", "Felipe_VI", "Felipe_VI"),
            by_id,
        )
        == []
    )
    assert consequence_finder.skipped["answer unchanged"] == 1


def test_frame_report_counts_bad_input():
    edits = pd.DataFrame(
        [
            edit_row("c1", "Barack_Obama", "P27", "United_States", "Canada"),
            edit_row(
                "c2", "Atlantis", "P27", "United_States", "Canada"
            ),  # not in the KG
            edit_row("c3", "Spain", "P35", "Felipe_VI", "Willem-Alexander"),
            # adds a fact (RippleEdits' recent examples): no world before to compare
            {
                **edit_row("c4", "Barack_Obama", "P27", "Canada", "Kenya"),
                "target_true": None,
                "target_true_uri": None,
            },
        ]
    )
    facts, report = derive(
        edits,
        rules(SPOUSE_RULE, LEADER_RULE, GHOST_RULE),
        FAMILY,
        RELATIONS,
        **PAPER,
    )
    assert list(facts["case_id"]) == ["c1", "c3"]
    assert report["tiers"]["inductive"]["edits_with_probed_pct"] == pytest.approx(50.0)
    assert report["edits_without_kg_fact"] == {
        "subject not linked to the KG": 1,
        "the edit adds a fact: no old value to replace": 1,
    }
    # the ghost rule names a relation the KG does not state: no rule for QA
    assert report["rules"]["naming_a_non_factual_predicate"] == 1
    assert facts.iloc[0]["path"] == (
        '[["Barack Obama", "citizenship", "Canada"], ["Barack Obama", "spouse", "Michelle Obama"]]'
    )


def test_relation_without_template_gets_fallback_wording_and_is_counted():
    edits = pd.DataFrame(
        [edit_row("c1", "Barack_Obama", "P27", "United_States", "Canada")]
    )
    facts, _ = derive(edits, rules(SPOUSE_RULE), FAMILY, RELATIONS, **PAPER)
    verbaliser = Verbaliser({"citizenship": {"noun": "country of citizenship"}})
    questions = template_questions(facts, edits, verbaliser, max_per_edit=3)
    assert (
        questions.iloc[0]["question"]
        == "What is the country of citizenship of the spouse of Barack Obama?"
    )
    assert verbaliser.wording_used == {"fallback:spouse": 1}
    assert split_camel_case("leaderName") == "leader name"


@pytest.mark.parametrize("semantics", ["paper", "consistent"])
def test_literal_targets_and_a_kg_that_already_holds_the_new_value(semantics):
    """MQuAKE-T's case: DBpedia states the post-update mayor, as a plain name."""
    triples = pd.DataFrame(
        [
            {
                "s": R + "New_York_City",
                "p": DBO + p,
                "o": "Eric Adams",
                "o_is_literal": True,
                "o_lang": None,
                "s_label": "New York City",
                "p_local": p,
                "o_label": "Eric Adams",
            }
            for p in ("leaderName", "mayor")
        ]
    )
    edits = pd.DataFrame(
        [
            {
                "case_id": "t1",
                "subject": "New York City",
                "relation_id": "P6",
                "target_true": "Bill de Blasio",
                "target_new": "Eric Adams",
                "subject_uri": R + "New_York_City",
                "target_true_uri": None,
                "target_new_uri": None,
            }
        ]
    )
    rule = ("R9", [["?a", "leaderName", "?b"]], ["?a", "mayor", "?b"])
    facts, _ = derive(
        edits,
        rules(rule),
        triples,
        {"P6": {"dbpedia": [f"{DBO}leaderName"]}},
        semantics=semantics,
    )
    (fact,) = facts.to_dict("records")
    assert (fact["relation"], fact["answer_old"], fact["answer_new"]) == (
        "mayor",
        "Bill de Blasio",
        "Eric Adams",
    )
    assert (fact["status"], fact["semantics"]) == ("entailed", semantics)


def test_a_property_path_is_worded_step_by_step():
    verbaliser = Verbaliser(
        {
            "citizenship": {"noun": "country of citizenship"},
            "capital": {"noun": "capital"},
            "headquarter": {
                "noun": "headquarters",
                "phrase": "the place where {subject} has its headquarters",
                "phrase_by_class": {"City": "the city where {subject} is based"},
            },
            "^capital": {
                "noun": "country it is the capital of",
                "cloze": "{subject} is the capital of",
            },
        }
    )
    _, cloze, _ = verbaliser.path_question(
        "Barack Obama",
        [["citizenship", "out", "Canada"], ["capital", "out", "Ottawa"]],
    )
    assert cloze == "The capital of the country of citizenship of Barack Obama is"
    # a step worded by the class of the entity it reaches, then a converse
    _, cloze, _ = verbaliser.path_question(
        "Acme",
        [["headquarter", "out", "Ottawa", "City"], ["capital", "in", "Canada", None]],
    )
    assert cloze == "The city where Acme is based is the capital of"
    _, cloze, _ = verbaliser.path_question(
        "Acme", [["headquarter", "out", "Ottawa"], ["capital", "in", "Canada"]]
    )
    assert cloze == "The place where Acme has its headquarters is the capital of"
    # a converse without a template: the generic wording, counted
    question, cloze, source = verbaliser.path_question(
        "Paris", [["citizenship", "in", "Coco Chanel"]]
    )
    assert (question, cloze, source) == (
        "Of what is Paris the country of citizenship?",
        "Paris is the country of citizenship of",
        "fallback",
    )
    assert verbaliser.wording_used["fallback:^citizenship"] == 1
