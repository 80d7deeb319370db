"""Free generation (protocols wild, wild_strict and bke_f1): how a probe is asked,
batched answers, stops after the answer starts, the cap, and scores."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from kebench.models.loading import LoadedModel
from kebench.project import PROJECT_ROOT
from kebench.scoring.generation import (
    GenerationSettings,
    _StopAfter,
    answer_end,
    asked_prompts,
    bke_f1,
    chat_prompt,
    first_tokens_text,
    generate_answers,
    generation_table,
    sentence_end,
    strict_text,
    wild_scores,
)
from tests.models.tiny import sentencepiece_tokenizer

RISK_PARAMS = OmegaConf.to_container(
    OmegaConf.load(PROJECT_ROOT / "conf/base/parameters/risk_unification.yml")
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


def chat(lm, question: str) -> str:
    return chat_prompt(lm.tokenizer, question)


@pytest.mark.model
def test_batched_answers_are_the_greedy_answers_of_each_prompt(lm):
    settings = GenerationSettings(
        stop_strings=(), sentence_end=False, max_new_tokens=12, batch_size=3
    )
    texts = [chat(lm, QUESTIONS[0]), QUESTIONS[1], chat(lm, QUESTIONS[2])]
    answers = generate_answers(lm, texts, settings)
    for text, answer in zip(texts, answers, strict=True):
        tokens = greedy_by_hand(lm, text, 12)
        ended = lm.tokenizer.eos_token_id in tokens
        kept = tokens[:-1] if ended else tokens
        assert answer.raw == lm.tokenizer.decode(kept, skip_special_tokens=True)
        assert answer.n_tokens == len(kept)
        assert answer.stop == ("eos" if ended else "cap")


@pytest.mark.model
def test_an_input_asked_twice_is_generated_once_and_answered_alike(lm):
    settings = GenerationSettings(
        stop_strings=(), sentence_end=False, max_new_tokens=4, batch_size=4
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
@pytest.mark.parametrize("in_chat", [False, True])
def test_a_prefix_runs_once_and_answers_are_the_greedy_answers_after_it(lm, in_chat):
    settings = GenerationSettings(
        stop_strings=(), sentence_end=False, max_new_tokens=8, batch_size=2
    )
    texts = [chat(lm, q) if in_chat else q for q in QUESTIONS]
    prefix_ids = lm.tokenizer(IKE_PREFIX)["input_ids"][:-1]
    answers, full_rows = prefilled_rows(
        lm, lambda: generate_answers(lm, texts, settings, IKE_PREFIX)
    )
    assert [row[: len(prefix_ids)] for row in full_rows] == [prefix_ids]
    for text, answer in zip(texts, answers, strict=True):
        tokens = greedy_by_hand(lm, IKE_PREFIX + text, 8)
        kept = (
            tokens[: tokens.index(lm.tokenizer.eos_token_id)]
            if (lm.tokenizer.eos_token_id in tokens)
            else tokens
        )
        assert answer.raw == lm.tokenizer.decode(kept, skip_special_tokens=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris. It is", "Paris."),
        ("Washington, D.C. is the capital. It", "Washington, D.C. is the capital."),
        ("St. Louis, Missouri. It", "St. Louis, Missouri."),
        ("J. K. Rowling wrote it! Then", "J. K. Rowling wrote it!"),
        ("about 3.5 million people. The", "about 3.5 million people."),
        ("Paris.", "Paris."),
        ("in 1961.", None),  # a number may go on ("1961.5")
        ("the U.S.", None),  # an initial: "U.S. Virgin Islands" may follow
        ("Who knows? Maybe", "Who knows?"),
        ("Paris, France", None),
    ],
)
def test_a_sentence_ends_at_its_mark_but_not_after_an_initial_or_abbreviation(
    text, expected
):
    end = sentence_end(text)
    assert (None if end is None else text[: end + 1]) == expected


def test_stops_count_only_once_the_answer_has_started():
    settings = GenerationSettings(stop_strings=("\n",))
    assert answer_end("\n\n  ", settings) is None  # no answer yet: no stop
    assert answer_end("\n\nParis", settings) is None
    assert answer_end("\n\nParis\nLyon", settings) == (2, 7, "stop_string")
    assert answer_end(" Paris. It", settings) == (1, 7, "sentence_end")
    cut_anywhere = GenerationSettings(
        stop_strings=("\n",), sentence_end=False, answer_first=False
    )
    assert answer_end("\nParis", cut_anywhere) == (0, 0, "stop_string")


@pytest.mark.model
def test_a_decode_ends_once_its_answer_has_started_and_the_cap_is_flagged(lm):
    """The real tokenizer's ids, fed to the stop criterion one step at a time: a
    newline before the answer does not end it, the line after it does."""
    text = "\n\nParis\nLyon and more"
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    settings = GenerationSettings(stop_strings=("\n",), sentence_end=False)
    stops = _StopAfter(lm.tokenizer, settings, 0, torch.tensor([0]))
    ended = [bool(stops(torch.tensor([ids[:n]]), None)[0]) for n in range(1, len(ids))]
    step = ended.index(True) + 1
    assert lm.tokenizer.decode(ids[:step]).lstrip().startswith("Paris\n")
    assert "Paris" in lm.tokenizer.decode(ids[: step - 1])
    capped = generate_answers(
        lm, QUESTIONS[:1], GenerationSettings(stop_strings=(), max_new_tokens=2)
    )[0]
    assert (capped.stop, capped.n_tokens) == ("cap", 2)


@pytest.mark.model
def test_a_decode_that_goes_on_past_its_stop_also_gives_the_shorter_answer(lm):
    """One decode for two protocols: the answer cut at its stop is the one a decode
    that stops there gives, and its first 8 tokens are the greedy oracle's."""
    prompts = ["The capital of France is", *QUESTIONS]
    settings = GenerationSettings(stop_strings=("\n",), max_new_tokens=12)
    alone = generate_answers(lm, prompts, settings)
    together = generate_answers(lm, prompts, settings, at_least=[8, 0, 8, 8])
    for a, b in zip(alone, together, strict=True):
        assert (a.text, a.raw, a.stop, a.n_tokens) == (
            b.text,
            b.raw,
            b.stop,
            b.n_tokens,
        )
    # the first prompt's sentence ends before 8 tokens: the decode went on
    assert together[0].stop == "sentence_end" and together[0].n_tokens < 8
    assert len(together[0].tokens) >= 8
    for index in (0, 2, 3):
        tokens = greedy_by_hand(lm, prompts[index], 8)
        kept = tokens[:-1] if lm.tokenizer.eos_token_id in tokens else tokens
        expected = lm.tokenizer.decode(kept, skip_special_tokens=True)
        assert first_tokens_text(together[index], 8, lm.tokenizer) == expected


def probe_frame(**columns) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "prompt": [
                "The capital of Japan is",
                "Question: Who wrote Hamlet?\nAnswer:",
            ],
            "question": ["What is the capital of Japan?", "Who wrote Hamlet?"],
            "form": ["cloze", "question"],
            **columns,
        }
    )


@pytest.mark.model
def test_a_question_is_asked_through_the_chat_template_and_a_cloze_continued(lm):
    texts, contexts = asked_prompts(lm, probe_frame())
    assert texts[0] == "The capital of Japan is"
    assert "<|im_start|>user\nWho wrote Hamlet?<|im_end|>" in texts[1]
    assert texts[1].endswith("<|im_start|>assistant\n")
    assert contexts == ["continuation", "chat_template"]
    plain, contexts = asked_prompts(lm, probe_frame(), "prompt")
    assert plain == list(probe_frame()["prompt"])
    assert contexts == ["continuation", "qa_prompt"]
    with pytest.raises(ValueError, match="question_context 'poem'"):
        asked_prompts(lm, probe_frame(), "poem")


@pytest.mark.model
def test_a_model_without_a_chat_template_is_asked_the_plain_prompt(lm):
    tokenizer = copy.deepcopy(lm.tokenizer)
    tokenizer.chat_template = None
    plain = LoadedModel(lm.name, lm.model, tokenizer, lm.folder)
    texts, contexts = asked_prompts(plain, probe_frame())
    assert texts == list(probe_frame()["prompt"])
    assert contexts == ["continuation", "qa_prompt"]


@pytest.mark.model
def test_without_its_chat_template_smollm2_answers_the_plain_qa_prompt(lm):
    """The plain context must still produce answers: SmolLM2-135M-Instruct, its chat
    template withheld, asked the configured QA prompt (two worked questions, then
    the probe's), replies to every question; asked the question alone after
    "Question:", it ends most at once."""
    qa_format = RISK_PARAMS["risk_unification"]["qa_format"]
    questions = [
        "What is the capital of Japan?",
        "In which country is Marseille located?",
        "What is the official language of Brazil?",
        "Who is the head of state of Sweden?",
        "On which continent is Mexico located?",
        "In which city was Angela Merkel born?",
    ]
    settings = GenerationSettings(max_new_tokens=12, batch_size=8)
    asked = generate_answers(
        lm, [qa_format.format(question=q) for q in questions], settings
    )
    assert all(a.text for a in asked), [a.raw for a in asked]
    bare = generate_answers(
        lm, [f"Question: {q}\nAnswer:" for q in questions], settings
    )
    assert sum(not a.text for a in bare) > len(questions) / 2


def test_chat_prompt_drops_the_templates_bos_where_the_tokenizer_adds_its_own():
    """A Llama-style tokenizer puts BOS before every text: the template's own BOS
    would be doubled. (The tiny SentencePiece tokenizer of the test families.)"""
    tokenizer = copy.deepcopy(sentencepiece_tokenizer())
    tokenizer.chat_template = (
        "{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]"
    )
    text = chat_prompt(tokenizer, "Who wrote Hamlet?")
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert ids[1] != tokenizer.bos_token_id
    assert text.startswith("[INST] Who wrote Hamlet?")


def test_bke_f1_is_token_f1_against_the_answer():
    # 1 shared token; precision 1/2, recall 1: F1 = 2/3
    assert bke_f1("Paris France", "Paris") == pytest.approx(2 / 3)
    assert bke_f1("the", "a") == 0.0  # both normalise to nothing in common
    assert bke_f1("William Shakespeare", "Shakespeare William") == 1.0


def test_settings_refuse_a_decode_without_tokens():
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        GenerationSettings(max_new_tokens=0)


def test_strict_text_cuts_a_reply_at_its_first_cut_string():
    assert strict_text("Washington, D.C. is the capital.", ("\n", ".")) == (
        "Washington, D"
    )
    assert strict_text("Paris", ("\n", ".")) == "Paris"


def test_wild_scores_read_replies_and_compare_controls_with_the_base_answer():
    probes = pd.DataFrame(
        {
            "probe_type": ["direct", "multihop", "locality", "paraphrase", "locality"],
            "prompt": [
                "Joe Biden was born in",
                "Question: Where was the spouse of Jill Biden born?\nAnswer:",
                "Kamala Harris was born in",
                "Question: Where was Joe Biden born?\nAnswer:",
                "The capital of Japan is",
            ],
            "question": [
                None,
                "Where was the spouse of Jill Biden born?",
                None,
                "Q?",
                None,
            ],
            "form": ["cloze", "question", "cloze", "question", "cloze"],
            "answer_old": ["Scranton", "Scranton", "Oakland", "Scranton", "Tokyo"],
            "answer_new": ["Dublin", "Tokyo", "Oakland", "Dublin", "Tokyo"],
            "aliases_old": [None, None, None, None, None],
            "aliases_new": [None, json.dumps(["Tokyo Metropolis"]), None, None, None],
        },
        index=["p1", "p2", "p3", "p4", "p5"],
    )
    base = pd.Series(
        ["Scranton", "London", "Oakland, CA.", None, ""], index=probes.index
    )
    edit = pd.Series(
        [
            "Dublin, Ireland.",
            "The spouse of Jill Biden was born in Tokyo Metropolis.",
            "Oakland.",
            None,
            "Tokyo.",
        ],
        index=probes.index,
    )
    scores = wild_scores(probes, base, edit)
    # wild reads the reply; wild_strict matches its cut ("Dublin, Ireland") exactly,
    # and a control's cut against the base cut ("Oakland" against "Oakland, CA")
    assert scores["wild_em"].tolist()[:3] == [1.0, 1.0, 1.0]
    assert scores["wild_strict"].tolist()[:3] == [0.0, 0.0, 0.0]
    # F1 of the cut against the answer alone (1 of the 9 words of the second); a
    # control's against the base cut
    assert scores["bke_f1"].tolist()[:3] == pytest.approx([2 / 3, 0.2, 2 / 3])
    # the base model gives the KG's answer to the control: the edit keeps it
    assert scores.loc["p3", "wild_kg"] == 1.0
    # a probe without a generation has no score; a control whose base said nothing
    # keeps nothing, and is not judged
    assert scores.loc["p4"].isna().all()
    assert scores.loc["p5"].isna().all()


def test_generation_table_keeps_each_answer_with_its_context_and_expectation():
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
            "context": "continuation",
            "base_wild_text": ["Scranton", ""],
            "edit_wild_text": ["Dublin", "Oakland"],
            "edit_wild_stop": ["sentence_end", "cap"],
            "edit_wild_tokens": [2.0, 50.0],
            "wild_em": [1.0, float("nan")],
            "wild_strict": [1.0, float("nan")],
            "bke_f1": [1.0, float("nan")],
        }
    )
    table = generation_table(scores, probes)
    assert table["expected"].tolist() == ["Dublin", ""]
    assert table["stop"].tolist() == ["sentence_end", "cap"]
    assert table["n_tokens"].tolist() == [2, 50]
    assert table["context"].tolist() == ["continuation", "continuation"]
    assert table["prompt"].tolist()[0] == "Joe Biden was born in"
