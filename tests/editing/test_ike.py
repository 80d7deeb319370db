"""IKE's prompt is EasyEdit's text for the same demonstrations; its demonstrations keep
off the case's facts, a shortage of unrelated facts never raises, and several IKE edits
make one well-formed prefix (or a clear refusal)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from kebench.editing.delta import Delta
from kebench.editing.interface import EditContext
from kebench.editing.methods.ike import (
    IKEHyperParams,
    compose_prefix,
    demonstrating_edits,
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


def test_the_prefix_is_easyedits_text_for_a_hand_built_case():
    # every prompt shares its six words with x's, so the pool's order ranks them;
    # unrelated true facts come from the least similar end: Oslo's for Paris, then
    # Paris's for Oslo
    pool = [X, POOL[1], POOL[2]]
    paraphrases = {"d1": ["Question: Which country is Paris in?\nAnswer:"]}
    demos = demonstrations(X, pool, k=16, paraphrases=paraphrases)
    prefix = compose_prefix(
        [d.text for d in demos], ["Lyon is located in the country of Spain"]
    )
    assert prefix == (
        # d1: copy, update (its paraphrase), retain
        "New Fact: Paris is located in the country of Peru\n"
        "Prompt: Paris is located in the country of Peru\n\n"
        "New Fact: Paris is located in the country of Peru\n"
        "Prompt: Question: Which country is Paris in?\nAnswer: Peru\n\n"
        "New Fact: Paris is located in the country of Peru\n"
        "Prompt: Oslo is located in the country of Norway\n\n"
        # d3: no paraphrase, so copy and retain
        "New Fact: Oslo is located in the country of Mali\n"
        "Prompt: Oslo is located in the country of Mali\n\n"
        "New Fact: Oslo is located in the country of Mali\n"
        "Prompt: Paris is located in the country of France\n\n"
        "New Fact: Lyon is located in the country of Spain\n"
        "Prompt: "
    )
    # k cuts the list: d1's three, then d3's copy
    cut = demonstrations(X, pool, k=4, paraphrases=paraphrases)
    assert [d.text for d in cut] == [d.text for d in demos[:4]]


def test_ike_delta_prefix_is_the_demonstrations_then_the_new_fact():
    context = EditContext(stats_dir=None, pool=[X, POOL[1], POOL[2]])
    delta = ike(None, [X], IKEHyperParams(k=3), context)
    assert delta.params == {}
    assert delta.prefix == (
        "New Fact: Paris is located in the country of Peru\n"
        "Prompt: Paris is located in the country of Peru\n\n"
        "New Fact: Paris is located in the country of Peru\n"
        "Prompt: Oslo is located in the country of Norway\n\n"
        "New Fact: Oslo is located in the country of Mali\n"
        "Prompt: Oslo is located in the country of Mali\n\n"
        "New Fact: Lyon is located in the country of Spain\n"
        "Prompt: "
    )


def test_demonstrations_never_touch_the_cases_facts():
    edits = demonstrating_edits(X, POOL, k=16, facts=FACTS)
    texts = [prompts(d.text) for edit in edits for d in edit.demonstrations()]
    # d1 changes the Paris fact that x asks: never a demonstration; Lyon is x's own
    assert not any("Paris" in fact or "Paris" in prompt for fact, prompt in texts)
    assert not any("Lyon" in fact or "Lyon" in prompt for fact, prompt in texts)
    assert [edit.request.case_id for edit in edits] == ["d3", "d2", "u1", "u2"]
    for edit in edits:
        if edit.unrelated is None:
            continue
        # retain: a true fact, and not one the demonstrating edit changes (d2 moves
        # Milan too, so Milan's true country never follows d2's fact)
        assert edit.unrelated.target_true is not None
        assert not (
            edit.request.subject == "Rome" and edit.unrelated.subject == "Milan"
        )
    # (the prompts tie on shared words, so the pool's order ranks them: d2's retain
    # demonstration passes over Milan and takes Bern)
    (d2,) = [edit for edit in edits if edit.request.case_id == "d2"]
    assert d2.unrelated.subject == "Bern"


def test_a_shortage_of_unrelated_facts_leaves_copies_and_never_raises():
    # one true fact for 4 edits of injected claims: the old with_truth[-1 - i // 2]
    # indexing asked for a second one and raised IndexError
    pool = [X, *(request(f"c{i}", f"Town{i}", None, "Atlantis") for i in range(4))]
    pool.append(request("t", "Bern", "Switzerland", "Togo"))
    edits = demonstrating_edits(X, pool, k=16)
    assert [e.unrelated.subject if e.unrelated else None for e in edits] == [
        "Bern",
        *([None] * 4),
    ]
    demos = demonstrations(X, pool, k=16)
    retains = [
        p for _, p in map(prompts, (d.text for d in demos)) if "Switzerland" in p
    ]
    # the first edit's copy and retain, then a copy for each of the others
    assert len(demos) == 6 and retains == [
        "Bern is located in the country of Switzerland"
    ]
    # no true fact at all: the run's path (ike through its context) makes copies only
    claims = [X, *(request(f"c{i}", f"Town{i}", None, "Atlantis") for i in range(3))]
    delta = ike(
        None, [X], IKEHyperParams(k=16), EditContext(stats_dir=None, pool=claims)
    )
    shown = [prompts(d + "\n\n") for d in delta.prefix.split("\n\n")[:-1]]
    assert len(shown) == 3 and all(fact == prompt for fact, prompt in shown)


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
            "question": [None],
            "form": ["cloze"],
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
