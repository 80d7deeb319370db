"""The forward ledger against hand-counted tokens: what it counts, and what a repeat is."""

from __future__ import annotations

import pytest
import torch

from kebench.models.logprobs import forward_padded, padding_id, score_answers
from kebench.scoring.forward_ledger import ForwardLedger
from kebench.scoring.generation import GenerationSettings, generate_answers

PROMPTS = ["The capital of France is", "The capital of Peru is"]


def _ids(lm, text: str) -> list[int]:
    return list(lm.tokenizer(text)["input_ids"])


def _answer_tokens(lm, answer: str) -> int:
    return len(lm.tokenizer(answer, add_special_tokens=False)["input_ids"])


@pytest.mark.model
def test_a_batch_forwarded_twice_is_half_repeats(lm):
    sequences = [_ids(lm, p) for p in PROMPTS]
    ledger = ForwardLedger()
    with ledger.watching(lm.model), torch.no_grad():
        forward_padded(lm.model, sequences, padding_id(lm.tokenizer))
        first = ledger.tokens
        forward_padded(lm.model, sequences, padding_id(lm.tokenizer))
    # padding is not counted: the two prompts' own tokens, twice
    assert first == sum(len(s) for s in sequences)
    assert ledger.tokens == 2 * first and ledger.repeated_tokens == first
    assert ledger.repeated_share == 0.5 and ledger.unknown_context_tokens == 0


@pytest.mark.model
def test_a_cached_continuation_is_known_by_its_whole_sequence(lm):
    """Two prompts continued by the same answer through a reordered KV cache are two
    sequences; scored again, every token is a repeat."""
    answers = [" Lima and Cusco", " Lima and Cusco"]
    ledger = ForwardLedger()
    with ledger.watching(lm.model):
        score_answers(lm.model, lm.tokenizer, PROMPTS, answers)
        once = ledger.tokens
        assert ledger.repeated_tokens == 0
        score_answers(lm.model, lm.tokenizer, PROMPTS, answers)
    # each prompt once, then each answer but its last token through the cache
    assert once == sum(len(_ids(lm, p)) for p in PROMPTS) + 2 * (
        _answer_tokens(lm, answers[0]) - 1
    )
    assert ledger.repeated_tokens == once and ledger.unknown_context_tokens == 0


@pytest.mark.model
def test_an_in_context_prefix_is_part_of_each_rows_sequence(lm):
    prefix = "New Fact: The capital of Peru is Cusco\nPrompt: "
    answers = [" Cusco", " Cusco"]
    ledger = ForwardLedger()
    with ledger.watching(lm.model):
        score_answers(lm.model, lm.tokenizer, PROMPTS, answers, prefix=prefix)
        once = ledger.tokens
        score_answers(lm.model, lm.tokenizer, PROMPTS, answers)
    # without the prefix, the prompts are other sequences: nothing repeats
    assert ledger.repeated_tokens == 0 and ledger.unknown_context_tokens == 0
    assert ledger.tokens - once == sum(len(_ids(lm, p)) for p in PROMPTS) + 2 * (
        _answer_tokens(lm, answers[0]) - 1
    )


@pytest.mark.model
def test_greedy_decoding_twice_repeats_every_step(lm):
    settings = GenerationSettings(max_new_tokens=6, stop_strings=())
    ledger = ForwardLedger()
    with ledger.watching(lm.model):
        first = generate_answers(lm, PROMPTS, settings)
        once = ledger.tokens
        second = generate_answers(lm, PROMPTS, settings)
    assert [g.text for g in first] == [g.text for g in second]
    assert ledger.tokens == 2 * once and ledger.repeated_tokens == once
    assert ledger.unknown_context_tokens == 0


@pytest.mark.model
def test_a_weight_change_makes_another_state_and_its_undoing_the_same(lm):
    sequences = [_ids(lm, PROMPTS[0])]
    weight = lm.model.model.layers[3].mlp.down_proj.weight
    original = weight.detach().clone()
    ledger = ForwardLedger()
    with ledger.watching(lm.model), torch.no_grad():
        forward_padded(lm.model, sequences, padding_id(lm.tokenizer))
        weight.add_(1e-3)
        try:
            forward_padded(lm.model, sequences, padding_id(lm.tokenizer))
            assert ledger.repeated_tokens == 0
        finally:
            weight.copy_(original)
        forward_padded(lm.model, sequences, padding_id(lm.tokenizer))
    assert ledger.repeated_tokens == len(sequences[0])
    assert ledger.tokens == 3 * len(sequences[0])


@pytest.mark.model
def test_packed_sequences_are_known_apart_and_a_rows_free_end_is_not_counted(lm):
    sequences = [_ids(lm, p) for p in PROMPTS]
    pad = padding_id(lm.tokenizer)
    first, second = sequences
    ledger = ForwardLedger(padding_id=pad)
    with ledger.watching(lm.model), torch.no_grad():
        # both prompts packed in one row, two pads at its end (their own sequence)
        lm.model(
            input_ids=torch.tensor([first + second + [pad, pad]]),
            position_ids=torch.tensor(
                [[*range(len(first)), *range(len(second)), 0, 1]]
            ),
            use_cache=False,
        )
        once = ledger.tokens
        assert once == len(first) + len(second)
        assert ledger.repeated_tokens == 0
        # the same two sequences packed the other way, then padded: repeats
        lm.model(
            input_ids=torch.tensor([second + first]),
            position_ids=torch.tensor([[*range(len(second)), *range(len(first))]]),
            use_cache=False,
        )
        forward_padded(lm.model, sequences, pad)
    assert ledger.tokens == 3 * once and ledger.repeated_tokens == 2 * once
    assert ledger.unknown_context_tokens == 0
