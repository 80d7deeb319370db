"""Rule-guided propagation plans: held-out rules, leaks, exclusions, request forms."""

from __future__ import annotations

import pandas as pd
import pytest

from kebench.editing.propagation import (
    consequence_keys,
    joint_requests,
    plan_propagation,
    requests_from_plan,
    rule_groups,
    split_rules,
)
from kebench.editing.requests import EditRequest
from kebench.qa.verbaliser import Verbaliser

R = "http://dbpedia.org/resource/"
VERBALISER = Verbaliser(
    templates={
        "citizenship": {"noun": "country of citizenship"},
        "country": {
            "noun": "country",
            "cloze": "{subject} is located in the country of",
        },
    }
)


def fact(fact_id, rule_id, subject, relation, old, new, cloze):  # noqa: PLR0913, PLR0917 - one per column
    """A mined rule's consequence: its fact is the consequence itself."""
    case_id = fact_id.split("/")[0]
    return {
        "fact_id": fact_id,
        "case_id": case_id,
        "tier": "inductive",
        "kind": "rule",
        "rule_id": rule_id,
        "subject_uri": R + subject.replace(" ", "_"),
        "subject_label": subject,
        "relation": relation,
        "fact_subject_uri": R + subject.replace(" ", "_"),
        "fact_relation": relation,
        "answer_old": old,
        "answer_old_uri": R + old.replace(" ", "_"),
        "answer_new": new,
        "answer_new_uri": R + new.replace(" ", "_"),
        "cloze": cloze,
    }


# c1: three rules; R3 entails the same consequence as R1 (a leak when one is held
# out and the other propagated). c2: one rule. c3: no consequences at all.
FACTS = pd.DataFrame(
    [
        fact(
            "c1/0",
            "R1",
            "Michelle Obama",
            "citizenship",
            "United States",
            "Canada",
            "The country of citizenship of the spouse of Barack Obama is",
        ),
        fact(
            "c1/1",
            "R2",
            "Honolulu",
            "country",
            "United States",
            "Canada",
            "The place of birth of Barack Obama is located in the country of",
        ),
        fact(
            "c1/2",
            "R3",
            "Michelle Obama",
            "citizenship",
            "United States",
            "Canada",
            "The country of citizenship of the wife of Barack Obama is",
        ),
        fact(
            "c2/0",
            "R1",
            "Joachim Sauer",
            "citizenship",
            "Germany",
            "Austria",
            "The country of citizenship of the spouse of Angela Merkel is",
        ),
    ]
)
QUESTIONS = FACTS[["fact_id", "case_id", "rule_id", "cloze"]]
SUBJECTS = {"c1": "Barack Obama", "c2": "Angela Merkel", "c3": "Tim Cook"}


def probes(facts: pd.DataFrame = FACTS) -> pd.DataFrame:
    direct = [
        {
            "probe_id": f"{case}/direct",
            "case_id": case,
            "probe_type": "direct",
            "tier": None,
            "subject": subject,
            "prompt": f"{subject} is a citizen of",
            "rule_id": None,
            "fact_subject_uri": R + subject.replace(" ", "_"),
            "fact_relation": "citizenship",
        }
        for case, subject in SUBJECTS.items()
    ]
    entailed = [
        {
            "probe_id": f"{row.fact_id}/q",
            "case_id": row.case_id,
            "probe_type": "entailed",
            "tier": row.tier,
            "subject": SUBJECTS[row.case_id],
            "prompt": row.cloze,
            "rule_id": row.rule_id,
            "fact_subject_uri": row.subject_uri,
            "fact_relation": row.relation,
        }
        for row in facts.itertuples()
    ]
    return pd.DataFrame(direct + entailed)


def plan(seed: int = 0, form: str = "chained", share: float = 0.5, facts=FACTS):
    return plan_propagation(
        list(SUBJECTS),
        facts.drop(columns="cloze"),
        facts[["fact_id", "case_id", "rule_id", "cloze"]],
        probes(facts),
        verbaliser=VERBALISER,
        form=form,
        tiers=("inductive",),
        held_out_share=share,
        seed=seed,
    )


def test_split_keeps_a_group_on_each_side_and_is_seeded():
    groups = [["R1"], ["R2"], ["R3"], ["R4"]]
    propagated, held_out = split_rules(groups, "c1", 0.5, seed=0)
    assert sorted(propagated + held_out) == ["R1", "R2", "R3", "R4"]
    assert len(held_out) == 2 and not set(propagated) & set(held_out)
    assert split_rules(groups, "c1", 0.5, seed=0) == (propagated, held_out)
    assert len(split_rules(groups, "c1", 0.99, seed=0)[0]) == 1
    assert len(split_rules(groups, "c1", 0.0, seed=0)[1]) == 1
    assert split_rules([["R1"]], "c1", 0.5, seed=0) == (["R1"], [])
    draws = {tuple(split_rules(groups, "c1", 0.5, seed=s)[1]) for s in range(20)}
    assert len(draws) > 1
    # a group goes to one side whole
    for seed in range(10):
        propagated, held_out = split_rules([["R1", "R3"], ["R2"]], "c1", 0.5, seed)
        assert {"R1", "R3"} <= set(propagated) or {"R1", "R3"} <= set(held_out)


def test_rules_sharing_a_relation_or_a_new_answer_are_grouped():
    facts = pd.DataFrame(
        {
            "rule_id": ["R1", "R2", "R3", "R4", "R5"],
            "relation": ["country", "country", "spouse", "citizenship", "capital"],
            "answer_new_uri": ["Belgium", "Belgium", "Tom", "Australia", "Tom"],
        }
    )
    # R1-R2 share country and Belgium; R3-R5 share Tom; R4 stands alone
    assert rule_groups(facts) == [["R1", "R2"], ["R3", "R5"], ["R4"]]
    one = facts.assign(answer_new_uri="Belgium")
    # one group holds nothing out: the rules are grouped by relation alone
    assert rule_groups(one) == [["R1", "R2"], ["R3"], ["R4"], ["R5"]]
    # and failing that, split one by one
    same = one.assign(relation="country")
    assert rule_groups(same) == [["R1"], ["R2"], ["R3"], ["R4"], ["R5"]]


@pytest.mark.parametrize("seed", range(8))
def test_held_out_probes_share_no_rule_and_no_consequence_with_the_extra_edits(seed):
    requests, roles, excluded = plan(seed)
    reasons = dict(zip(excluded["case_id"], excluded["reason"], strict=True))
    assert reasons["c2"] == "one derivation per tier only: nothing to hold out"
    assert reasons["c3"] == "no entailed probes"
    assert set(requests["case_id"]) == {"c1"} and set(roles["case_id"]) == {"c1"}
    keys = dict(zip(FACTS["fact_id"], consequence_keys(FACTS), strict=True))
    made_rules = set(requests["rule_id"])
    made_keys = {keys[f] for f in requests["fact_id"]}
    held = roles[roles["role"] == "held_out"]
    assert not set(held["rule_id"]) & made_rules
    assert not {keys[p.removesuffix("/q")] for p in held["probe_id"]} & made_keys
    leaks = roles[roles["role"] == "leak"]
    assert {keys[p.removesuffix("/q")] for p in leaks["probe_id"]} <= made_keys
    # a propagated rule whose consequence another one states makes no request of its own
    assert made_rules <= set(roles.loc[roles["role"] == "propagated", "rule_id"])


def test_a_case_whose_held_out_consequences_are_all_edited_is_excluded():
    """c1's three rules all entail a citizenship, so they are split one by one. One is
    held out: when it is R1 or R3, its consequence is the other's, which an extra edit
    states; nothing is left to test."""
    daughter = FACTS["fact_id"] == "c1/1"
    facts = FACTS.copy()
    facts.loc[daughter, ["subject_label", "subject_uri", "relation", "cloze"]] = [
        "Malia Obama",
        R + "Malia_Obama",
        "citizenship",
        "The country of citizenship of the daughter of Barack Obama is",
    ]
    reasons = set()
    for seed in range(40):
        requests, roles, excluded = plan(seed, share=0.3, facts=facts)
        row = excluded[excluded["case_id"] == "c1"]
        if len(row):
            reasons.add(row["reason"].iloc[0])
            assert "c1" not in set(requests["case_id"])
        else:
            assert set(roles.loc[roles["role"] == "held_out", "rule_id"]) == {"R2"}
    assert reasons == {"every held-out probe shares a consequence with an extra edit"}


def test_request_forms():
    chained, _, _ = plan(seed=0)
    atomic, _, _ = plan(seed=0, form="atomic")
    assert list(chained["fact_id"]) == list(atomic["fact_id"])
    for row in chained.itertuples():
        assert row.subject == "Barack Obama"
        assert (
            row.prompt.replace("{}", row.subject)
            == FACTS.set_index("fact_id").loc[row.fact_id, "cloze"]
        )
    for row in atomic.itertuples():
        assert (
            row.subject == FACTS.set_index("fact_id").loc[row.fact_id, "subject_label"]
        )
        assert row.prompt in {
            "The country of citizenship of {} is",
            "{} is located in the country of",
        }
    edits = requests_from_plan(atomic)
    assert [e.case_id for e in edits] == list(atomic["fact_id"])
    assert all(
        e.target_new == "Canada" and e.target_true == "United States" for e in edits
    )


def test_unknown_form_is_refused():
    with pytest.raises(ValueError, match="unknown propagation form 'both'"):
        plan(form="both")


def test_a_held_out_rule_without_probes_leaves_nothing_to_test():
    """c1's R2 consequence has no question (e.g. capped): held out alone, it tests
    nothing."""
    without_r2 = probes()
    without_r2 = without_r2[without_r2["probe_id"] != "c1/1/q"]
    reasons = set()
    for seed in range(40):
        _, roles, excluded = plan_propagation(
            list(SUBJECTS),
            FACTS.drop(columns="cloze"),
            QUESTIONS,
            without_r2,
            verbaliser=VERBALISER,
            tiers=("inductive",),
            held_out_share=0.3,
            seed=seed,
        )
        reasons |= set(excluded.loc[excluded["case_id"] == "c1", "reason"])
    assert "no entailed probe of a held-out derivation" in reasons


# c4 (Cate Blanchett's spouse is now Tom Hanks): its two rules share neither a
# relation nor a new answer, so they can be split without overlap
C4 = pd.DataFrame(
    [
        fact(
            "c4/0",
            "R4",
            "Tom Hanks",
            "spouse",
            "Rita Wilson",
            "Cate Blanchett",
            "The spouse of Tom Hanks is",
        ),
        fact(
            "c4/1",
            "R5",
            "Tom Hanks",
            "citizenship",
            "United States",
            "Australia",
            "The country of citizenship of the spouse of Cate Blanchett is",
        ),
    ]
)


def joint_plan(seed: int):
    facts = pd.concat([FACTS, C4], ignore_index=True)
    subjects = SUBJECTS | {"c4": "Cate Blanchett"}
    entailed = [
        {
            "probe_id": f"{row.fact_id}/q",
            "case_id": row.case_id,
            "probe_type": "entailed",
            "tier": row.tier,
            "subject": subjects[row.case_id],
            "prompt": row.cloze,
            "rule_id": row.rule_id,
            "fact_subject_uri": row.subject_uri,
            "fact_relation": row.relation,
        }
        for row in C4.itertuples()
    ]
    # c1's locality probes: Michelle Obama's citizenship, which the extra edits of
    # R1 or R3 rewrite, her alma mater and Jensen Huang's citizenship, which nothing
    # touches
    locality = [
        {
            "probe_id": f"c1/locality/{i}",
            "case_id": "c1",
            "probe_type": "locality",
            "tier": None,
            "subject": "Barack Obama",
            "prompt": f"The {relation} of {subject} is",
            "rule_id": None,
            "fact_subject_uri": R + subject.replace(" ", "_"),
            "fact_relation": relation,
        }
        for i, (subject, relation) in enumerate(
            [
                ("Michelle Obama", "nationality|citizenship"),
                ("Michelle Obama", "almaMater"),
                ("Jensen Huang", "citizenship"),
            ]
        )
    ]
    direct = [
        {
            "probe_id": "c4/direct",
            "case_id": "c4",
            "probe_type": "direct",
            "tier": None,
            "subject": "Cate Blanchett",
            "prompt": "The spouse of Cate Blanchett is",
            "rule_id": None,
            "fact_subject_uri": R + "Cate_Blanchett",
            "fact_relation": "spouse",
        }
    ]
    every = pd.concat([probes(), pd.DataFrame(entailed + locality + direct)])
    return plan_propagation(
        ["c1", "c4"],
        facts.drop(columns="cloze"),
        facts[["fact_id", "case_id", "rule_id", "cloze"]],
        every,
        verbaliser=VERBALISER,
        tiers=("inductive",),
        seed=seed,
    )


@pytest.mark.parametrize("seed", range(6))
def test_held_out_probes_are_disjoint_where_the_rules_allow_it(seed):
    requests, roles, _ = joint_plan(seed)
    by_fact = pd.concat([FACTS, C4]).set_index("fact_id")
    for case_id, made in requests.groupby("case_id"):
        made_facts = by_fact.loc[made["fact_id"]]
        held = roles[(roles["case_id"] == case_id) & (roles["role"] == "held_out")]
        for row in held.itertuples():
            asked = by_fact.loc[row.probe_id.removesuffix("/q")]
            shares = asked["relation"] in set(made_facts["relation"]) or asked[
                "answer_new"
            ] in set(made_facts["answer_new"])
            assert row.overlap == ("shared" if shares else "disjoint")
    c4 = roles[(roles["case_id"] == "c4") & (roles["role"] == "held_out")]
    assert len(c4) == 1 and set(c4["overlap"]) == {"disjoint"}
    # every consequence of c1 is Canada: its held-out probes cannot avoid it
    c1 = roles[(roles["case_id"] == "c1") & (roles["role"] == "held_out")]
    assert set(c1["overlap"]) == {"shared"}
    assert roles.loc[roles["role"] != "held_out", "overlap"].isna().all()


def test_a_locality_probe_the_extra_edits_rewrite_is_dropped():
    seen = set()
    for seed in range(12):
        requests, roles, _ = joint_plan(seed)
        rewritten = set(roles.loc[roles["role"] == "rewritten", "probe_id"])
        edits_michelle = (
            requests["fact_id"].isin(["c1/0", "c1/2"]).any()
        )  # R1 or R3 propagated: Michelle Obama's citizenship is Canada
        assert rewritten == ({"c1/locality/0"} if edits_michelle else set())
        seen.add(edits_michelle)
    assert seen == {True, False}


def test_each_case_is_edited_with_its_own_edit_first():
    requests, _, _ = plan(seed=0)
    direct = {
        case: EditRequest(case, "{} is a citizen of", subject, "x", "y")
        for case, subject in SUBJECTS.items()
    }
    (joint,) = joint_requests(direct, requests, {"c1"})
    assert joint[0] is direct["c1"]
    assert [r.case_id for r in joint[1:]] == list(requests["fact_id"])
    assert joint_requests(direct, requests, {"c2"}) == []


# c1's deductive consequences: the country of Obama's birthplace (a composition whose
# last fact is Honolulu's country) and his citizenship asked by an alias
DEDUCED = pd.DataFrame(
    [
        fact(
            "c1/d0",
            None,
            "Barack Obama",
            "birthPlace/country",
            "United States",
            "Canada",
            "The country of the birthplace of Barack Obama is",
        )
        | {
            "tier": "deductive",
            "kind": "composition",
            "fact_subject_uri": R + "Honolulu",
            "fact_relation": "country",
        },
        fact(
            "c1/d1",
            None,
            "Obama",
            "citizenship",
            "United States",
            "Canada",
            "The country of citizenship of Obama is",
        )
        | {"tier": "deductive", "kind": "subject_alias"},
    ]
)


def test_deductive_derivations_are_split_and_the_inductive_tier_held_out_whole():
    facts = pd.concat([FACTS, DEDUCED], ignore_index=True)
    # a deductive question and its probe name their derivation: kind and path
    kinds = {
        "c1/d0": "composition:birthPlace/country",
        "c1/d1": "subject_alias:citizenship",
    }
    questions = facts[["fact_id", "case_id", "rule_id", "cloze"]].assign(
        rule_id=lambda q: q["fact_id"].map(kinds).fillna(q["rule_id"])
    )
    asked = probes(facts.assign(rule_id=questions["rule_id"]))
    propagated_kinds = set()
    for seed in range(12):
        requests, roles, excluded = plan_propagation(
            ["c1"],
            facts.drop(columns="cloze"),
            questions,
            asked,
            verbaliser=VERBALISER,
            seed=seed,
        )
        assert excluded.empty
        # one deductive derivation each side; its request is its own cloze
        (request,) = requests.itertuples()
        assert request.tier == "deductive"
        cloze = DEDUCED.set_index("fact_id").loc[request.fact_id, "cloze"]
        assert request.prompt.replace("{}", request.subject) == cloze
        assert request.subject in {"Barack Obama", "Obama"}
        deductive = roles[roles["tier"] == "deductive"].set_index("probe_id")["role"]
        assert sorted(deductive) == ["held_out", "propagated"]
        propagated_kinds.add(
            kinds[deductive[deductive == "propagated"].index[0].removesuffix("/q")]
        )
        # no mined rule is propagated: every inductive probe is held out (or leaks)
        inductive = roles[roles["tier"] == "inductive"]
        assert len(inductive) == len(FACTS[FACTS["case_id"] == "c1"])
        assert set(inductive["role"]) <= {"held_out", "leak"}
    assert propagated_kinds == set(kinds.values())


def test_an_unknown_tier_is_refused():
    with pytest.raises(ValueError, match="mitigation.propagation.tiers"):
        plan_propagation(
            ["c1"],
            FACTS.drop(columns="cloze"),
            QUESTIONS,
            probes(),
            verbaliser=VERBALISER,
            tiers=("logical",),
        )
