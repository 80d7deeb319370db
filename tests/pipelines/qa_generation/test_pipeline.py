"""qa_generation + risk_unification on the demo and on MQuAKE-T, checked against the
KG by checkers written apart from the derivation code."""

from __future__ import annotations

import json

import pytest

from kebench.kg.amie_export import local_name
from kebench.kg.vocabulary import vocabulary_of
from kebench.project import PROJECT_ROOT, run_pipeline
from kebench.qa.entailment import DerivationContext, derive_entailed_facts
from kebench.schemas import PROBES
from tests.qa.deductive_checker import Checker

UPSTREAM = ("kg_build", "rule_mining", "qa_generation", "risk_unification")
AXIOMS = PROJECT_ROOT / "conf/base/vocabulary/axioms.csv"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("qa")
    for name in UPSTREAM:
        catalog = run_pipeline(name, {"dataset": "demo"}, root)
    return catalog


def paper_facts(catalog):
    """The paper's one-step consequences of the same rules, KG and vocabulary."""
    relations = catalog.load("params:relations")
    return derive_entailed_facts(
        catalog.load("edit_requests"),
        catalog.load("rules_for_qa"),
        catalog.load("kg_triples"),
        relations,
        DerivationContext(vocabulary_of(catalog.load("axioms"), relations)),
        semantics="paper",
    )[0]


def test_most_demo_edits_get_a_deductive_composition(demo):
    edits, probes = demo.load("edit_requests"), PROBES.validate(demo.load("probes"))
    counterfactual = edits[edits["risk"] == "counterfactual"]
    entailed = probes[probes["probe_type"] == "entailed"]
    # issue 40: at least 80 % of the counterfactual edits have a composition that is
    # no echo (the headline's deductive Consistency counts those)
    headline = entailed[
        (entailed["tier"] == "deductive")
        & (entailed["kind"] == "composition")
        & ~entailed["echo"]
    ]
    covered = counterfactual["case_id"].isin(headline["case_id"]).mean()
    assert covered >= 0.8
    report = demo.load("qa_report")["consequences"]
    assert report["semantics"] == "consistent"
    assert report["edits_with_deductive_composition_pct"] >= 100 * covered - 1e-9
    assert not entailed["prompt"].str.contains("|".join(["Question:", "\n"])).any()
    # every probe of kebench's tiers says its tier and kind
    assert set(entailed["tier"]) == {"deductive", "inductive"}
    assert entailed["kind"].notna().all()
    # only entailed facts are probed; the others are kept, each with its reason
    facts = demo.load("entailed_facts")
    assert (
        entailed["case_id"]
        .isin(facts.loc[facts["status"] == "entailed", "case_id"])
        .all()
    )
    others = facts[facts["status"] != "entailed"]
    assert len(others) > 0 and others["reason"].notna().all()
    tiers = report["tiers"]
    assert sum(t["consequences"] for t in tiers.values()) == len(facts)


def test_the_independent_checker_passes_every_deductive_demo_row(demo):
    checker = Checker(
        demo.load("kg_triples"),
        demo.load("edit_requests"),
        AXIOMS,
        demo.load("params:relations"),
    )
    facts = demo.load("entailed_facts")
    assert checker.problems(facts) == []
    kinds = set(facts.loc[facts["tier"] == "deductive", "kind"])
    assert {"composition", "subject_alias", "symmetric", "inverse"} <= kinds


def test_every_inductive_answer_follows_from_the_kg_and_the_edit(demo):
    """Re-derive each rule consequence from its rule, bindings and the raw KG
    triples; a second-depth consequence may rest on another entailed consequence of
    its edit."""
    kg = demo.load("kg_triples")
    facts = {
        (local_name(s), p, local_name(o))
        for s, p, o in zip(kg["s"], kg["p_local"], kg["o"], strict=True)
    }
    rules = demo.load("rules_for_qa").set_index("rule_id")
    edits = demo.load("edit_requests").set_index("case_id")
    entailed = demo.load("entailed_facts")
    entailed = entailed[
        (entailed["status"] == "entailed") & (entailed["tier"] == "inductive")
    ]
    assert len(entailed) > 0
    derived = {
        case: {
            (local_name(s), r, local_name(o))
            for s, r, o in zip(
                part["subject_uri"],
                part["relation"],
                part["answer_new_uri"],
                strict=True,
            )
        }
        for case, part in entailed.groupby("case_id")
    }
    for fact in entailed.to_dict("records"):
        edit = edits.loc[fact["case_id"]]
        subject, old, new = (
            local_name(edit[f])
            for f in ("subject_uri", "target_true_uri", "target_new_uri")
        )
        bindings = json.loads(fact["bindings"])
        rule = rules.loc[fact["rule_id"]]
        bound = [(bindings[s], r, bindings[o]) for s, r, o in rule["body"]]
        edit_atoms = [atom for atom in bound if atom[0] == subject and atom[2] == new]
        if fact["depth"] == 1:
            assert edit_atoms, f"{fact['fact_id']}: the edit is not in the rule body"
        for atom in bound:
            if atom in edit_atoms or atom in derived[fact["case_id"]]:
                continue  # the edit, or a consequence it is chained on
            # the rest of the body: true facts, not the replaced one
            assert atom in facts, f"{fact['fact_id']}: {atom} is not in the KG"
            assert (atom[0], atom[2]) != (subject, old)
        head = tuple(bindings.get(term, term) for term in rule["head"])
        assert head == (
            local_name(fact["subject_uri"]),
            fact["relation"],
            local_name(fact["answer_new_uri"]),
        )
        assert head[2] != local_name(fact["answer_old_uri"])


def inconsistencies(facts, kg, edits, threshold: float) -> list[str]:
    """An independent checker of ``entailed_facts`` (not the derivation code).

    It flags two entailed facts of one edit that give different values to a functional
    (subject, relation), and an entailed fact whose supporting path uses a KG value that
    the edit or another of its applied consequences (entailed or conflicting) changes.
    Functionality is recomputed here from the KG triples (AMIE's #subjects / #facts).
    """
    per_relation = kg.groupby("p_local").agg(
        facts=("s", "size"), subjects=("s", "nunique")
    )
    functional = set(
        per_relation.index[
            per_relation["subjects"] / per_relation["facts"] >= threshold
        ]
    )
    kg_facts = set(zip(kg["s_label"], kg["p_local"], kg["o_label"], strict=True))
    found = []
    for case_id, part in facts[facts["tier"] == "inductive"].groupby("case_id"):
        entailed = part[part["status"] == "entailed"]
        values = (
            entailed[entailed["relation"].isin(functional)]
            .groupby(["subject_uri", "relation"])["answer_new_uri"]
            .nunique()
        )
        found += [
            f"{case_id}: {key} has {n} values" for key, n in values[values > 1].items()
        ]
        applied = part[part["status"].isin(["entailed", "conflicting"])]
        columns = ("subject_label", "relation", "answer_new")
        changed = set(zip(applied["subject_label"], applied["relation"], strict=True))
        derived = set(zip(*(applied[c] for c in columns), strict=True))
        edit = edits.loc[case_id]
        for fact in entailed.to_dict("records"):
            for s, r, o in map(tuple, json.loads(fact["path"])):
                if (s, o) == (edit["subject"], edit["target_new"]) or (
                    s,
                    r,
                    o,
                ) in derived:
                    continue  # the edit itself, or a consequence chained on
                if (s, r, o) not in kg_facts:
                    found.append(f"{fact['fact_id']}: {(s, r, o)} is not in the KG")
                elif (s, r) in changed or (s, o) == (
                    edit["subject"],
                    edit["target_true"],
                ):
                    found.append(f"{fact['fact_id']} rests on the changed {(s, r, o)}")
    return found


def test_an_independent_checker_finds_the_entailed_facts_consistent(demo):
    kg, edits = demo.load("kg_triples"), demo.load("edit_requests")
    threshold = demo.load("params:qa_generation")["consequences"][
        "functional_threshold"
    ]
    facts = demo.load("entailed_facts")
    assert inconsistencies(facts, kg, edits.set_index("case_id"), threshold) == []
    # the same checker does flag the paper's one-step consequences
    paper = paper_facts(demo)
    flagged = inconsistencies(paper, kg, edits.set_index("case_id"), threshold)
    assert any(f.startswith("demo-14/") for f in flagged)


def test_biden_born_in_dublin_regression(demo):
    """demo-14: the paper's one-step semantics says "Dublin is located in the United
    States" (from Biden's old citizenship); the consistent world does not."""
    facts = demo.load("entailed_facts")
    biden = facts[(facts["case_id"] == "demo-14") & (facts["tier"] == "inductive")]
    entailed = set(
        zip(
            *(
                biden.loc[biden["status"] == "entailed", c]
                for c in ("subject_label", "relation", "answer_new")
            ),
            strict=True,
        )
    )
    assert ("Joe Biden", "citizenship", "Ireland") in entailed
    assert not any(s == "Dublin" for s, _, _ in entailed)
    paper = paper_facts(demo)
    stale = paper[
        (paper["case_id"] == "demo-14")
        & (paper["subject_label"] == "Dublin")
        & (paper["tier"] == "inductive")
    ]
    assert set(stale["answer_new"]) == {"United States"}


def test_probe_table_covers_every_source(demo):
    probes = demo.load("probes")
    types = set(probes.loc[probes["source"] == "demo", "probe_type"])
    assert types == {
        "direct",
        "paraphrase",
        "entailed",
        "multihop",
        "locality",
        "relation_specificity",
    }
    unchanged = probes[probes["probe_type"].isin(["locality", "relation_specificity"])]
    assert (unchanged["answer_old"] == unchanged["answer_new"]).all()
    summary = demo.load("probe_summary")
    assert summary["probes"].sum() == len(probes)


def test_injection_sets_are_unified_when_present(demo, data_dir):
    probes = demo.load("probes")
    injected = probes[probes["risk"].isin(["misinformation", "bias"])]
    assert set(injected["source"]) == {
        "editattack_commonsense",
        "editattack_long_tail",
        "editattack_bias",
    }
    assert injected["answer_old"].isna().all()
    assert set(injected.loc[injected["risk"] == "bias", "probe_type"]) == {
        "direct",
        "paraphrase",
    }


def test_mquake_t_deductive_rows_pass_the_checker(data_dir, tmp_path):
    """The paper's MQuAKE-T edits on its DBpedia subgraph: no consequence of either
    tier rests on a link or name predicate (seeAlso, name, commonName, voy), every
    deductive row walks its path, and the report says why edits have none."""
    for name in UPSTREAM[:3]:
        catalog = run_pipeline(name, {"dataset": "mquake_t"}, tmp_path)
    facts = catalog.load("entailed_facts")
    checker = Checker(
        catalog.load("kg_triples"),
        catalog.load("edit_requests"),
        AXIOMS,
        catalog.load("params:relations"),
    )
    assert checker.problems(facts) == []
    report = catalog.load("qa_report")["consequences"]
    without = report["edits_without_deductive_composition"]
    covered = report["edits_with_deductive_composition_pct"]
    # every edit either has a probed composition or a stated reason for having none
    assert covered > 0
    assert (
        round(covered / 100 * report["edits"]) + sum(without.values())
        == (report["edits"])
    )
