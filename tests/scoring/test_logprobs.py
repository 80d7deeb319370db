"""Batched, padded answer log-probs against a plain one-example-at-a-time computation."""

from __future__ import annotations

import pytest
import torch

from kebench.models.logprobs import (
    Batching,
    ContextOverflowError,
    answer_text,
    encode_pair,
    forward_packed,
    length_batches,
    packed_rows,
    packing_fits,
    pad_batch,
    padding_id,
    score_answers,
)
from tests.editing.cases import demo_requests
from tests.models.tiny import sentencepiece_tokenizer

PROMPTS = [
    "The capital of France is",
    "Barack Obama is a citizen of",
    "New Fact: The capital of Japan is Kyoto\nPrompt: The capital of Japan is",
    "The official language of Brazil is ",
    "Q: Who wrote Hamlet? A:",
]
ANSWERS = [
    "Paris",
    "United States of America",
    "Kyoto",
    "Portuguese",
    " William Shakespeare",
]
# a probe's old and new answers share their prompt's forward pass
SHARED = [
    ("The capital of France is", "Lyon"),
    ("Barack Obama is a citizen of", "the Republic of Kenya"),
]


def test_answer_text_adds_one_leading_space():
    assert answer_text("The capital is", "Paris") == " Paris"
    assert answer_text("The capital is ", "Paris") == "Paris"
    assert answer_text("The capital is", " Paris") == " Paris"
    assert answer_text("Prompt:\n", "Paris") == "Paris"


def test_pad_batch_positions_ignore_padding():
    ids, mask, positions, offsets = pad_batch([[5, 6, 7], [8]], pad_id=0, side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions.tolist() == [[0, 1, 2], [0, 0, 0]]
    assert offsets == [0, 2]
    ids, mask, positions, offsets = pad_batch([[5, 6, 7], [8]], pad_id=0, side="right")
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert positions.tolist() == [[0, 1, 2], [0, 0, 0]]
    assert offsets == [0, 0]
    with pytest.raises(ValueError, match="left or right"):
        pad_batch([[1]], pad_id=0, side="middle")


def test_length_batches_by_rows_and_by_a_token_budget():
    lengths = [5, 1, 3, 3, 2, 6]
    # rows only: shortest first, three a batch
    assert length_batches(lengths, 3) == [[1, 4, 2], [3, 0, 5]]
    # with a budget of 9 padded positions, longest first (worked by hand): 6 and 5
    # each exceed it with a second row; 3, 3, 2 pad to 3 x 3 = 9; then the row cap
    # of 3 starts a new batch for 1
    assert length_batches(lengths, 3, 9) == [[5], [0], [2, 3, 4], [1]]
    # a row longer than the budget goes alone
    assert length_batches([20, 2, 2], 8, 9) == [[0], [1, 2]]
    # a budget of 20 positions held in the KV cache, each row after 5 cached ones: the
    # two 3s hold 2 x (5 + 3) = 16, a third row would hold 3 x 8 = 24; then 2 and 1
    # hold 2 x (5 + 2) = 14. Without the cached context all four fit (4 x 3 = 12).
    assert length_batches([3, 3, 2, 1], 8, context=5, max_held=20) == [[0, 1], [2, 3]]
    assert length_batches([3, 3, 2, 1], 8, max_held=20) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="token budget"):
        length_batches(lengths, 3, 0)
    with pytest.raises(ValueError, match="held-token budget"):
        length_batches(lengths, 3, max_held=0)


def test_packed_rows_fit_the_longest_first():
    # worked by hand, rows of 6: 5 opens row A (1 free), 4 row B (2 free), 3 row C;
    # 2 fits B's 2, and 1 fits A's 1
    assert packed_rows([3, 5, 2, 4, 1], 6) == [[1, 4], [3, 2], [0]]
    assert packed_rows([2, 2, 2], 6) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="sequence 1 of 7 tokens exceeds rows of 6"):
        packed_rows([3, 7], 6)


@pytest.mark.model
def test_packed_sequences_score_as_alone_in_full_passes(lm):
    """Each sequence's logits at the asked positions equal a plain forward of it
    alone; the passes hold whole rows, as many as the token budget allows."""
    texts = [request.text for request in demo_requests()]
    whole = [list(lm.tokenizer(t)["input_ids"]) for t in texts[:4]]
    # and shorter ones, which share rows with the whole
    sequences = [*whole, whole[0][:2], whole[1][:3], whole[2][:4]]
    positions = [
        range(len(s)) if i % 2 else [len(s) - 1] for i, s in enumerate(sequences)
    ]
    width = max(map(len, sequences))
    passes = []
    handle = lm.model.register_forward_pre_hook(
        lambda _m, _a, kwargs: passes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True,
    )
    try:
        got = dict(
            forward_packed(
                lm.model,
                sequences,
                positions,
                padding_id(lm.tokenizer),
                Batching(8, 2 * width),
            )
        )
    finally:
        handle.remove()
    # the rows worked out from the lengths alone (first fit, longest first)
    rows = packed_rows([len(s) for s in sequences], width)
    assert len(rows) < len(sequences)
    assert passes == [(len(rows[i : i + 2]), width) for i in range(0, len(rows), 2)]
    for i, sequence in enumerate(sequences):
        with torch.no_grad():
            alone = lm.model(input_ids=torch.tensor([sequence])).logits[0]
        assert torch.allclose(got[i], alone[list(positions[i])], atol=1e-4)


@pytest.mark.model
def test_packing_does_not_fit_a_model_whose_modules_are_hooked(lm):
    """An edit's hook inside the model (GRACE, WISE) reads each row's last token."""
    assert packing_fits(lm.model)
    handle = lm.model.model.layers[2].mlp.register_forward_hook(lambda *_: None)
    try:
        assert not packing_fits(lm.model)
    finally:
        handle.remove()
    # a hook on the model itself sees only its inputs (a ledger's, a benchmark's)
    handle = lm.model.register_forward_pre_hook(lambda *_: None)
    try:
        assert packing_fits(lm.model)
    finally:
        handle.remove()


def plain_logprob(lm, prompt: str, answer: str) -> tuple[float, list[int]]:
    """One unpadded sequence; the answer's tokens scored one by one from full logits."""
    prompt_ids, answer_ids = encode_pair(lm.tokenizer, prompt, answer)
    ids = torch.tensor([prompt_ids + answer_ids])
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0].double()
    total = 0.0
    argmax = []
    for j, token in enumerate(answer_ids):
        row = logits[len(prompt_ids) - 1 + j]
        total += float(row.log_softmax(-1)[token])
        argmax.append(int(row.argmax()))
    return total, argmax


@pytest.mark.model
@pytest.mark.parametrize("side", ["left", "right"])
def test_batched_scores_match_plain_computation(lm, side):
    prompts = PROMPTS + [p for p, _ in SHARED]
    answers = ANSWERS + [a for _, a in SHARED]
    expected = [plain_logprob(lm, p, a) for p, a in zip(prompts, answers, strict=True)]
    scores = score_answers(
        lm.model, lm.tokenizer, prompts, answers, batch_size=4, padding_side=side
    )
    for score, (logprob, argmax) in zip(scores, expected, strict=True):
        assert score.logprob == pytest.approx(logprob, abs=1e-4)
        assert sum(score.token_logprobs) == pytest.approx(logprob, abs=1e-4)
        assert list(score.argmax_ids) == argmax
    assert [s.n_tokens for s in scores][1] > 1  # a multi-token answer


@pytest.mark.model
def test_a_pair_asked_twice_runs_once(lm):
    """A locality probe asks its one answer as old and new: the answer's rows run once
    (counted at the model's input), and every copy scores as the plain computation."""
    prompts = [PROMPTS[1], PROMPTS[1], PROMPTS[0], PROMPTS[1]]
    answers = [ANSWERS[1], ANSWERS[1], ANSWERS[0], SHARED[1][1]]
    answer_rows = []

    def count(_module, _args, kwargs):
        if kwargs.get("cache") is not None:
            answer_rows.append(len(kwargs["input_ids"]))

    hook = lm.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        scores = score_answers(lm.model, lm.tokenizer, prompts, answers, batch_size=4)
    finally:
        hook.remove()
    for score, pair in zip(scores, zip(prompts, answers, strict=True), strict=True):
        assert score.logprob == pytest.approx(plain_logprob(lm, *pair)[0], abs=1e-4)
    # one answer pass, a row per distinct pair (four without the repeat left out)
    assert answer_rows == [3]


@pytest.mark.model
def test_scoring_an_answers_first_tokens_needs_no_answer_pass(lm):
    """An answer cut to its first token scores as that token alone, and only prompt
    passes run: the tokens forwarded are the distinct prompts' (counted by hand)."""
    prompts, answers = PROMPTS[:2] + [PROMPTS[0]], ANSWERS[:2] + ["Lyon"]
    forwarded = []

    def count(_module, _args, kwargs):
        forwarded.append(
            int(kwargs["attention_mask"][:, -kwargs["input_ids"].shape[1] :].sum())
        )

    hook = lm.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        cut = score_answers(
            lm.model,
            lm.tokenizer,
            prompts,
            answers,
            scored_tokens=[1, 1, 1],
            batching=Batching(8, 64),
        )
    finally:
        hook.remove()
    distinct = {
        tuple(encode_pair(lm.tokenizer, p, a)[0])
        for p, a in zip(prompts, answers, strict=True)
    }
    assert sum(forwarded) == sum(len(ids) for ids in distinct)
    for score, pair in zip(cut, zip(prompts, answers, strict=True), strict=True):
        prompt_ids, answer_ids = encode_pair(lm.tokenizer, *pair)
        with torch.no_grad():
            row = lm.model(input_ids=torch.tensor([prompt_ids])).logits[0, -1]
        assert score.answer_ids == (answer_ids[0],)
        expected = float(row.double().log_softmax(-1)[answer_ids[0]])
        assert score.logprob == pytest.approx(expected, abs=1e-4)
        assert score.argmax_ids == (int(row.argmax()),)
    # a cut of None scores the whole answer
    (whole,) = score_answers(
        lm.model, lm.tokenizer, prompts[1:2], answers[1:2], scored_tokens=[None]
    )
    assert whole.logprob == pytest.approx(
        plain_logprob(lm, prompts[1], answers[1])[0], abs=1e-4
    )


# an in-context edit's prefix (IKE's ends in a space, which merges with the prompt)
PREFIXES = [
    "New Fact: The capital of Japan is Kyoto\nPrompt: The capital of Japan is Kyoto"
    "\n\nNew Fact: The capital of France is Lyon\nPrompt: ",
    "Imagine that the capital of France is Lyon.\n",
]


@pytest.mark.model
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_prefix_runs_once_and_scores_as_the_joint_text(lm, side, prefix):
    prompts = PROMPTS + [p for p, _ in SHARED]
    answers = ANSWERS + [a for _, a in SHARED]
    expected = [
        plain_logprob(lm, prefix + p, a) for p, a in zip(prompts, answers, strict=True)
    ]
    prefix_ids = lm.tokenizer(prefix)["input_ids"][:-1]
    rows_with_prefix = []

    def count(_module, _args, kwargs):
        for row in kwargs["input_ids"].tolist():
            rows_with_prefix.append(row[: len(prefix_ids)] == prefix_ids)

    hook = lm.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        scores = score_answers(
            lm.model,
            lm.tokenizer,
            prompts,
            answers,
            batch_size=3,
            padding_side=side,
            prefix=prefix,
        )
    finally:
        hook.remove()
    for score, (logprob, argmax) in zip(scores, expected, strict=True):
        assert score.logprob == pytest.approx(logprob, abs=1e-4)
        assert list(score.argmax_ids) == argmax
    assert sum(rows_with_prefix) == 1  # one pass of the prefix, for every prompt


@pytest.mark.model
def test_a_prefix_is_kept_across_calls_while_the_model_stays_the_same(lm):
    prefix = PREFIXES[0]
    prefix_ids = lm.tokenizer(prefix)["input_ids"][:-1]
    passes = []

    def count(_module, _args, kwargs):
        passes.extend(
            row[: len(prefix_ids)] == prefix_ids for row in kwargs["input_ids"].tolist()
        )

    def prefix_passes() -> int:
        passes.clear()
        score_answers(lm.model, lm.tokenizer, PROMPTS, ANSWERS, prefix=prefix)
        return sum(passes)

    weight = lm.model.model.layers[0].mlp.up_proj.weight
    hook = lm.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        assert prefix_passes() == 1
        assert prefix_passes() == 0  # kept
        with torch.no_grad():
            original = weight.clone()
            weight.add_(1e-3)
            try:
                assert prefix_passes() == 1  # another model state
            finally:
                weight.copy_(original)
        assert prefix_passes() == 1  # restored, but not known to be the same
    finally:
        hook.remove()


@pytest.mark.model
def test_leading_space_and_token_counts(lm):
    prompt_ids, answer_ids = encode_pair(
        lm.tokenizer, "The capital of France is", "Paris"
    )
    assert lm.tokenizer.decode(answer_ids) == " Paris"
    assert lm.tokenizer.decode(prompt_ids) == "The capital of France is"
    (with_space,) = score_answers(
        lm.model, lm.tokenizer, ["The capital of France is"], ["Paris"]
    )
    (no_space,) = score_answers(
        lm.model, lm.tokenizer, ["The capital of France is "], ["Paris"]
    )
    # The joint texts are the same, so are the answer's tokens: a prompt's trailing
    # space belongs to the answer's first token (" Paris").
    assert with_space.answer_ids == no_space.answer_ids
    assert with_space.logprob == pytest.approx(no_space.logprob, abs=1e-4)
    # The model knows the capital: the answer is its most likely next token.
    assert with_space.argmax_ids[0] == with_space.answer_ids[0]


@pytest.mark.model
def test_mismatched_lengths_are_refused(lm):
    with pytest.raises(ValueError, match="2 prompts but 1 answers"):
        score_answers(lm.model, lm.tokenizer, ["a", "b"], ["c"])


@pytest.mark.model
def test_an_answer_past_the_context_is_refused(lm):
    limit = lm.model.config.max_position_embeddings
    with pytest.raises(
        ContextOverflowError, match=f"pair 1: .* past the model's context of {limit}"
    ) as error:
        score_answers(
            lm.model,
            lm.tokenizer,
            ["The capital of France is", "Paris is"],
            ["Paris", " the capital" * limit],
        )
    assert error.value.index == 1


def test_sentencepiece_answers_are_the_joint_texts_tokens():
    """Llama-2-style SentencePiece: an answer tokenised alone after a space gets a
    spurious "▁" token; its tokens in the joint text do not."""
    tokenizer = sentencepiece_tokenizer()
    request = demo_requests()[0]
    prompt, answer = request.text, request.target_new
    alone = tokenizer.convert_ids_to_tokens(
        tokenizer(" " + answer, add_special_tokens=False)["input_ids"]
    )
    assert alone[0] == "▁"  # the pitfall is real for this tokenizer
    joint = tokenizer(f"{prompt} {answer}")["input_ids"]
    for text in (prompt, prompt + " "):
        prompt_ids, answer_ids = encode_pair(tokenizer, text, answer)
        assert prompt_ids[0] == tokenizer.bos_token_id
        assert prompt_ids + answer_ids == joint
        assert tokenizer.convert_ids_to_tokens(answer_ids) == alone[1:]
