"""MeLLo's loop (kebench.scoring.mello): its steps hand-parsed, its BM25 retrieval
against a separately written Okapi BM25, its runs on the real SmolLM2, and the scores
``score_pass`` gives under a memory against a plain forward pass."""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

from kebench.editing.delta import Delta
from kebench.editing.methods.mello import MelloSettings
from kebench.qa.verbaliser import Verbaliser
from kebench.scoring.context import PromptContext
from kebench.scoring.evaluate import ScoringSettings, edited_scores, score_pass
from kebench.scoring.mello import (
    DEMONSTRATIONS,
    FINAL,
    Retriever,
    Step,
    answer_questions,
    read_step,
    retrieval_lines,
)
from kebench.scoring.tamper import audit_edits, audit_probes
from tests.helpers import plain_logprob
from tests.models.tiny import sentencepiece_tokenizer

MEMORY = (
    "The capital of France is Lyon",
    "Barack Obama is a citizen of Kenya",
    "The official language of Kenya is French",
    "The Eiffel Tower is located in the city of Rome",
    "The mother tongue of Danielle Darrieux is English",
)


def okapi_scores(
    corpus: list[str], query: str, k1: float = 1.5, b: float = 0.75
) -> list[float]:
    """Okapi BM25 written out (Robertson and Zaragoza's form), for a query whose
    words are each in fewer than half the sentences, where every idf is positive."""
    docs = [re.findall(r"\w+", d.lower()) for d in corpus]
    average = sum(map(len, docs)) / len(docs)
    scores = []
    for doc in docs:
        total = 0.0
        for word in re.findall(r"\w+", query.lower()):
            having = sum(word in d for d in docs)
            if not having:
                continue
            idf = math.log((len(docs) - having + 0.5) / (having + 0.5))
            tf = doc.count(word)
            total += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / average))
        scores.append(total)
    return scores


@pytest.mark.parametrize(
    "query",
    [
        "Who is Barack Obama a citizen of?",
        "What is the capital of France?",
        "What is the official language of Kenya?",
        "Where is the Eiffel Tower?",
    ],
)
def test_bm25_retrieves_the_sentence_a_plain_okapi_ranks_first(query):
    expected = okapi_scores(list(MEMORY), query)
    best = max(range(len(MEMORY)), key=lambda i: (expected[i], -i))
    assert Retriever(MEMORY, MelloSettings()).nearest([query]) == [MEMORY[best]]


def test_a_tie_goes_to_the_earlier_sentence_and_an_empty_memory_is_refused():
    twins = ("Paris is in France", "France has Paris")
    assert Retriever(twins, MelloSettings()).nearest(["Paris France"]) == [twins[0]]
    with pytest.raises(ValueError, match="memory is empty"):
        Retriever((), MelloSettings())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retriever": "tfidf"}, "retriever 'tfidf'"),
        ({"retriever": "sentence_transformers"}, "needs retriever_model"),
        ({"max_hops": 0}, "max_hops and max_new_tokens >= 1"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MelloSettings(**kwargs)


def test_settings_round_trip_through_json():
    settings = MelloSettings(max_hops=2, max_new_tokens=9)
    assert MelloSettings.from_json(settings.to_json()) == settings


@pytest.mark.parametrize(
    ("generated", "expected"),
    [
        # a subquestion, stopped where the model would retrieve: retrieve for it
        (
            "Subquestion: Who leads Kenya?\nTentative answer: Ruto.\nRetrieved fact:",
            Step(
                "Subquestion: Who leads Kenya?\nTentative answer: Ruto.\n",
                subquestion="Who leads Kenya?",
            ),
        ),
        # the last of two subquestions is the one retrieved for
        (
            "Subquestion: A?\nx\nSubquestion: B?\ny\nRetrieved fact: z",
            Step("Subquestion: A?\nx\nSubquestion: B?\ny\n", subquestion="B?"),
        ),
        # a final answer on any line ends the run; what follows it is dropped
        (
            "so the answer is: Lyon\nFinal answer: Lyon\nQuestion: next",
            Step("so the answer is: Lyon\n", answer="Lyon"),
        ),
        ("Final answer: Lyon", Step("", answer="Lyon")),
        # stopped at a blank line with no final answer: the run cannot go on
        (
            "Subquestion: Who?\nTentative answer: Bo\n\nQuestion: more",
            Step("Subquestion: Who?\nTentative answer: Bo"),
        ),
        # a retrieval stop without a subquestion cannot be retrieved for
        ("Tentative answer: Paris\nRetrieved fact:", Step("Tentative answer: Paris\n")),
        # the blank line comes first: the later retrieval stop does not count
        ("Subquestion: Q?\n\nRetrieved fact:", Step("Subquestion: Q?")),
    ],
)
def test_a_generation_is_read_as_its_step(generated, expected):
    assert read_step(generated) == expected


def test_a_retrieved_fact_follows_the_steps_lines_with_one_full_stop():
    step = Step("Subquestion: Who?\nTentative answer: Bo\n", subquestion="Who?")
    assert retrieval_lines(step, "Kenya is in Africa.") == (
        "Subquestion: Who?\nTentative answer: Bo\nRetrieved fact: Kenya is in Africa.\n"
    )


QUESTIONS = [
    "What is the capital of France?",
    "What is the official language of the country of citizenship of Barack Obama?",
    # a run given its first hop already: the model goes on from a retrieved fact
    "In which country is the Eiffel Tower?\nSubquestion: In which city is the "
    "Eiffel Tower?\nTentative answer: The Eiffel Tower is in Paris.\nRetrieved "
    "fact: The Eiffel Tower is located in the city of Rome.",
]


@pytest.fixture(scope="module")
def runs(lm):
    return answer_questions(lm, QUESTIONS, MEMORY, MelloSettings(max_new_tokens=40))


@pytest.mark.model
def test_each_run_is_a_well_formed_transcript_of_its_question(runs):
    ends = {"final_answer", "no_subquestion", "max_hops"}
    for question, run in zip(QUESTIONS, runs, strict=True):
        assert run.transcript.startswith(f"Question: {question}\n")
        assert run.transcript.endswith(FINAL)
        assert run.end in ends
        assert 1 <= run.hops <= MelloSettings().max_hops
        assert (run.answer is not None) == (run.end == "final_answer")
        # every retrieved fact is a memory sentence, written once per retrieval
        assert set(run.retrieved) <= set(MEMORY)
        lines = run.transcript.count("\nRetrieved fact: ")
        assert lines == len(run.retrieved) + QUESTIONS[2].count("Retrieved fact:") * (
            question == QUESTIONS[2]
        )


@pytest.mark.model
def test_one_hop_runs_are_each_run_alone_and_in_a_batch_alike(lm, runs):
    """A batch does not change a run: each question alone gives the same run."""
    alone = [
        answer_questions(lm, [q], MEMORY, MelloSettings(max_new_tokens=40))[0]
        for q in QUESTIONS[:2]
    ]
    assert alone == runs[:2]


@pytest.mark.model
def test_under_a_memory_a_probe_is_scored_after_its_run_and_marked_by_its_answer(
    lm, runs
):
    probes = pd.DataFrame(
        {
            "probe_id": ["p1", "p2"],
            "probe_type": ["direct", "locality"],
            "prompt": ["The capital of France is", "Kenya's official language is"],
            "question": [QUESTIONS[0], None],
            "answer_old": ["Paris", "Swahili"],
            "answer_new": ["Lyon", "Swahili"],
            "aliases_new": [None, None],
        }
    )
    settings = MelloSettings(max_new_tokens=40)
    context = PromptContext(memory=MEMORY, mello=settings)
    scores = score_pass(lm, probes, context)
    # the question (the cloze where there is none) is what MeLLo answers
    asked = answer_questions(lm, [QUESTIONS[0], probes["prompt"][1]], MEMORY, settings)
    assert asked[0] == runs[0]
    for row, run, old, new in zip(
        scores.itertuples(),
        asked,
        probes["answer_old"],
        probes["answer_new"],
        strict=True,
    ):
        context_text = DEMONSTRATIONS + run.transcript
        assert row.lp_new == pytest.approx(
            plain_logprob(lm, context_text, new), abs=2e-3
        )
        assert row.lp_old == pytest.approx(
            plain_logprob(lm, context_text, old), abs=2e-3
        )
    # exact match against the new answer; a locality probe against the old one
    answers = [run.answer for run in asked]
    assert [
        a if isinstance(a, str) else None for a in scores["mello_answer"]
    ] == answers
    golds = ["lyon", "swahili"]
    expected = [
        0.0 if a is None else float(a.lower().strip(" .") == g)
        for a, g in zip(answers, golds, strict=True)
    ]
    assert scores["mello_em"].tolist() == expected
    # the generation protocols would ask the model without its memory: not run
    assert "gen_em" not in scores and "wild_text" not in scores


@pytest.mark.model
def test_a_group_of_memory_deltas_is_scored_under_their_pooled_memory(lm):
    """A sequential group's MeLLo deltas answer from every sentence of the group:
    ``edited_scores`` gives what ``score_pass`` gives under the pooled context."""
    settings = MelloSettings(max_hops=1, max_new_tokens=24)
    meta = {"mello": settings.to_json()}
    deltas = [Delta(memory=[m], meta=meta) for m in MEMORY[:2]]
    probes = pd.DataFrame(
        {
            "case_id": ["c1"],
            "probe_id": ["p1"],
            "probe_type": ["multihop"],
            "prompt": ["Question: " + QUESTIONS[1] + "\nAnswer:"],
            "question": [QUESTIONS[1]],
            "form": ["question"],
            "answer_old": ["English"],
            "answer_new": ["French"],
            "aliases_new": [None],
        }
    )
    grouped = edited_scores(lm, probes, [(["c1"], deltas)])
    pooled = PromptContext(memory=MEMORY[:2], mello=settings)
    expected = score_pass(lm, probes, pooled)
    pd.testing.assert_frame_equal(grouped, expected)


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer BERT with a real tokenizer, saved as a folder:
    a sentence-transformers model by path, as a user's local retriever would be."""
    folder = tmp_path_factory.mktemp("encoder")
    tokenizer = copy.deepcopy(sentencepiece_tokenizer())
    tokenizer.pad_token = "</s>"
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def mean_pooled(folder: Path, texts: Sequence[str]) -> torch.Tensor:
    """Unit-length mean-pooled embeddings from a plain forward of the encoder."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(list(texts), padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1)


def test_a_sentence_transformers_retriever_takes_the_most_similar_sentence(
    tiny_encoder,
):
    settings = MelloSettings(
        retriever="sentence_transformers", retriever_model=str(tiny_encoder)
    )
    queries = list(QUESTIONS[:2]) + ["Where is the Eiffel Tower?"]
    cosine = mean_pooled(tiny_encoder, queries) @ mean_pooled(tiny_encoder, MEMORY).T
    expected = [MEMORY[int(i)] for i in cosine.argmax(dim=1)]
    assert Retriever(MEMORY, settings).nearest(queries) == expected


@pytest.mark.model
def test_the_tamper_audit_asks_a_memory_edit_each_facts_question(lm):
    """The audit of a MeLLo edit scores each audited fact after MeLLo's run of its
    question (an atomic consequence, which has none: of its cloze), as a plain forward
    pass after the demonstrations and that run gives."""
    settings = MelloSettings(max_hops=1, max_new_tokens=24)
    delta = Delta(memory=[MEMORY[0]], meta={"mello": settings.to_json()})
    probes = pd.DataFrame(
        {
            "probe_id": ["c0/d", "c1/d"],
            "case_id": ["c0", "c1"],
            "probe_type": ["direct", "direct"],
            "prompt": ["The capital of France is", "Barack Obama is a citizen of"],
            "question": [QUESTIONS[0], "Of which country is Obama a citizen?"],
            "form": ["cloze", "cloze"],
            "answer_old": ["Paris", "the United States"],
            "answer_new": ["Lyon", "Kenya"],
        }
    )
    facts = pd.DataFrame(
        {
            "fact_id": ["c0/f0"],
            "case_id": ["c0"],
            "status": ["entailed"],
            "tier": ["inductive"],
            "subject_label": ["Lyon"],
            "relation": ["country"],
            "answer_old": ["Italy"],
            "answer_new": ["France"],
        }
    )
    verbaliser = Verbaliser(templates={"country": {"noun": "country"}})
    audited = audit_probes(probes, facts, ["c0", "c1"], verbaliser)
    base = pd.DataFrame(
        {
            "lp_old": [-1.0, -2.0],
            "lp_new": [-5.0, -6.0],
            "n_tokens_old": [1, 3],
            "n_tokens_new": [1, 1],
        },
        index=["c0/d", "c1/d"],
    )
    audit = audit_edits(
        lm,
        audited,
        base,
        [("MeLLo", "c0", delta)],
        ["c0", "c1"],
        negatives=1,
        seed=0,
        settings=ScoringSettings(),
    )
    asked = {
        "c0/d": (QUESTIONS[0], probes.iloc[0]),
        "c1/d": (probes["question"][1], probes.iloc[1]),
        "c0/f0/atomic": ("The country of Lyon is", facts.iloc[0]),
    }
    runs = answer_questions(
        lm, [question for question, _ in asked.values()], [MEMORY[0]], settings
    )
    lp = {
        (probe_id, side): plain_logprob(
            lm, DEMONSTRATIONS + run.transcript, row[f"answer_{side}"]
        )
        for (probe_id, (_, row)), run in zip(asked.items(), runs, strict=True)
        for side in ("old", "new")
    }
    by_fact = audit.set_index("fact_case_id")
    assert by_fact["edited"].to_dict() == {"c0": True, "c1": False}
    for case in ("c0", "c1"):
        margin = lp[(f"{case}/d", "new")] - lp[(f"{case}/d", "old")]
        assert by_fact.loc[case, "margin"] == pytest.approx(margin, abs=2e-3)
    asserted, other = (
        ("new", "old") if by_fact.loc["c0", "margin"] > 0 else ("old", "new")
    )
    violation = lp[("c0/f0/atomic", other)] - lp[("c0/f0/atomic", asserted)]
    assert by_fact.loc["c0", "rule_violation"] == pytest.approx(violation, abs=2e-3)
    # the evaluation's scores of the edit's own probes are read, not scored again
    evaluated = pd.DataFrame(
        {
            "method": ["MeLLo", "MeLLo"],
            "case_id": ["c0", "c1"],  # c1's row is another edit's: never read here
            "probe_id": ["c0/d", "c1/d"],
            "lp_edit_old": [-4.0, -9.0],
            "lp_edit_new": [-1.0, -9.0],
        }
    )
    again = audit_edits(
        lm,
        audited,
        base,
        [("MeLLo", "c0", delta)],
        ["c0", "c1"],
        negatives=1,
        seed=0,
        settings=ScoringSettings(),
        evaluated=evaluated,
    ).set_index("fact_case_id")
    assert again.loc["c0", "margin"] == 3.0 and again.loc["c0", "confidence"] == -1.0
    # scored as before, in a batch without c0's probes
    assert again.loc["c1", "margin"] == pytest.approx(by_fact.loc["c1", "margin"])
    assert again.loc["c0", "rule_violation"] == pytest.approx(
        lp[("c0/f0/atomic", "old")] - lp[("c0/f0/atomic", "new")], abs=2e-3
    )
