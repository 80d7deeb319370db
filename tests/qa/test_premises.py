"""Premise probes built from hand-made tables: what each probe rests on, and the
other names its premise's answer goes by."""

from __future__ import annotations

import json

import pandas as pd

from kebench.qa.premises import condition_rows, premise_probes
from kebench.qa.verbaliser import Verbaliser
from tests.qa.kgs import DBO, edit_row, kg

WORLD = kg(
    ("Barack_Obama", "citizenship", "United_States"),
    ("Barack_Obama", "spouse", "Michelle_Obama"),
    ("Michelle_Obama", "citizenship", "United_States"),
    ("Angela_Merkel", "citizenship", "Germany"),
    ("Emmanuel_Macron", "citizenship", "France"),
    ("Olaf_Scholz", "citizenship", "Germany"),
    ("Ada", "spouse", "Ben"),
)
RELATIONS = {"P27": {"dbpedia": [f"{DBO}citizenship"]}}
TEMPLATES = {
    "citizenship": {"noun": "country of citizenship"},
    "spouse": {"noun": "spouse", "cloze": "{subject} is married to"},
}


def tables():
    edits = pd.DataFrame(
        [edit_row("c1", "Barack_Obama", "P27", "United_States", "Canada")]
    )
    probes = pd.DataFrame(
        [
            {
                "probe_id": "c1/direct/0",
                "case_id": "c1",
                "probe_type": "direct",
                "prompt": "Barack Obama is a citizen of",
                "answer_old": "United States",
                "answer_new": "Canada",
            },
            {
                "probe_id": "c1/entailed/0",
                "case_id": "c1",
                "probe_type": "entailed",
                "prompt": "The country of citizenship of the spouse of Barack Obama is",
                "answer_old": "United States",
                "answer_new": "Canada",
            },
            {
                "probe_id": "c1/entailed/1",
                "case_id": "c1",
                "probe_type": "entailed",
                "prompt": "Canada is located in",
                "answer_old": "Nowhere",
                "answer_new": "America",
            },
            {
                "probe_id": "c1/entailed/2",
                "case_id": "c1",
                "probe_type": "entailed",
                "prompt": "The spouse of the citizen of Germany is",
                "answer_old": "Nobody",
                "answer_new": "Somebody",
            },
        ]
    )
    questions = pd.DataFrame(
        [
            {
                "fact_id": "c1/0",
                "case_id": "c1",
                "cloze": probes.at[1, "prompt"],
                "answer_new": "Canada",
            },
            {
                "fact_id": "c1/1",
                "case_id": "c1",
                "cloze": "Canada is located in",
                "answer_new": "America",
            },
            {
                "fact_id": "c1/2",
                "case_id": "c1",
                "cloze": "The spouse of the citizen of Germany is",
                "answer_new": "Somebody",
            },
        ]
    )
    facts = pd.DataFrame(
        [
            {
                "fact_id": "c1/0",
                "premises": json.dumps([["Barack Obama", "spouse", "Michelle Obama"]]),
                # walked forward: from Barack Obama to his spouse
                "chain": json.dumps(
                    [["spouse", "out", "Michelle Obama"], ["citizenship", "out", "X"]]
                ),
            },
            # rests on the edit alone
            {"fact_id": "c1/1", "premises": "[]", "chain": "[]"},
            {
                "fact_id": "c1/2",
                "premises": json.dumps([["Angela Merkel", "citizenship", "Germany"]]),
                # walked backward: from Germany to a citizen of it
                "chain": json.dumps(
                    [["citizenship", "in", "Angela Merkel"], ["spouse", "out", "Y"]]
                ),
            },
        ]
    )
    return probes, questions, facts, edits


ALIASES = {"United States": ["USA", "United States of America"]}


def build():
    probes, questions, facts, edits = tables()
    return premise_probes(
        probes,
        questions,
        facts,
        edits,
        verbaliser=Verbaliser(TEMPLATES),
        relations=RELATIONS,
        aliases=ALIASES,
        kg_triples=WORLD,
    )


def test_each_probe_rests_on_its_facts():
    table = build().set_index("probe_id")
    edit_fact = table.loc["c1/direct/0"]
    assert (edit_fact["kind"], edit_fact["answer"]) == ("edit_fact", "United States")
    assert edit_fact["prompt"] == "Barack Obama is a citizen of"
    premise = table.loc["c1/entailed/0"]
    assert (premise["kind"], premise["prompt"], premise["answer"]) == (
        "premise",
        "Barack Obama is married to",
        "Michelle Obama",
    )
    assert premise["direction"] == "forward"
    assert json.loads(premise["other_answers"]) == []
    # an entailed probe that rests on the edit alone has no premise row
    assert "c1/entailed/1" not in table.index
    assert set(table["case_id"]) == {"c1"}


def test_a_premise_walked_backward_is_asked_backward_and_any_kg_answer_counts():
    """Germany -> a citizen of it: asked from Germany ("Germany is the country of
    citizenship of", the converse's fallback wording), answered by the walked
    subject, with every other KG subject of that object as another answer."""
    premise = build().set_index("probe_id").loc["c1/entailed/2"]
    assert premise["direction"] == "backward"
    assert premise["prompt"] == "Germany is the country of citizenship of"
    assert (premise["subject"], premise["answer"]) == ("Germany", "Angela Merkel")
    assert json.loads(premise["other_answers"]) == ["Olaf Scholz"]


def test_a_premise_carries_its_answers_other_names():
    table = build().set_index("probe_id")
    assert json.loads(table.at["c1/direct/0", "aliases"]) == [
        "USA",
        "United States of America",
    ]
    assert json.loads(table.at["c1/entailed/0", "aliases"]) == []


def condition(subject: str, relation: str, prompt: str, answer: str, *aliases: str):
    return {
        "subject": subject,
        "relation": relation,
        "prompt": prompt,
        "answer": answer,
        "aliases": list(aliases),
    }


def test_a_datasets_conditions_become_premises_of_the_probes_they_name():
    capital = condition("Q858", "CAPITAL", "The capital of Syria is", "Damascus")
    rome = condition("Q38", "CAPITAL", "The capital of Italy is", "Rome", "Roma")
    paris = condition("Q142", "CAPITAL", "The capital of France is", "Paris")
    citizen = condition("Q1", "CITIZEN", "The citizenship of Leo is", "Syria")
    dataset_probes = pd.DataFrame(
        {
            "case_id": ["r1", "r1", "r2"],
            "probe_type": ["multihop", "locality", "multihop"],
            "text": ["Leo's capital is", "Leo's mother is", "Ada's capital is"],
            "answer_new": ["Damascus", "Irmelin", "Rome"],
            "premises": [
                json.dumps([capital, citizen]),
                "[]",
                json.dumps([rome, paris]),
            ],
        }
    )
    probes = pd.DataFrame(
        {
            "probe_id": ["r1/multihop/0", "r1/locality/0", "r2/multihop/0"],
            "case_id": ["r1", "r1", "r2"],
            "probe_type": ["multihop", "locality", "multihop"],
            "prompt": ["Leo's capital is", "Leo's mother is", "Ada's capital is"],
            "question": [None, None, None],
            "answer_new": ["Damascus", "Irmelin", "Rome"],
        }
    )
    rows = condition_rows(probes, dataset_probes)
    by_prompt = {(r["probe_id"], r["prompt"]): r for r in rows}
    assert sorted(by_prompt) == [
        ("r1/multihop/0", "The capital of Syria is"),
        ("r1/multihop/0", "The citizenship of Leo is"),
        ("r2/multihop/0", "The capital of France is"),
        ("r2/multihop/0", "The capital of Italy is"),
    ]
    assert {r["kind"] for r in rows} == {"condition"}
    # each condition keeps the other names the dataset gives its answer
    assert by_prompt[("r2/multihop/0", "The capital of Italy is")]["aliases"] == [
        "Roma"
    ]
    assert by_prompt[("r1/multihop/0", "The capital of Syria is")]["aliases"] == []
