"""IKE's demonstrations keep off the case's facts, never run out of unrelated facts,
and several IKE edits make one well-formed prefix (or a clear refusal)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from kebench.editing.delta import Delta
from kebench.editing.interface import EditContext
from kebench.editing.methods.ike import (
    IKEHyperParams,
    demonstrations,
    ike,
    joint_prefix,
)
from kebench.editing.requests import EditRequest
from kebench.qa.probes import CaseFacts
from kebench.scoring.evaluate import edited_scores

PARIS = ("dbr:Paris", "country")
ROME = ("dbr:Rome", "country")


def request(case_id: str, subject: str, old: str | None, new: str) -> EditRequest:
    return EditRequest(case_id, "{} is located in the country of", subject, old, new)


X = request("x", "Lyon", "France", "Spain")
POOL = [
    X,
    request("d1", "Paris", "France", "Peru"),  # rewrites Paris's country
    request("d3", "Oslo", "Norway", "Mali"),
    request("d2", "Rome", "Italy", "Chile"),
    request("u1", "Bern", "Switzerland", "Togo"),
    request("u2", "Milan", "Italy", "Cuba"),
]
FACTS = {
    # x's locality probe asks Paris's country: d1 may not demonstrate
    "x": CaseFacts(
        frozenset({("dbr:Lyon", "country")}),
        frozenset({("dbr:Lyon", "country")}),
        frozenset({("dbr:Lyon", "country"), PARIS}),
    ),
    "d1": CaseFacts(frozenset({PARIS}), frozenset({PARIS}), frozenset({PARIS})),
    # d2's edit changes Milan's country too (a consequence)
    "d2": CaseFacts(
        frozenset({ROME}),
        frozenset({ROME, ("dbr:Milan", "country")}),
        frozenset({ROME}),
    ),
    "u2": CaseFacts(frozenset({("dbr:Milan", "country")})),
}


def prompts(demo_text: str) -> tuple[str, str]:
    """(the new fact, the prompt) of one demonstration."""
    fact, prompt = re.fullmatch(r"New Fact: (.*)\nPrompt: (.*)\n\n", demo_text).groups()
    return fact, prompt


def test_demonstrations_never_touch_the_cases_facts():
    demos = demonstrations(X, POOL, k=16, facts=FACTS)
    texts = [prompts(d.text) for d in demos]
    # d1 changes the Paris fact that x asks: never a demonstration; Lyon is x's own
    assert not any("Paris" in fact or "Paris" in prompt for fact, prompt in texts)
    assert not any("Lyon" in fact or "Lyon" in prompt for fact, prompt in texts)
    for fact, prompt in texts[1::2]:
        # retain: the prompt states a true fact, and not one the demo's edit changes
        # (d2 moves Milan too, so Milan's true country never follows d2's fact)
        assert prompt.endswith(
            tuple(
                f"{r.subject} is located in the country of {r.target_true}"
                for r in POOL
            )
        )
        assert not (fact.startswith("Rome") and prompt.startswith("Milan"))
    # (the prompts tie on shared words, so the pool's order ranks them: d2's retain
    # demonstration passes over Milan and takes Bern)
    assert (
        "Rome is located in the country of Chile",
        "Bern is located in the country of Switzerland",
    ) in texts[1::2]


def test_running_out_of_unrelated_facts_ends_the_demonstrations():
    # one true fact for 4 edits of injected claims: the old with_truth[-1 - i // 2]
    # indexing asked for a second one and raised IndexError
    pool = [X, *(request(f"c{i}", f"Town{i}", None, "Atlantis") for i in range(4))]
    pool.append(request("t", "Bern", "Switzerland", "Togo"))
    demos = demonstrations(X, pool, k=16)
    retains = [prompts(d.text)[1] for d in demos[1::2]]
    assert retains == ["Bern is located in the country of Switzerland"]
    # copy, retain (the only true fact), copy: then no unrelated fact is left
    assert len(demos) == 3


def ike_delta(case: EditRequest, pool, facts, k: int = 4) -> Delta:
    context = EditContext(stats_dir=None, pool=pool, facts=facts)
    return ike(None, [case], IKEHyperParams(k=k), context)


def test_one_edit_keeps_the_papers_prompt_shape():
    delta = ike_delta(X, POOL, FACTS)
    demos = json.loads(delta.meta["ike"])["demonstrations"]
    expected = "".join(text for text, _ in demos)
    expected += "New Fact: Lyon is located in the country of Spain\nPrompt: "
    assert delta.prefix == expected and len(demos) == 4


def test_several_ike_edits_make_one_prefix_with_every_new_fact():
    y = POOL[2]  # d3: Oslo
    oslo = frozenset({("dbr:Oslo", "country")})
    facts = {**FACTS, "d3": CaseFacts(oslo, oslo, oslo)}
    deltas = [ike_delta(X, POOL, facts), Delta(), ike_delta(y, POOL, facts)]
    prefix = joint_prefix(deltas)
    assert prefix.count("Prompt: ") == prefix.count("New Fact: ") - 1
    assert "Prompt: New Fact" not in prefix
    assert prefix.endswith(
        "New Fact: Lyon is located in the country of Spain\n"
        "New Fact: Oslo is located in the country of Mali\nPrompt: "
    )
    demos = prefix.split("\n\n")[:-1]
    # no demonstration touches a fact of either edit: not Lyon, Paris (x's probe) or
    # Oslo (y's edit, which x's prefix alone could demonstrate)
    assert demos and not any(
        town in demo for demo in demos for town in ("Lyon", "Paris", "Oslo")
    )
    assert len(demos) <= 4 and len(set(demos)) == len(demos)


def test_prefixes_without_parts_are_not_glued():
    assert joint_prefix([Delta(), Delta()]) == ""
    assert joint_prefix([Delta(prefix="A: "), Delta()]) == "A: "
    with pytest.raises(ValueError, match="cannot be combined"):
        joint_prefix([Delta(prefix="A: "), Delta(prefix="B: ")])


@pytest.mark.model
def test_a_joint_prefix_past_the_context_is_refused_naming_cases_and_tokens(lm):
    limit = lm.model.config.max_position_embeddings
    long_name = " ".join(["Llanfairpwllgwyngyll"] * 20)
    cases = [request(f"s{i}", f"{long_name} {i}", "Wales", "Peru") for i in range(60)]
    deltas = [ike_delta(case, cases, {}, k=0) for case in cases]
    probes = pd.DataFrame(
        {
            "case_id": ["s0"],
            "probe_id": ["s0/direct/0"],
            "probe_type": ["direct"],
            "prompt": [cases[0].text],
            "answer_old": ["Wales"],
            "answer_new": ["Peru"],
        }
    )
    tokens = len(lm.tokenizer(joint_prefix(deltas))["input_ids"])
    assert tokens > limit  # the test's premise
    with pytest.raises(ValueError) as error:
        edited_scores(lm, probes, [([c.case_id for c in cases], deltas)])
    message = str(error.value)
    assert "60 edit(s), for cases s0, s1, s2, s3, s4 (60 in all)" in message
    assert f"takes {tokens} tokens" in message and "s0/direct/0" in message
    assert f"context of {limit}" in message
