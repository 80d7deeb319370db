"""Probes name the KG fact they ask (fact keys), and what each edit rewrites."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from kebench.kg.vocabulary import Vocabulary, edit_relations
from kebench.project import PROJECT_ROOT
from kebench.qa.probes import (
    case_facts,
    case_paraphrases,
    dataset_probe_rows,
    edit_probes,
    edits_measured,
    edits_per_risk,
    entailed_probes,
    first_cases_per_risk,
    first_stored_edits,
    locality_probes,
    relation_specificity_probes,
    rewritten_facts,
    unify_probes,
    with_echoes,
)
from kebench.qa.verbaliser import Verbaliser

R = "http://dbpedia.org/resource/"
QA = "Question: {question}\nAnswer:"


def relations() -> dict:
    with open(PROJECT_ROOT / "conf/base/parameters/relations.yml") as handle:
        return yaml.safe_load(handle)["relations"]


def edit(case_id, subject, relation_id, prompt, old, new, question=None):  # noqa: PLR0913, PLR0917
    return {
        "case_id": case_id,
        "source": "demo",
        "risk": "counterfactual",
        "subject": subject,
        "relation_id": relation_id,
        "relation_label": relation_id,
        "prompt": prompt,
        "target_true": old,
        "target_new": new,
        "question": question,
        "subject_uri": R + subject.replace(" ", "_"),
        "target_true_uri": R + old.replace(" ", "_"),
        "target_new_uri": R + new.replace(" ", "_"),
    }


EDITS = pd.DataFrame(
    [
        edit(
            "e1",
            "Joe Biden",
            "P19",
            "{} was born in",
            "Scranton",
            "Dublin",
            "Where was Joe Biden born?",
        ),
        edit("e2", "Sweden", "P35", "The head of state of {} is", "Carl", "Olaf"),
        edit("e3", "Nowhere", "P9999", "{} is near", "A", "B"),
    ]
)
FACTS = pd.DataFrame(
    {
        "fact_id": ["e1/0"],
        "case_id": ["e1"],
        "tier": ["inductive"],
        "subject_uri": [R + "Joe_Biden"],
        "relation": ["citizenship"],
        "fact_subject_uri": [R + "Joe_Biden"],
        "fact_relation": ["citizenship"],
    }
)
QUESTIONS = pd.DataFrame(
    {
        "fact_id": ["e1/0"],
        "case_id": ["e1"],
        "tier": ["inductive"],
        "kind": ["rule"],
        "rule_id": ["R1"],
        "question": ["What is the citizenship of Joe Biden?"],
        "cloze": ["Joe Biden is a citizen of"],
        "answer_old": ["United States"],
        "answer_new": ["Ireland"],
        "hops": [2],
    }
)


def test_edit_and_entailed_probes_name_the_fact_they_ask():
    rel = relations()
    predicates = {r: edit_relations(r, rel) for r in rel}
    probes = unify_probes(
        [
            edit_probes(EDITS, QA, predicates),
            entailed_probes(QUESTIONS, EDITS, FACTS),
        ]
    ).set_index("probe_id")
    # relations.yml: P19 is dbo:birthPlace; P35 is dbo:leader and dbp:leaderName
    assert probes.loc["e1/direct/0", "fact_relation"] == "birthPlace"
    assert probes.loc["e1/paraphrase/0", "fact_subject_uri"] == R + "Joe_Biden"
    assert probes.loc["e2/direct/0", "fact_relation"] == "leader|leaderName"
    assert pd.isna(probes.loc["e3/direct/0", "fact_relation"])  # no KG predicate
    entailed = probes.loc["e1/entailed/0"]
    assert (entailed["fact_subject_uri"], entailed["fact_relation"]) == (
        R + "Joe_Biden",
        "citizenship",
    )


def test_locality_probes_ask_their_kg_fact():
    kg = pd.DataFrame(
        {
            "s": [R + "Paris", R + "Joe_Biden"],
            "p": ["http://dbpedia.org/ontology/country"] * 2,
            "o": [R + "France", R + "United_States"],
            "o_is_literal": [False, False],
            "o_lang": [None, None],
            "s_label": ["Paris", "Joe Biden"],
            "p_local": ["country", "country"],
            "o_label": ["France", "United States"],
        }
    )
    verbaliser = Verbaliser(templates={"country": {"noun": "country"}})
    probes = locality_probes(EDITS.iloc[:1], kg, verbaliser, per_edit=5, seed=0)
    # the edit's own subject is never a locality fact: only Paris is left
    assert probes[["fact_subject_uri", "fact_relation"]].values.tolist() == [
        [R + "Paris", "country"]
    ]


def test_an_edit_rewrites_its_fact_and_every_consequence():
    rel = relations()
    probes = edit_probes(EDITS, QA, {r: edit_relations(r, rel) for r in rel})
    facts = pd.concat(
        [
            FACTS,
            # a second consequence, e.g. one whose status is not "entailed"
            FACTS.assign(
                fact_id="e1/1", relation="residence", fact_relation="residence"
            ),
            # a deductive question over the edit and Ireland's capital changes no
            # stored fact
            FACTS.assign(
                fact_id="e1/2",
                tier="deductive",
                relation="birthPlace/P1376",
                fact_subject_uri=R + "Dublin",
                fact_relation="P1376",
            ),
        ]
    )
    rewritten = rewritten_facts(probes, facts)
    got = {tuple(row) for row in rewritten.to_numpy().tolist()}
    assert got == {
        ("e1", R + "Joe_Biden", "birthPlace", "direct"),
        ("e2", R + "Sweden", "leader", "direct"),
        ("e2", R + "Sweden", "leaderName", "direct"),
        ("e1", R + "Joe_Biden", "citizenship", "consequence"),
        ("e1", R + "Joe_Biden", "residence", "consequence"),
    }


def test_case_facts_gather_what_each_edit_changes_and_its_probes_ask():
    rel = relations()
    probes = unify_probes(
        [
            edit_probes(EDITS, QA, {r: edit_relations(r, rel) for r in rel}),
            entailed_probes(QUESTIONS, EDITS, FACTS),
        ]
    )
    facts = case_facts(probes, rewritten_facts(probes, FACTS))
    biden = facts["e1"]
    assert biden.edited == {(R + "Joe_Biden", "birthPlace")}
    assert biden.rewritten == {
        (R + "Joe_Biden", "birthPlace"),
        (R + "Joe_Biden", "citizenship"),
    }
    # its direct and paraphrase probes ask the edited fact, the entailed one the
    # consequence
    assert biden.asked == biden.rewritten
    assert facts["e3"].asked == frozenset()  # P9999 has no KG predicate


def test_case_paraphrases_are_the_questions_of_each_cases_paraphrase_probes():
    rel = relations()
    probes = edit_probes(EDITS, QA, {r: edit_relations(r, rel) for r in rel})
    # only e1 has a question; e2 and e3 have no paraphrase probe
    assert case_paraphrases(probes) == {"e1": ["Where was Joe Biden born?"]}


def test_dataset_probes_keep_their_style_and_cases():
    """A question goes into the QA format, an as-is prompt is scored as written; a
    case without an edit request gives no probe."""
    aliases = {"aliases_old": "[]", "aliases_new": "[]", "hops": 1}
    dataset = pd.DataFrame(
        [
            {
                "case_id": "e1",
                "probe_type": "multihop",
                "origin": "questions",
                "text": "Where was the president born?",
                "style": "question",
                "answer_old": "Scranton",
                "answer_new": "Dublin",
                **aliases,
            },
            {
                "case_id": "e1",
                "probe_type": "locality",
                "origin": "neighborhood_prompts",
                "text": "Kamala Harris was born in",
                "style": "as_is",
                "answer_old": "Oakland",
                "answer_new": "Oakland",
                **aliases,
            },
            {
                "case_id": "gone",
                "probe_type": "paraphrase",
                "origin": "rephrase",
                "text": "Where?",
                "style": "as_is",
                "answer_old": "A",
                "answer_new": "B",
                **aliases,
            },
        ]
    )
    rows = dataset_probe_rows(dataset, EDITS, QA)
    assert list(rows["case_id"]) == ["e1", "e1"]
    by_type = rows.set_index("probe_type")
    assert by_type.loc["multihop", "prompt"] == (
        "Question: Where was the president born?\nAnswer:"
    )
    assert by_type.loc["multihop", "question"] == "Where was the president born?"
    assert by_type.loc["locality", "prompt"] == "Kamala Harris was born in"
    assert pd.isna(by_type.loc["locality", "question"])
    assert set(rows["subject"]) == {"Joe Biden"} and set(rows["source"]) == {"demo"}
    assert len(unify_probes([rows])) == 2  # noqa: PLR2004 - valid probes


# cases in table order, as the probes table lists their direct probes (c1 twice)
CASES = pd.DataFrame(
    {
        "case_id": ["c1", "c1", "b1", "c2", "m1", "c3", "b2"],
        "risk": [
            "counterfactual",
            "counterfactual",
            "bias",
            "counterfactual",
            "misinformation",
            "counterfactual",
            "bias",
        ],
        "probe_type": "direct",
    }
)
PER_RISK = {"benign_update": 0, "counterfactual": 2, "misinformation": "all", "bias": 1}


def test_the_first_cases_of_each_risk_keep_the_tables_order():
    assert first_cases_per_risk(CASES, 2, "n") == ["c1", "b1", "c2", "m1", "b2"]
    assert first_cases_per_risk(CASES, PER_RISK, "n") == ["c1", "b1", "c2", "m1"]
    assert first_cases_per_risk(CASES, "all", "n") == [
        "c1",
        "b1",
        "c2",
        "m1",
        "c3",
        "b2",
    ]
    assert first_cases_per_risk(CASES, "0", "n") == []


def test_the_first_cases_are_taken_in_turn_across_relations():
    cases = pd.DataFrame(
        {
            "case_id": ["a1", "a2", "a3", "b1", "c1", "c2", "m1"],
            "risk": ["counterfactual"] * 6 + ["misinformation"],
            "fact_relation": ["citizenship"] * 3
            + ["birthPlace"]
            + ["spouse"] * 2
            + [None],
        }
    )
    # first turn: a1, b1, c1 (the first of each relation, in table order); second
    # turn: a2, c2; the ids come in table order
    assert first_cases_per_risk(cases, 3, "n") == ["a1", "b1", "c1", "m1"]
    assert first_cases_per_risk(cases, 5, "n") == ["a1", "a2", "b1", "c1", "c2", "m1"]
    assert first_cases_per_risk(cases, 1, "n") == ["a1", "m1"]


@pytest.mark.parametrize(
    ("n_edits", "message"),
    [
        ({"counterfactual": 2}, r"editing.n_edits: .*missing: \['benign_update'"),
        ({**PER_RISK, "rumour": 1}, r"unknown: \['rumour'\]"),
        ({**PER_RISK, "bias": -1}, r"editing.n_edits.bias: expected a count"),
        (2.5, r"editing.n_edits: expected a count of edits .* got 2.5"),
        (True, r"editing.n_edits: expected a count"),
    ],
)
def test_a_bad_count_of_edits_names_the_parameter(n_edits, message):
    with pytest.raises(ValueError, match=message):
        edits_per_risk(n_edits, "editing.n_edits")


def test_stored_edits_are_cut_per_method_in_the_tables_order():
    manifest = pd.DataFrame(
        {
            "method": ["ROME"] * 4 + ["FT-M"] * 2,
            "case_id": ["c3", "c2", "c1", "b2", "c3", "m1"],
        }
    )
    kept = first_stored_edits(manifest, CASES, PER_RISK, "stealthiness.n_edits")
    # ROME: c1 and c2 are its first counterfactual edits, b2 its first bias edit;
    # FT-M stored only c3 of the counterfactual edits
    assert sorted(map(tuple, kept[["method", "case_id"]].to_numpy())) == [
        ("FT-M", "c3"),
        ("FT-M", "m1"),
        ("ROME", "b2"),
        ("ROME", "c1"),
        ("ROME", "c2"),
    ]
    assert edits_measured(kept, CASES, "stealthiness.n_edits") == (
        "Edits measured, per method and risk, of the dataset's (the first of each "
        "risk, in turn across its relations, `stealthiness.n_edits`): FT-M: counterfactual 1 of 3, misinformation "
        "1 of 1, bias 0 of 2; ROME: counterfactual 2 of 3, misinformation 0 of 1, "
        "bias 1 of 2."
    )


def test_relation_specificity_asks_the_subjects_unlinked_relations():
    dbo = "http://dbpedia.org/ontology/"
    facts = [
        ("citizenship", "United_States"),
        ("birthPlace", "Honolulu"),
        ("spouse", "Michelle_Obama"),
        ("almaMater", "Columbia_University"),
        ("almaMater", "Harvard_University"),
        ("deathPlace", "Nowhere"),
    ]
    kg = pd.DataFrame(
        {
            "s": R + "Barack_Obama",
            "p": [dbo + p for p, _ in facts],
            "o": [R + o for _, o in facts],
            "o_is_literal": False,
            "o_lang": None,
            "s_label": "Barack Obama",
            "p_local": [p for p, _ in facts],
            "o_label": [o.replace("_", " ") for _, o in facts],
        }
    )
    rules = pd.DataFrame(
        {
            "rule_id": ["Rborn", "Rspouse", "Rdeath"],
            "body": [
                [["?a", "birthPlace", "?h"], ["?h", "country", "?b"]],
                [["?g", "citizenship", "?b"], ["?g", "spouse", "?a"]],
                [["?a", "citizenship", "?b"]],
            ],
            "head": [
                ["?a", "citizenship", "?b"],
                ["?a", "citizenship", "?b"],
                ["?a", "deathPlace", "?b"],
            ],
        }
    )
    vocabulary = Vocabulary(factual=frozenset(kg["p"]))
    templates = {
        "birthPlace": {"noun": "place of birth", "cloze": "{subject} was born in"},
        "spouse": {"noun": "spouse"},
        "almaMater": {"noun": "alma mater"},
        "deathPlace": {"noun": "place of death"},
    }
    edits = pd.DataFrame(
        [edit("e1", "Barack Obama", "P27", "{} is a citizen of", "A", "Canada")]
    )
    probes = relation_specificity_probes(
        edits, kg, rules, vocabulary, Verbaliser(templates), relations(), 5, 0
    )
    # citizenship is the edit's; deathPlace the head of a rule with it in the body;
    # birthPlace is in a rule's body only (a citizenship moves no birthplace);
    # almaMater has two values: no single answer
    assert sorted(zip(probes["prompt"], probes["answer_new"])) == [
        ("Barack Obama was born in", "Honolulu"),
        ("The spouse of Barack Obama is", "Michelle Obama"),
    ]
    assert (probes["answer_old"] == probes["answer_new"]).all()
    assert set(probes["probe_type"]) == {"relation_specificity"}


def test_an_echo_names_the_edited_subject_and_expects_the_new_object():
    edits = pd.DataFrame(
        [edit("e1", "Barack Obama", "P27", "{} is a citizen of", "A", "Canada")]
    )
    prompts = [
        ("direct", "Barack Obama is a citizen of", "Canada"),
        (
            "entailed",
            "The capital of the country of citizenship of Barack Obama is",
            "Ottawa",
        ),
        ("entailed", "Barack Hussein Obama is a citizen of", "Canada"),
        (
            "entailed",
            "The country of citizenship of the spouse of Michelle Obama is",
            "Canada",
        ),
        ("entailed", "The country of citizenship of Barack Obamas dog is", "Canada"),
    ]
    probes = pd.DataFrame(
        {
            "case_id": "e1",
            "probe_type": [t for t, _, _ in prompts],
            "prompt": [p for _, p, _ in prompts],
            "answer_new": [a for _, _, a in prompts],
            "aliases_new": None,
        }
    )
    aliases = pd.DataFrame(
        {"uri": [R + "Barack_Obama"], "alias": ["Barack Hussein Obama"]}
    )
    flagged = with_echoes(probes, edits, aliases)
    # the subject inside a longer word ("Obamas") is no mention of it
    assert flagged["echo"].tolist() == [True, False, True, False, False]
