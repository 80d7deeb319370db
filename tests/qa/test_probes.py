"""Probes name the KG fact they ask (fact keys), and what each edit rewrites."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from kebench.project import PROJECT_ROOT
from kebench.qa.entailment import edit_relations
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
    rewritten_facts,
    unify_probes,
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
        "subject_uri": [R + "Joe_Biden"],
        "relation": ["citizenship"],
    }
)
QUESTIONS = pd.DataFrame(
    {
        "fact_id": ["e1/0"],
        "case_id": ["e1"],
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
        [FACTS, FACTS.assign(fact_id="e1/1", relation="residence")]
    )  # a second consequence, e.g. one whose status is not "entailed"
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
        "risk, `stealthiness.n_edits`): FT-M: counterfactual 1 of 3, misinformation "
        "1 of 1, bias 0 of 2; ROME: counterfactual 2 of 3, misinformation 0 of 1, "
        "bias 1 of 2."
    )
