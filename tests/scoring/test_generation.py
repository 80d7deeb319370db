"""Free generation (protocols wild and bke_f1): batched answers, stops, the cap, scores."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from kebench.scoring.generation import (
    GenerationSettings,
    bke_f1,
    first_tokens_text,
    generate_answers,
    generation_table,
    model_input,
    wild_match,
    wild_scores,
)

QUESTIONS = [
    "Who wrote Hamlet?",
    "The capital of Japan is",
    "What is the largest planet in the solar system?",
]


def greedy_by_hand(lm, text: str, n_tokens: int) -> list[int]:
    """The oracle: argmax of a full forward pass per step, no cache, no padding."""
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
    out = []
    with torch.no_grad():
        for _ in range(n_tokens):
            logits = lm.model(input_ids=ids).logits[0, -1]
            token = int(logits.argmax())
            out.append(token)
            if token == lm.tokenizer.eos_token_id:
                break
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out


def prefilled_rows(lm, call):
    """``call()``'s result, and the token rows of every forward pass that starts its
    sequences (no cache, or an empty one): the prompts the model was run on."""
    rows = []

    def record(_module, _args, kwargs):
        cache = kwargs.get("cache")
        if cache is None or cache.get_seq_length() == 0:
            rows.extend(kwargs["input_ids"].tolist())

    hook = lm.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        return call(), rows
    finally:
        hook.remove()


@pytest.mark.model
def test_batched_answers_are_the_greedy_answers_of_each_prompt(lm):
    settings = GenerationSettings(
        context="instruction", stop_strings=(), max_new_tokens=12, batch_size=3
    )
    answers = generate_answers(lm, QUESTIONS, settings)
    for question, answer in zip(QUESTIONS, answers, strict=True):
        tokens = greedy_by_hand(lm, model_input(lm, question, settings), 12)
        ended = lm.tokenizer.eos_token_id in tokens
        kept = tokens[:-1] if ended else tokens
        assert answer.raw == lm.tokenizer.decode(kept, skip_special_tokens=True)
        assert answer.n_tokens == len(kept)
        assert answer.stop == ("eos" if ended else "cap")


@pytest.mark.model
def test_an_input_asked_twice_is_generated_once_and_answered_alike(lm):
    settings = GenerationSettings(
        context="prompt", stop_strings=(), max_new_tokens=4, batch_size=4
    )
    texts = [QUESTIONS[1], QUESTIONS[0], QUESTIONS[1]]
    answers, prefilled = prefilled_rows(
        lm, lambda: generate_answers(lm, texts, settings)
    )
    assert len(prefilled) == 2  # the two distinct texts, one row each
    assert answers[0] == answers[2]
    tokens = greedy_by_hand(lm, QUESTIONS[1], 4)
    assert answers[2].n_tokens == len(tokens)
    assert answers[2].raw == lm.tokenizer.decode(tokens, skip_special_tokens=True)


# an in-context edit's prefix of IKE's form: it ends in a space, which the text after it
# takes into its first token
IKE_PREFIX = (
    "New Fact: The capital of Japan is Kyoto\nPrompt: The capital of Japan is Kyoto"
    "\n\nNew Fact: Hamlet was written by Goethe\nPrompt: "
)


@pytest.mark.model
@pytest.mark.parametrize("context", ["prompt", "instruction"])
def test_a_prefix_runs_once_and_answers_are_the_greedy_answers_after_it(lm, context):
    settings = GenerationSettings(
        context=context, stop_strings=(), max_new_tokens=8, batch_size=2
    )
    prefix_ids = lm.tokenizer(IKE_PREFIX)["input_ids"][:-1]
    answers, full_rows = prefilled_rows(
        lm, lambda: generate_answers(lm, QUESTIONS, settings, IKE_PREFIX)
    )
    assert [row[: len(prefix_ids)] for row in full_rows] == [prefix_ids]
    for question, answer in zip(QUESTIONS, answers, strict=True):
        text = IKE_PREFIX + model_input(lm, question, settings)
        tokens = greedy_by_hand(lm, text, 8)
        kept = (
            tokens[: tokens.index(lm.tokenizer.eos_token_id)]
            if (lm.tokenizer.eos_token_id in tokens)
            else tokens
        )
        assert answer.raw == lm.tokenizer.decode(kept, skip_special_tokens=True)


@pytest.mark.model
def test_an_answer_is_cut_at_its_first_stop_string_and_the_cap_is_flagged(lm):
    free = generate_answers(
        lm, QUESTIONS[:1], GenerationSettings(context="chat", stop_strings=())
    )[0]
    word = free.raw.split()[1]  # a stop string the free answer contains
    cut = generate_answers(
        lm, QUESTIONS[:1], GenerationSettings(context="chat", stop_strings=(word,))
    )[0]
    assert cut.stop == "stop_string"
    assert cut.text == free.raw[: free.raw.find(word)].strip()
    capped = generate_answers(
        lm, QUESTIONS[:1], GenerationSettings(stop_strings=(), max_new_tokens=2)
    )[0]
    assert (capped.stop, capped.n_tokens) == ("cap", 2)


@pytest.mark.model
def test_a_decode_that_goes_on_past_its_stop_also_gives_the_shorter_answer(lm):
    """One decode for two protocols: the answer cut at its stop string is the one a
    decode that stops there gives, and its first 8 tokens are the greedy oracle's."""
    prompts = ["The capital of France is", *QUESTIONS]
    settings = GenerationSettings(stop_strings=("\n", "."), max_new_tokens=12)
    alone = generate_answers(lm, prompts, settings)
    together = generate_answers(lm, prompts, settings, at_least=[8, 0, 8, 8])
    for a, b in zip(alone, together, strict=True):
        assert (a.text, a.raw, a.stop, a.n_tokens) == (
            b.text,
            b.raw,
            b.stop,
            b.n_tokens,
        )
    # the first prompt stops at its full stop before 8 tokens: the decode went on
    assert together[0].stop == "stop_string" and together[0].n_tokens < 8
    assert len(together[0].tokens) == 8
    for index in (0, 2, 3):
        tokens = greedy_by_hand(lm, prompts[index], 8)
        kept = tokens[:-1] if lm.tokenizer.eos_token_id in tokens else tokens
        expected = lm.tokenizer.decode(kept, skip_special_tokens=True)
        assert first_tokens_text(together[index], 8, lm.tokenizer) == expected


@pytest.mark.model
def test_chat_context_is_the_model_template_and_instruction_holds_the_question(lm):
    chat = model_input(lm, "Who wrote Hamlet?", GenerationSettings(context="chat"))
    assert "<|im_start|>user\nWho wrote Hamlet?<|im_end|>" in chat
    assert chat.endswith("<|im_start|>assistant\n")
    asked = GenerationSettings(context="instruction", instruction="Q: {question}\nA:")
    assert model_input(lm, "Who?", asked) == "Q: Who?\nA:"
    assert model_input(lm, "Q: Who?\nA:", GenerationSettings()) == "Q: Who?\nA:"
    assert model_input(lm, "Who?", GenerationSettings(context="question")) == "Who?"


def test_wild_matches_the_answer_or_an_alias_after_squad_normalisation():
    assert wild_match("the Eiffel Tower!", "Eiffel tower") == 1.0
    assert wild_match("NYC", "New York City") == 0.0
    assert wild_match("NYC", "New York City", ["N.Y.C.", "NYC"]) == 1.0
    assert wild_match("Paris, France", "Paris") == 0.0


def test_bke_f1_is_token_f1_against_the_answer():
    # 1 shared token; precision 1/2, recall 1: F1 = 2/3
    assert bke_f1("Paris France", "Paris") == pytest.approx(2 / 3)
    assert bke_f1("the", "a") == 0.0  # both normalise to nothing in common
    assert bke_f1("William Shakespeare", "Shakespeare William") == 1.0


def test_settings_refuse_an_unknown_context_or_an_instruction_without_question():
    with pytest.raises(ValueError, match="generation context 'poem'"):
        GenerationSettings(context="poem")
    with pytest.raises(ValueError, match="has no {question}"):
        GenerationSettings(context="instruction", instruction="Answer:")
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        GenerationSettings(max_new_tokens=0)


def test_wild_scores_use_aliases_and_compare_locality_with_the_base_answer():
    probes = pd.DataFrame(
        {
            "probe_type": ["direct", "multihop", "locality", "paraphrase"],
            "answer_new": ["Dublin", "Tokyo", "Oakland", "Dublin"],
            "aliases_new": [None, json.dumps(["Tokyo Metropolis"]), None, None],
        },
        index=["p1", "p2", "p3", "p4"],
    )
    base = pd.Series(["Scranton", "London", "Oakland, CA", None], index=probes.index)
    edit = pd.Series(
        ["dublin", "Tokyo Metropolis", "Oakland", None], index=probes.index
    )
    scores = wild_scores(probes, base, edit)
    assert scores["wild_em"].tolist()[:3] == [1.0, 1.0, 0.0]
    # F1 is against the answer alone: "tokyo metropolis" vs "tokyo" is 2/3
    assert scores["bke_f1"].tolist()[:3] == pytest.approx([1.0, 2 / 3, 2 / 3])
    # a probe without a generation has no score
    assert scores.loc["p4"].isna().all()


def test_generation_table_keeps_each_answer_with_what_was_expected():
    probes = pd.DataFrame(
        {
            "probe_id": ["c/direct/0", "c/locality/0"],
            "prompt": ["Joe Biden was born in", "Kamala Harris was born in"],
            "question": [None, None],
            "answer_new": ["Dublin", "Oakland"],
        }
    )
    scores = pd.DataFrame(
        {
            "model": "m",
            "method": "ROME",
            "case_id": "c",
            "probe_id": ["c/direct/0", "c/locality/0"],
            "probe_type": ["direct", "locality"],
            "base_wild_text": ["Scranton", "Oakland"],
            "edit_wild_text": ["Dublin", "Oakland"],
            "edit_wild_stop": ["stop_string", "cap"],
            "edit_wild_tokens": [2.0, 50.0],
            "wild_em": [1.0, 1.0],
            "bke_f1": [1.0, 1.0],
        }
    )
    table = generation_table(scores, probes)
    assert table["expected"].tolist() == ["Dublin", "Oakland"]
    assert table["stop"].tolist() == ["stop_string", "cap"]
    assert table["n_tokens"].tolist() == [2, 50]
    assert table["prompt"].tolist()[0] == "Joe Biden was born in"
