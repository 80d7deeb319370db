"""Teacher-forced log-probabilities of answers after prompts (design §5).

An answer is tokenised on its own, with a leading space when the prompt does not end in
whitespace, and appended to the prompt's tokens: the same token ids an editing method
optimises. Batches are padded on either side; positions are computed from the
attention mask, so a padded row scores exactly as it would alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class AnswerScore:
    """How a model scores one answer after one prompt.

    Attributes:
        logprob: log P(answer | prompt), summed over the answer's tokens.
        token_logprobs: the log-prob of each answer token.
        argmax_ids: the model's most likely token at each answer position.
        answer_ids: the answer's token ids.
    """

    logprob: float
    token_logprobs: tuple[float, ...]
    argmax_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]

    @property
    def n_tokens(self) -> int:
        return len(self.answer_ids)


def answer_text(prompt: str, answer: str) -> str:
    """The answer as it follows the prompt: a leading space unless either side has one."""
    if not prompt or prompt[-1].isspace() or answer[:1].isspace():
        return answer
    return " " + answer


def encode_pair(
    tokenizer: PreTrainedTokenizerBase, prompt: str, answer: str
) -> tuple[list[int], list[int]]:
    """Token ids of the prompt (with the tokenizer's special tokens) and of the answer."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    answer_ids = tokenizer(answer_text(prompt, answer), add_special_tokens=False)[
        "input_ids"
    ]
    if not prompt_ids or not answer_ids:
        raise ValueError(f"prompt {prompt!r} or answer {answer!r} has no tokens")
    return list(prompt_ids), list(answer_ids)


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_id: int, side: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """Input ids, attention mask, position ids and each row's offset, padded on ``side``."""
    if side not in ("left", "right"):
        raise ValueError(f"padding side must be left or right, got {side!r}")
    width = max(len(seq) for seq in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    offsets = []
    for row, seq in enumerate(sequences):
        start = width - len(seq) if side == "left" else 0
        ids[row, start : start + len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, start : start + len(seq)] = 1
        offsets.append(start)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return ids, mask, positions, offsets


def forward_padded(
    model: PreTrainedModel,
    sequences: Sequence[Sequence[int]],
    pad_id: int,
    side: str = "right",
    keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, list[int]]:
    """Logits of a padded batch, and the offset at which each row starts.

    ``keep``: only these sequence positions get logits (the output head is the costly
    part of a small model's forward pass); default all.
    """
    ids, mask, positions, offsets = pad_batch(sequences, pad_id, side)
    device = next(model.parameters()).device
    extra = {} if keep is None else {"logits_to_keep": keep.to(device)}
    logits = model(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        use_cache=False,
        **extra,
    ).logits
    return logits, offsets


@torch.no_grad()
def score_answers(  # noqa: PLR0913 - batching options are keyword-only
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    answers: Sequence[str],
    *,
    batch_size: int = 16,
    padding_side: str | None = None,
) -> list[AnswerScore]:
    """Score each answer after its prompt, in padded batches.

    Args:
        model: a causal LM.
        tokenizer: its tokenizer; its pad token (or EOS) fills the padding.
        prompts: the prompts, complete text (no ``{}`` left).
        answers: one answer per prompt.
        batch_size: rows per forward pass.
        padding_side: ``left`` or ``right``; default: the tokenizer's.
    """
    if len(prompts) != len(answers):
        raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
    side = padding_side or tokenizer.padding_side
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = tokenizer.eos_token_id
    pairs = [
        encode_pair(tokenizer, p, a) for p, a in zip(prompts, answers, strict=True)
    ]
    scores: list[AnswerScore] = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        width = max(len(p) + len(a) for p, a in chunk)
        firsts = [
            (width - len(p) - len(a) if side == "left" else 0) + len(p) - 1
            for p, a in chunk
        ]
        needed = sorted(
            {
                f + j
                for f, (_, a) in zip(firsts, chunk, strict=True)
                for j in range(len(a))
            }
        )
        column = {position: i for i, position in enumerate(needed)}
        logits, _ = forward_padded(
            model, [p + a for p, a in chunk], pad_id, side, keep=torch.tensor(needed)
        )
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        for row, ((_, answer_ids), first) in enumerate(zip(chunk, firsts, strict=True)):
            at = torch.tensor([column[first + j] for j in range(len(answer_ids))])
            target = torch.tensor(answer_ids, device=logprobs.device)
            token_lp = (
                logprobs[row, at.to(logprobs.device)]
                .gather(1, target[:, None])
                .squeeze(1)
            )
            scores.append(
                AnswerScore(
                    logprob=float(token_lp.double().sum()),
                    token_logprobs=tuple(token_lp.tolist()),
                    argmax_ids=tuple(logprobs[row, at].argmax(dim=-1).tolist()),
                    answer_ids=tuple(answer_ids),
                )
            )
    return scores
