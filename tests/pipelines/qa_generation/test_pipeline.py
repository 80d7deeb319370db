"""qa_generation + risk_unification on the demo, checked against the KG independently."""

from __future__ import annotations

import json

import pytest

from kebench.kg.amie_export import local_name
from kebench.project import run_pipeline
from kebench.schemas import PROBES


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("qa")
    for name in ("kg_build", "rule_mining", "qa_generation", "risk_unification"):
        catalog = run_pipeline(name, {"dataset": "demo"}, root)
    return catalog


def test_most_demo_edits_get_entailed_probes(demo):
    edits, probes = demo.load("edit_requests"), PROBES.validate(demo.load("probes"))
    entailed = probes[probes["probe_type"] == "entailed"]
    assert entailed["case_id"].nunique() / len(edits) >= 0.8
    report = demo.load("qa_report")["consequences"]
    assert report["edits_with_consequence_pct"] >= 80.0
    assert not entailed["prompt"].str.contains("|".join(["Question:", "\n"])).any()


def test_every_entailed_answer_follows_from_the_kg_and_the_edit(demo):
    """Re-derive each consequence from its rule, bindings and the raw KG triples."""
    kg = demo.load("kg_triples")
    facts = {
        (local_name(s), p, local_name(o))
        for s, p, o in zip(kg["s"], kg["p_local"], kg["o"], strict=True)
    }
    rules = demo.load("rules_for_qa").set_index("rule_id")
    edits = demo.load("edit_requests").set_index("case_id")
    entailed = demo.load("entailed_facts")
    assert len(entailed) > 0
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
        assert edit_atoms, f"{fact['fact_id']}: the edit is not in the rule body"
        for atom in bound:
            if (
                atom not in edit_atoms
            ):  # the rest of the body: true facts, not the replaced one
                assert atom in facts, f"{fact['fact_id']}: {atom} is not in the KG"
                assert atom != (subject, edit_atoms[0][1], old)
        head = tuple(bindings.get(term, term) for term in rule["head"])
        assert head == (
            local_name(fact["subject_uri"]),
            fact["relation"],
            local_name(fact["answer_new_uri"]),
        )
        assert head[2] != local_name(fact["answer_old_uri"])


def test_probe_table_covers_every_source(demo):
    probes = demo.load("probes")
    types = set(probes.loc[probes["source"] == "demo", "probe_type"])
    assert types == {"direct", "paraphrase", "entailed", "multihop", "locality"}
    locality = probes[probes["probe_type"] == "locality"]
    assert (locality["answer_old"] == locality["answer_new"]).all()
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
