"""Teacher-forced log-probabilities of answers after prompts (design §5).

An answer follows its prompt with a leading space (unless the prompt ends in
whitespace); its tokens are those of the joint text after the prompt's, for every
tokenizer kind (byte-level BPE, SentencePiece, with or without BOS): the same token ids
an editing method optimises. Batches are padded on either side; positions are computed
from the attention mask, so a padded row scores exactly as it would alone.
"""

from __future__ import annotations

import copy
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import Cache


class ContextOverflowError(ValueError):
    """A prompt and its answer are longer than the model's context."""

    def __init__(self, index: int, n_tokens: int, limit: int) -> None:
        super().__init__(
            f"pair {index}: the prompt and its answer take {n_tokens} tokens, past "
            f"the model's context of {limit}"
        )
        self.index = index


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


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """``text``'s ids with the tokenizer's special tokens, less an EOS it appends
    (some Llama tokenizers' ``add_eos_token``): an answer's text does not end there."""
    ids = list(tokenizer(text)["input_ids"])
    eos = tokenizer.eos_token
    if len(ids) > 1 and ids[-1] == tokenizer.eos_token_id and not text.endswith(eos):
        ids.pop()
    return ids


def encode_pair(
    tokenizer: PreTrainedTokenizerBase, prompt: str, answer: str
) -> tuple[list[int], list[int]]:
    """Token ids of the prompt (with the tokenizer's special tokens) and of the answer.

    The answer's tokens are those of the joint text after the prompt's: what the model
    reads when the answer follows the prompt. Tokenised alone, an answer can differ:
    SentencePiece tokenizers (Llama-2, Mistral, Gemma) prefix it with a spurious "▁"
    token. When the joint text re-tokenises the prompt's last token (a prompt ending
    in a space, which SentencePiece folds into the answer's "▁"), the prompt is the
    tokens the joint text shares with it.
    """
    prompt_ids = encode_text(tokenizer, prompt)
    joint_ids = encode_text(tokenizer, prompt + answer_text(prompt, answer))
    shared = 0
    for own, in_joint in zip(prompt_ids, joint_ids, strict=False):
        if own != in_joint:
            break
        shared += 1
    prompt_ids, answer_ids = joint_ids[:shared], joint_ids[shared:]
    if not prompt_ids or not answer_ids:
        raise ValueError(f"prompt {prompt!r} or answer {answer!r} has no tokens")
    return prompt_ids, answer_ids


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


# The memory prefixes kept per model may take (oldest dropped first): room for every
# IKE edit of a demo evaluation (about 12 MB each for SmolLM2-135M), so that the
# stealthiness of the same run reads them, and for a few of a 7B model's
KEPT_PREFIX_BYTES = 512 * 2**20


def model_state(model: torch.nn.Module) -> tuple[tuple, list[object]]:
    """What a forward pass of ``model`` depends on besides its input, cheaply: its
    parameters and their versions (an in-place change, such as a delta applied or
    reverted, bumps one) and the forward hooks of its modules (a memory-based edit's),
    by identity; and those objects, which a key must keep alive so that their ids
    are not reused."""
    params = list(model.parameters())
    hooks = [
        hook
        for module in model.modules()
        for hook in (
            *module._forward_pre_hooks.values(),
            *module._forward_hooks.values(),
        )
    ]
    key = (
        tuple(id(p) for p in params),
        tuple(p._version for p in params),
        tuple(id(h) for h in hooks),
    )
    return key, [*params, *hooks]


@dataclass(frozen=True)
class PrefixCache:
    """The tokens that begin every row of a pass (an in-context edit's prefix), run
    once: their keys and values, for one row.

    A pass given it runs only each row's tokens after the prefix; its rows score as
    if the prefix were in each, up to floating-point order.
    """

    ids: tuple[int, ...]
    cache: Cache

    @classmethod
    @torch.no_grad()
    def of(cls, model: PreTrainedModel, ids: Sequence[int]) -> PrefixCache:
        """Run ``ids`` through ``model`` once and keep their cache.

        Prefixes are kept per model (up to ``KEPT_PREFIX_BYTES``), while it stays
        in the same state (``model_state``): an in-context edit's prefix is asked by
        every scoring call of its edit (teacher forcing, the generations, the drift
        measures, in the evaluation and in stealthiness), and runs once.
        """
        kept = _PREFIXES.setdefault(model, OrderedDict())
        state, alive = model_state(model)
        key = (state, tuple(ids))
        if key in kept:
            kept.move_to_end(key)
            return kept[key][0]
        device = next(model.parameters()).device
        output = model(
            input_ids=torch.tensor([list(ids)], device=device),
            use_cache=True,
            logits_to_keep=1,
        )
        made = cls(tuple(ids), output.cache)
        kept[key] = (made, alive)
        while len(kept) > 1 and sum(p.nbytes for p, _ in kept.values()) > (
            KEPT_PREFIX_BYTES
        ):
            kept.popitem(last=False)
        return made

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """The bytes of its keys and values."""
        return sum(
            t.numel() * t.element_size()
            for layer in self.cache.layers
            for t in (layer.keys, layer.values)
            if t is not None
        )

    def rows(self, n: int) -> Cache:
        """A cache of ``n`` copies of the prefix, for one pass (passes extend it)."""
        # a pass appends its rows' keys to the cache it is given: the prefix's own
        # must stay as they are
        cache = copy.deepcopy(self.cache)
        cache.reorder_cache(torch.zeros(n, dtype=torch.long))
        return cache


# model -> its kept prefixes, most recently used last (``PrefixCache.of``)
_PREFIXES: weakref.WeakKeyDictionary[
    torch.nn.Module, OrderedDict[tuple, tuple[PrefixCache, list[object]]]
] = weakref.WeakKeyDictionary()


def with_prefix(
    prefix: PrefixCache | None, mask: torch.Tensor, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """A pass's attention mask, positions and cache when its rows follow ``prefix``."""
    if prefix is None:
        return mask, positions, {}
    ones = torch.ones((mask.shape[0], len(prefix)), dtype=mask.dtype)
    return (
        torch.cat([ones, mask], dim=1),
        positions + len(prefix),
        {"cache": prefix.rows(mask.shape[0])},
    )


def forward_padded(  # noqa: PLR0913 - the prefix is optional
    model: PreTrainedModel,
    sequences: Sequence[Sequence[int]],
    pad_id: int,
    side: str = "right",
    keep: torch.Tensor | None = None,
    *,
    prefix: PrefixCache | None = None,
) -> tuple[torch.Tensor, list[int]]:
    """Logits of a padded batch, and the offset at which each row starts.

    ``keep``: only these sequence positions get logits (the output head is the costly
    part of a small model's forward pass); default all. ``prefix``: every row follows
    these cached tokens; ``sequences`` are the tokens after them.
    """
    ids, mask, positions, offsets = pad_batch(sequences, pad_id, side)
    mask, positions, cache = with_prefix(prefix, mask, positions)
    device = next(model.parameters()).device
    extra = {} if keep is None else {"logits_to_keep": keep.to(device)}
    logits = model(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        use_cache=prefix is not None,
        **cache,
        **extra,
    ).logits
    return logits, offsets


def padding_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The token that fills padding: the tokenizer's pad token, else its EOS."""
    pad_id = tokenizer.pad_token_id
    return tokenizer.eos_token_id if pad_id is None else pad_id


def length_batches(
    lengths: Sequence[int],
    batch_size: int,
    max_tokens: int | None = None,
    *,
    context: int = 0,
    max_held: int | None = None,
) -> list[list[int]]:
    """Indices of ``lengths`` in batches of at most ``batch_size`` rows, like lengths
    together.

    A padded batch costs its longest row times its size: rows of like length waste the
    least. Without a budget the batches go shortest first. With ``max_tokens``, a batch
    also forwards at most that many padded positions; with ``max_held``, it holds at
    most that many in its KV cache, each row's ``context`` (a cached prefix, copied for
    every row) included. A row over a budget goes alone. Every pass reads each weight
    once, which on a CPU costs as much as forwarding tens of tokens, so short rows
    should share a pass; but a long prefix copied for many rows costs more than the
    passes it saves. Budgeted rows are taken longest first, so that a batch's first
    row sets its width and the rows left over at the end are the shortest.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    if max_tokens is None and max_held is None:
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for name, budget in (("token", max_tokens), ("held-token", max_held)):
        if budget is not None and budget < 1:
            raise ValueError(f"{name} budget must be >= 1, got {budget}")

    def fits(rows: int, width: int) -> bool:
        return (
            rows <= batch_size
            and (max_tokens is None or rows * width <= max_tokens)
            and (max_held is None or rows * (context + width) <= max_held)
        )

    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if batches and fits(len(batches[-1]) + 1, lengths[batches[-1][0]]):
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


@dataclass(frozen=True)
class Batching:
    """How rows share forward passes (``length_batches``): at most ``rows`` rows a pass
    and, where set, at most ``tokens`` padded positions forwarded and ``held``
    positions in its KV cache (a cached prefix's copy for each row included)."""

    rows: int = 8
    tokens: int | None = None
    held: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> Batching:
        """From a parameters block's ``batch_size``, ``batch_tokens`` and
        ``batch_held``."""

        def budget(key: str) -> int | None:
            value = params.get(key)
            return None if value is None else int(value)

        return cls(
            int(params["batch_size"]), budget("batch_tokens"), budget("batch_held")
        )

    def of(
        self, lengths: Sequence[int], prefix: PrefixCache | None = None
    ) -> list[list[int]]:
        """The batches of rows of these lengths, each after ``prefix`` where one is
        cached."""
        context = len(prefix) if prefix is not None else 0
        return length_batches(
            lengths, self.rows, self.tokens, context=context, max_held=self.held
        )


def packed_rows(lengths: Sequence[int], width: int) -> list[list[int]]:
    """Indices of ``lengths`` packed into rows of ``width`` tokens, first fit with the
    longest first (each row's indices in the order packed); a sequence longer than
    ``width`` is refused."""
    rows: list[tuple[list[int], list[int]]] = []  # (free tokens, indices)
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if lengths[i] > width:
            raise ValueError(
                f"sequence {i} of {lengths[i]} tokens exceeds rows of {width}"
            )
        row = next((r for r in rows if r[0][0] >= lengths[i]), None)
        if row is None:
            row = ([width], [])
            rows.append(row)
        row[0][0] -= lengths[i]
        row[1].append(i)
    return [indices for _, indices in rows]


# model -> whether it honours packed position ids (``packing_fits``)
_PACKING: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()


@torch.no_grad()
def _packing_honoured(model: PreTrainedModel) -> bool:
    """Whether a sequence packed after another scores as it does alone: transformers
    reads position ids that restart within a row (with no attention mask and no
    cache) as packed sequences, each attending only to itself; a model whose masks
    ignore them would let sequences see each other."""
    device = next(model.parameters()).device
    first, second = [5, 6, 7], [8, 9]
    try:
        packed = model(
            input_ids=torch.tensor([first + second], device=device),
            position_ids=torch.tensor([[0, 1, 2, 0, 1]], device=device),
            use_cache=False,
        ).logits[0, len(first) :]
        alone = model(
            input_ids=torch.tensor([second], device=device), use_cache=False
        ).logits[0]
    except (TypeError, ValueError, RuntimeError, IndexError):
        return False
    # the two differ by rounding alone (other matrix shapes): about the square root of
    # the dtype's epsilon in bfloat16 or float16, far below what a leak does
    tolerance = max(1e-3, torch.finfo(packed.dtype).eps ** 0.5)
    return bool(
        torch.allclose(packed.float(), alone.float(), rtol=tolerance, atol=tolerance)
    )


def packing_fits(model: PreTrainedModel) -> bool:
    """Whether ``forward_packed`` scores each sequence as it would alone: the model
    honours packed position ids (checked once per model), and no hook on a module
    inside it changes its forward. Hooks there (GRACE's codebooks, WISE's side
    memories) read each row's last token as its prompt's, which packing breaks; a
    hook on the model itself sees only its inputs."""
    hooked = any(
        module._forward_hooks or module._forward_pre_hooks
        for module in model.modules()
        if module is not model
    )
    if hooked:
        return False
    if model not in _PACKING:
        _PACKING[model] = _packing_honoured(model)
    return _PACKING[model]


@torch.no_grad()
def forward_packed(
    model: PreTrainedModel,
    sequences: Sequence[Sequence[int]],
    positions: Sequence[Sequence[int]],
    pad_id: int,
    batching: Batching,
) -> Iterator[tuple[int, torch.Tensor]]:
    """The logits at ``positions[i]`` of each ``sequences[i]``, several sequences
    packed in a row, in the order computed.

    A row is as wide as the longest sequence (``packed_rows``); a pass holds at most
    ``batching.rows`` rows and, where set, ``batching.tokens`` positions. Each
    sequence's position ids start at 0, so transformers masks its attention to itself
    (check ``packing_fits`` first). A row's free end is padding, its own sequence.
    Unlike padded batches, nearly every position forwarded is a token. Rows keep
    logits at every position any of a pass's rows asks for.
    """
    lengths = [len(s) for s in sequences]
    width = max(lengths, default=0)
    rows = packed_rows(lengths, width)
    per_pass = batching.rows
    if batching.tokens is not None:
        per_pass = max(1, min(per_pass, batching.tokens // max(width, 1)))
    device = next(model.parameters()).device
    for start in range(0, len(rows), per_pass):
        chunk = rows[start : start + per_pass]
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        position_ids = torch.zeros((len(chunk), width), dtype=torch.long)
        placed = []  # (sequence, row, its first column)
        for row, members in enumerate(chunk):
            column = 0
            for i in members:
                ids[row, column : column + lengths[i]] = torch.tensor(sequences[i])
                position_ids[row, column : column + lengths[i]] = torch.arange(
                    lengths[i]
                )
                placed.append((i, row, column))
                column += lengths[i]
            position_ids[row, column:] = torch.arange(width - column)
        keep = sorted({c + p for i, _, c in placed for p in positions[i]})
        logits = model(
            input_ids=ids.to(device),
            position_ids=position_ids.to(device),
            use_cache=False,
            logits_to_keep=torch.tensor(keep, device=device),
        ).logits
        column_of = {p: k for k, p in enumerate(keep)}
        for i, row, column in placed:
            yield i, logits[row, [column_of[column + p] for p in positions[i]]]


def context_length(model: PreTrainedModel) -> int | None:
    """The longest sequence the model's positions allow, when its config says."""
    config = model.config
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def _positions_to_keep(lengths: Sequence[int], width: int, side: str) -> list[int]:
    """Sequence positions (in a batch padded to ``width``) of each row's tokens."""
    return sorted(
        {(width - n if side == "left" else 0) + j for n in lengths for j in range(n)}
    )


@dataclass(frozen=True)
class PromptPass:
    """A forward pass over a batch of prompts, for their answers to continue: each
    row's token ids (an in-context prefix's included), the KV cache of those positions,
    their attention mask (prefix columns included) and the log-probs of the token
    after each row (float32). A generation's prefill is one (``generate_answers``):
    teacher forcing then scores a pair whose prompt it holds from it, instead of
    running the prompt again (``AnswerScorer.take``). Its cache is consumed."""

    rows: tuple[tuple[int, ...], ...]
    cache: Cache
    mask: torch.Tensor
    first_logprobs: torch.Tensor


class AnswerScorer:
    """Teacher-forced scores of (prompt, answer) pairs (``score_answers``), whose
    prompt passes may come from elsewhere.

    A pair asked twice (a locality probe's old and new answer are one) runs once, and
    pairs that share a prompt share its pass. ``take`` scores the pairs whose prompt
    (its tokens in the joint text, the prefix's included) a ``PromptPass`` holds;
    ``finish`` runs the prompts of the others, then returns every pair's score.
    """

    def __init__(  # noqa: PLR0913 - batching options are keyword-only
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        prompts: Sequence[str],
        answers: Sequence[str],
        *,
        batch_size: int = 16,
        batching: Batching | None = None,
        padding_side: str | None = None,
        prefix: str = "",
        scored_tokens: Sequence[int | None] | None = None,
    ) -> None:
        if len(prompts) != len(answers):
            raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
        if scored_tokens is not None and len(scored_tokens) != len(answers):
            raise ValueError(
                f"{len(scored_tokens)} scored-token counts but {len(answers)} answers"
            )
        self._model, self._tokenizer, self._prefix = model, tokenizer, prefix
        self._batching = batching or Batching(batch_size)
        self._padding = (
            padding_id(tokenizer),
            padding_side or tokenizer.padding_side,
        )
        limit = context_length(model)
        self._pairs = [
            encode_pair(tokenizer, prefix + p, a)
            for p, a in zip(prompts, answers, strict=True)
        ]
        if scored_tokens is not None:
            self._pairs = [
                (p, a[:n]) for (p, a), n in zip(self._pairs, scored_tokens, strict=True)
            ]
        for index, (prompt_ids, answer_ids) in enumerate(self._pairs):
            if limit is not None and len(prompt_ids) + len(answer_ids) > limit:
                raise ContextOverflowError(
                    index, len(prompt_ids) + len(answer_ids), limit
                )
        first_of: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        self._same_as = [
            first_of.setdefault((tuple(p), tuple(a)), index)
            for index, (p, a) in enumerate(self._pairs)
        ]
        # distinct prompts (their tokens in the joint texts), with their pairs
        self._groups: dict[tuple[int, ...], list[int]] = {}
        for index in first_of.values():
            self._groups.setdefault(tuple(self._pairs[index][0]), []).append(index)
        self._scores: dict[int, AnswerScore] = {}

    def take(self, prompt_pass: PromptPass) -> None:
        """Score the pairs not scored yet whose prompt ``prompt_pass`` holds."""
        rows = {ids: r for r, ids in enumerate(prompt_pass.rows)}
        chunk = [
            members
            for ids, members in self._groups.items()
            if ids in rows and members[0] not in self._scores
        ]
        if chunk:
            prompt_rows = [rows[tuple(self._pairs[m[0]][0])] for m in chunk]
            self._scores.update(
                _continue(
                    self._model,
                    self._pairs,
                    chunk,
                    prompt_rows,
                    self._padding,
                    prompt_pass,
                )
            )

    def finish(self) -> list[AnswerScore]:
        """Every pair's score, in order; the prompts no pass held run now, batched by
        length (``length_batches``)."""
        order = [m for m in self._groups.values() if m[0] not in self._scores]
        if order:
            cached = shared_prefix(
                self._model,
                self._tokenizer,
                self._prefix,
                [self._pairs[m[0]][0] for m in order],
            )
            skip = len(cached) if cached is not None else 0
            pairs = [(p[skip:], a) for p, a in self._pairs]
            widths = [len(pairs[members[0]][0]) for members in order]
            for batch in self._batching.of(widths, cached):
                chunk = [order[i] for i in batch]
                state = _prompt_pass(
                    self._model,
                    [pairs[m[0]][0] for m in chunk],
                    self._padding,
                    cached,
                )
                self._scores.update(
                    _continue(
                        self._model,
                        pairs,
                        chunk,
                        range(len(chunk)),
                        self._padding,
                        state,
                    )
                )
        return [self._scores[self._same_as[i]] for i in range(len(self._pairs))]


@torch.no_grad()
def score_answers(  # noqa: PLR0913 - batching options are keyword-only
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    answers: Sequence[str],
    *,
    batch_size: int = 16,
    batching: Batching | None = None,
    padding_side: str | None = None,
    prefix: str = "",
    scored_tokens: Sequence[int | None] | None = None,
) -> list[AnswerScore]:
    """Score each answer after its prompt, in padded batches.

    A pair given more than once is scored once. Pairs that share a prompt (a probe's
    old and new answer) share its forward pass:
    the batch of distinct prompts runs once with a KV cache, which is then repeated for
    each of their answers; the answers' own pass is skipped when every answer is one
    token long. The first answer token is scored from the prompt pass's last position.
    Prompts are batched by length (``length_batches``).

    Args:
        model: a causal LM.
        tokenizer: its tokenizer; its pad token (or EOS) fills the padding.
        prompts: the prompts, complete text (no ``{}`` left).
        answers: one answer per prompt.
        batch_size: distinct prompts per forward pass.
        batching: rows and token budgets per pass (``Batching``); given, it
            replaces ``batch_size``.
        padding_side: ``left`` or ``right``; default: the tokenizer's.
        prefix: text before every prompt (an in-context edit's). Its tokens run once
            (``PrefixCache``), where every prompt's joint tokens begin with them.
        scored_tokens: per pair, how many of its answer's first tokens are scored
            (None: all); the score is then that of the answer cut there. A pair cut to
            one token needs no answer pass.
    """
    return AnswerScorer(
        model,
        tokenizer,
        prompts,
        answers,
        batch_size=batch_size,
        batching=batching,
        padding_side=padding_side,
        prefix=prefix,
        scored_tokens=scored_tokens,
    ).finish()


def shared_prefix(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prefix: str,
    prompts: Sequence[Sequence[int]],
) -> PrefixCache | None:
    """The prefix's tokens, run once, when every prompt's joint tokens (those of the
    prefix and the prompt's text together, with the tokenizer's special tokens) begin
    with them and go on past them; else None (each prompt then runs whole)."""
    # the prefix's last token can merge with the text after it (a trailing space)
    if not prefix:
        return None
    ids = encode_text(tokenizer, prefix)[:-1]
    n = len(ids)
    if not ids or any(len(p) <= n or list(p[:n]) != ids for p in prompts):
        return None
    return PrefixCache.of(model, ids)


def _prompt_pass(
    model: PreTrainedModel,
    prompt_seqs: Sequence[Sequence[int]],
    padding: tuple[int, str],
    prefix: PrefixCache | None,
) -> PromptPass:
    """One padded pass over ``prompt_seqs``, each after ``prefix`` where one is given
    (``prompt_seqs`` are then the tokens after it; the pass's rows hold both)."""
    pad_id, side = padding
    device = next(model.parameters()).device
    width = max(len(p) for p in prompt_seqs)
    last = [(width - 1 if side == "left" else len(p) - 1) for p in prompt_seqs]
    ids, mask, positions, _ = pad_batch(prompt_seqs, pad_id, side)
    mask, positions, cache = with_prefix(prefix, mask, positions)
    keep = sorted(set(last))
    output = model(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        use_cache=True,
        logits_to_keep=torch.tensor(keep, device=device),
        **cache,
    )
    column = {position: i for i, position in enumerate(keep)}
    first_logprobs = torch.log_softmax(
        output.logits[
            torch.arange(len(prompt_seqs)), [column[p] for p in last]
        ].float(),
        dim=-1,
    )
    before = prefix.ids if prefix is not None else ()
    rows = tuple((*before, *p) for p in prompt_seqs)
    return PromptPass(rows, output.cache, mask, first_logprobs)


def _continue(  # noqa: PLR0913, PLR0914, PLR0917 - one answer pass after a prompt pass
    model: PreTrainedModel,
    pairs: Sequence[tuple[list[int], list[int]]],
    chunk: Sequence[Sequence[int]],
    prompt_rows: Sequence[int],
    padding: tuple[int, str],
    state: PromptPass,
) -> list[tuple[int, AnswerScore]]:
    """Scores of the pairs of ``chunk`` (lists of pair indices sharing a prompt), the
    k-th list's prompt being row ``prompt_rows[k]`` of ``state``."""
    pad_id, side = padding
    device = next(model.parameters()).device
    mask, first_logprobs = state.mask, state.first_logprobs
    # one row per pair: which prompt row it continues, and its answer
    rows = [
        (r, i) for r, members in zip(prompt_rows, chunk, strict=True) for i in members
    ]
    answers = [pairs[i][1] for _, i in rows]
    rest_logprobs = None
    rest_width = max(len(a) for a in answers) - 1
    if rest_width > 0:
        row_index = torch.tensor([r for r, _ in rows], device=device)
        cache = state.cache
        cache.reorder_cache(row_index)
        # each answer but its last token is input; scored positions are per row
        inputs = [a[:-1] or [pad_id] for a in answers]
        a_ids, a_mask, _, _ = pad_batch(inputs, pad_id, side)
        a_mask[[len(a) == 1 for a in answers]] = 0
        prompt_lengths = mask.sum(dim=1).to(device)[row_index]
        a_positions = prompt_lengths[:, None] + (a_mask.cumsum(dim=1) - 1).clamp(
            min=0
        ).to(device)
        a_keep = _positions_to_keep([len(a) - 1 for a in answers], rest_width, side)
        rest = model(
            input_ids=a_ids.to(device),
            attention_mask=torch.cat(
                [mask.to(device)[row_index], a_mask.to(device)], 1
            ),
            position_ids=a_positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=torch.tensor(a_keep or [0], device=device),
        ).logits
        rest_logprobs = torch.log_softmax(rest.float(), dim=-1)
        rest_column = {position: i for i, position in enumerate(a_keep)}
    results = []
    for row, ((prompt_row, index), answer_ids) in enumerate(
        zip(rows, answers, strict=True)
    ):
        steps = [first_logprobs[prompt_row]]
        offset = rest_width - (len(answer_ids) - 1) if side == "left" else 0
        steps += [
            rest_logprobs[row, rest_column[offset + j]]
            for j in range(len(answer_ids) - 1)
        ]
        results.append((index, answer_score(torch.stack(steps), answer_ids)))
    return results


def answer_score(step_logprobs: torch.Tensor, answer_ids: Sequence[int]) -> AnswerScore:
    """An answer's score from the log-probs at each of its positions (one row per
    answer token: the distribution its token is drawn from)."""
    target = torch.tensor(list(answer_ids), device=step_logprobs.device)
    token_lp = step_logprobs.gather(1, target[:, None]).squeeze(1)
    return AnswerScore(
        logprob=float(token_lp.double().sum()),
        token_logprobs=tuple(token_lp.tolist()),
        argmax_ids=tuple(step_logprobs.argmax(dim=-1).tolist()),
        answer_ids=tuple(answer_ids),
    )
