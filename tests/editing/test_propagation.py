"""Rule-guided propagation plans: held-out rules, leaks, exclusions, request forms."""

from __future__ import annotations

import pandas as pd
import pytest

from kebench.editing.propagation import (
    consequence_keys,
    plan_propagation,
    requests_from_plan,
    split_rules,
)
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
    case_id = fact_id.split("/")[0]
    return {
        "fact_id": fact_id,
        "case_id": case_id,
        "rule_id": rule_id,
        "subject_uri": R + subject.replace(" ", "_"),
        "subject_label": subject,
        "relation": relation,
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


def probes() -> pd.DataFrame:
    direct = [
        {
            "probe_id": f"{case}/direct",
            "case_id": case,
            "probe_type": "direct",
            "subject": subject,
            "prompt": f"{subject} is a citizen of",
            "rule_id": None,
        }
        for case, subject in SUBJECTS.items()
    ]
    entailed = [
        {
            "probe_id": f"{row.fact_id}/q",
            "case_id": row.case_id,
            "probe_type": "entailed",
            "subject": SUBJECTS[row.case_id],
            "prompt": row.cloze,
            "rule_id": row.rule_id,
        }
        for row in FACTS.itertuples()
    ]
    return pd.DataFrame(direct + entailed)


def plan(seed: int = 0, form: str = "chained", share: float = 0.5):
    return plan_propagation(
        list(SUBJECTS),
        FACTS.drop(columns="cloze"),
        QUESTIONS,
        probes(),
        verbaliser=VERBALISER,
        form=form,
        held_out_share=share,
        seed=seed,
    )


def test_split_keeps_a_rule_on_each_side_and_is_seeded():
    rules = ["R1", "R2", "R3", "R4"]
    propagated, held_out = split_rules(rules, "c1", 0.5, seed=0)
    assert sorted(propagated + held_out) == rules
    assert len(held_out) == 2 and not set(propagated) & set(held_out)
    assert split_rules(rules, "c1", 0.5, seed=0) == (propagated, held_out)
    assert len(split_rules(rules, "c1", 0.99, seed=0)[0]) == 1
    assert len(split_rules(rules, "c1", 0.0, seed=0)[1]) == 1
    assert split_rules(["R1", "R1"], "c1", 0.5, seed=0) == (["R1"], [])
    draws = {tuple(split_rules(rules, "c1", 0.5, seed=s)[1]) for s in range(20)}
    assert len(draws) > 1


@pytest.mark.parametrize("seed", range(8))
def test_held_out_probes_share_no_rule_and_no_consequence_with_the_extra_edits(seed):
    requests, roles, excluded = plan(seed)
    reasons = dict(zip(excluded["case_id"], excluded["reason"], strict=True))
    assert reasons["c2"] == "one rule only: nothing to hold out"
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
    assert set(roles.loc[roles["role"] == "propagated", "rule_id"]) == made_rules


def test_a_case_whose_held_out_consequences_are_all_edited_is_excluded():
    """One of c1's three rules held out: when it is R1 or R3, its consequence is the
    other's, which an extra edit states; nothing is left to test."""
    reasons = set()
    for seed in range(40):
        requests, roles, excluded = plan(seed, share=0.3)
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
            held_out_share=0.3,
            seed=seed,
        )
        reasons |= set(excluded.loc[excluded["case_id"] == "c1", "reason"])
    assert "no entailed probe of a held-out rule" in reasons
