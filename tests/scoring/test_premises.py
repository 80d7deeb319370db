"""Known premises scored on the real model, against a plain one-sequence computation."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kebench.schemas import PREMISE_PROBES
from kebench.scoring.evaluate import ScoringSettings, score_pass
from kebench.scoring.generation import GenerationSettings
from kebench.scoring.metrics import squad_normalise
from kebench.scoring.premises import (
    answered_prompts,
    known_probes,
    known_share,
    premise_knowledge,
)
from tests.scoring.test_generation import greedy_by_hand


def plain_greedy(lm, prompt: str, settings: GenerationSettings) -> str:
    """The oracle: a greedy continuation by full forward passes, from its first
    non-space character to its first stop string (``settings`` without sentence
    ends)."""
    tokens = greedy_by_hand(lm, prompt, settings.max_new_tokens)
    text = lm.tokenizer.decode(tokens, skip_special_tokens=True).lstrip()
    cuts = [text.find(stop) for stop in settings.stop_strings if stop in text]
    return (text[: min(cuts)] if cuts else text).strip()


# a decode the oracle can follow: stop strings only
PLAIN = GenerationSettings(
    stop_strings=("\n", "."), sentence_end=False, max_new_tokens=8
)


PREMISES = PREMISE_PROBES.validate(
    pd.DataFrame(
        [
            {
                "probe_id": "c1/direct/0",
                "case_id": "c1",
                "kind": "edit_fact",
                "subject": "France",
                "relation": "capital",
                "prompt": "The capital of France is",
                "direction": "forward",
                "answer": "Paris",
                "aliases": json.dumps(["Paris, France"]),
                "other_answers": "[]",
            },
            {
                "probe_id": "c1/entailed/0",
                "case_id": "c1",
                "kind": "premise",
                "subject": "Japan",
                "relation": "capital",
                "prompt": "The capital of Japan is",
                "direction": "forward",
                "answer": "Canberra",
                "aliases": "[]",
                "other_answers": "[]",
            },
            {  # the same fact under another probe: scored once, counted once
                "probe_id": "c1/entailed/1",
                "case_id": "c1",
                "kind": "premise",
                "subject": "Japan",
                "relation": "capital",
                "prompt": "The capital of Japan is",
                "direction": "forward",
                "answer": "Canberra",
                "aliases": "[]",
                "other_answers": "[]",
            },
            {  # nothing to beat
                "probe_id": "c1/entailed/1",
                "case_id": "c1",
                "kind": "premise",
                "subject": "Earth",
                "relation": "star",
                "prompt": "The Earth orbits the",
                "direction": "backward",
                "answer": "Sun",
                "aliases": "[]",
                "other_answers": json.dumps(["Sol"]),
            },
        ]
    )
)


@pytest.mark.model
def test_known_means_the_base_model_generates_the_answer(lm):
    settings = PLAIN
    table, generated = premise_knowledge(
        lm, PREMISES, model="smollm2", settings=settings
    )
    assert len(table) == len(PREMISES) and set(table["model"]) == {"smollm2"}
    # each distinct premise generated once, and handed back to be stored
    (new_rows,) = generated.values()
    assert len(new_rows) == PREMISES.drop_duplicates(["prompt", "answer"]).shape[0]
    # the reference: each prompt generated alone, greedily, by a plain loop
    for row in table.to_dict("records"):
        assert row["generation"] == plain_greedy(lm, row["prompt"], settings)
    # SmolLM2 names Paris as France's capital ("Paris"), and Tokyo, not Canberra,
    # as Japan's
    known = dict(zip(table["probe_id"] + ":" + table["answer"], table["known"]))
    assert squad_normalise(table.at[0, "generation"]) == "paris"
    assert known["c1/direct/0:Paris"] and not known["c1/entailed/0:Canberra"]
    # asked again with those generations stored: nothing is generated, same table
    stored = {"run1": lambda: new_rows}
    again, none = premise_knowledge(lm, PREMISES, "smollm2", settings, stored)
    assert none == {}
    pd.testing.assert_frame_equal(again, table)


@pytest.mark.model
def test_a_reply_that_gives_the_answer_another_name_or_another_kg_answer_is_known(lm):
    """Replies handed in (``answered``), so that none is generated: a qualifier
    after the answer is still the answer, a backward question's other KG answers
    count, another answer does not."""
    answered = {
        "The capital of France is": "Paris, the city of light.",
        "The capital of Japan is": "Tokyo.",
        "The Earth orbits the": "Sol, our star.",
    }
    table, _ = premise_knowledge(lm, PREMISES, "smollm2", PLAIN, answered=answered)
    known = dict(zip(table["prompt"], table["known"]))
    assert known == {
        "The capital of France is": True,
        "The capital of Japan is": False,
        "The Earth orbits the": True,
    }
    assert table.groupby("direction").size().to_dict() == {"backward": 1, "forward": 3}


def test_answered_prompts_are_those_stopped_within_the_premise_budget():
    probes = pd.DataFrame(
        {"probe_id": ["a", "b", "c", "d", "e"], "prompt": list("ABCDE")}
    )
    base = pd.DataFrame(
        {
            "probe_id": ["a", "b", "c", "d", "e"],
            "context": ["continuation"] * 4 + ["chat_template"],
            "wild_text": ["x", "y", "z", "w", "v"],
            "wild_stop": ["sentence_end", "eos", "cap", "stop_string", "eos"],
            "wild_tokens": [3.0, 16.0, 4.0, 17.0, 2.0],
        }
    )
    # c never stopped; d stopped past 16 tokens, where a premise decode is cut; e
    # was asked through the chat template, not as the cloze a premise is
    assert answered_prompts(probes, base, 16) == {"A": "x", "B": "y"}


@pytest.mark.model
def test_premises_a_base_free_answer_answers_are_not_generated_again(lm):
    settings = PLAIN
    probes = PREMISES.drop_duplicates("prompt").assign(
        probe_type="direct",
        answer_new="x",
        answer_old=None,
        question=None,
        form="cloze",
    )
    wild = GenerationSettings(stop_strings=("\n", "."), sentence_end=False)
    base = score_pass(
        lm,
        probes.set_index("probe_id", drop=False),
        settings=ScoringSettings(wild=wild, wild_types=("direct",)),
    ).reset_index(names="probe_id")
    answered = answered_prompts(probes, base, settings.max_new_tokens)
    assert answered  # SmolLM2 ends some of these answers within 8 tokens
    asked = []
    hook = lm.model.register_forward_pre_hook(
        lambda _m, _a, kwargs: (
            asked.extend(kwargs["input_ids"].tolist())
            if kwargs.get("cache") is None or kwargs["cache"].get_seq_length() == 0
            else None
        ),
        with_kwargs=True,
    )
    try:
        table, _ = premise_knowledge(
            lm, PREMISES, "smollm2", settings, answered=answered
        )
    finally:
        hook.remove()
    prompts = {lm.tokenizer.decode(row, skip_special_tokens=True) for row in asked}
    assert not {p for p in prompts if p.strip() in answered}
    # the same answers as the premises' own greedy decode
    for row in table.to_dict("records"):
        assert row["generation"] == plain_greedy(lm, row["prompt"], settings)


def test_a_probe_is_known_when_all_its_premises_are():
    knowledge = PREMISES.assign(model="m", known=[True, True, False, True])
    probes = pd.DataFrame(
        {
            "probe_id": [
                "c1/direct/0",
                "c1/entailed/0",
                "c1/entailed/1",
                "c1/entailed/2",
                "c1/locality/0",
            ],
            "probe_type": ["direct", "entailed", "entailed", "entailed", "locality"],
        }
    )
    flags = known_probes(knowledge, probes)
    assert flags["c1/direct/0"] and flags["c1/entailed/0"]
    assert not flags["c1/entailed/1"]  # one of its two premises is unknown
    assert flags["c1/entailed/2"]  # no premise: rests on the edit alone
    assert pd.isna(flags["c1/locality/0"])
    share = known_share(knowledge).set_index(["kind", "direction"])
    # distinct questions, per direction: the Japan premise counts once (True), the
    # Earth premise, asked backward, once
    assert share.at[("premise", "forward"), "n"] == 1
    assert share.at[("premise", "forward"), "known_share"] == 1.0
    assert share.at[("premise", "backward"), "known_share"] == 1.0
    assert share.at[("edit_fact", "forward"), "known_share"] == 1.0
