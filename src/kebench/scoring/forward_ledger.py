"""A ledger of what a model forwards, to find work done twice.

Every forward call of a watched model is recorded per row: the model's state (a
digest of its parameters) and the row's whole sequence (the tokens its cache already
holds, then the new ones, padding left out). A row whose (state, sequence) pair the
ledger has seen before is a repeat: the same numbers computed again. The ledger
counts forwarded tokens (each row's new non-padding positions) and the repeated ones.

A KV cache holds its rows' earlier tokens, which the next call does not pass again.
The ledger keeps each cache's token ids beside it, and follows the cache through
``reorder_cache``, ``crop``, ``batch_repeat_interleave`` and ``batch_select_indices``
(transformers has no hook for them, so they are wrapped while the ledger watches)
and through ``copy.deepcopy``. A cache the ledger did not see made, or whose length
disagrees with what it recorded, is counted in ``unknown_context_tokens`` and never
as a repeat.

Rows may pack several sequences (``forward_packed``): with no attention mask and no
cache, a position that does not follow the one before starts a sequence, as
transformers reads them. Each is then its own sequence, and one made only of the
padding token (``padding_id``) is a row's free end, not counted.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import Cache

# the attribute that carries a cache's recorded token ids and mask (rows x width)
_RECORD = "_kebench_ledger_record"


@dataclass
class ForwardLedger:
    """Forwarded and repeated tokens of the models it watched (see the module)."""

    # the token that fills a packed row's free end (None: every packed sequence counts)
    padding_id: int | None = None
    tokens: int = 0
    repeated_tokens: int = 0
    unknown_context_tokens: int = 0
    grad_tokens: int = 0
    # forwarded and repeated tokens per pipeline node (``caller``)
    by_node: Counter[str] = field(default_factory=Counter)
    repeated_by_node: Counter[str] = field(default_factory=Counter)
    _seen: set[bytes] = field(default_factory=set, repr=False)
    # (id, version) of a parameter -> the parameter (weakly: its id is reused once it
    # is freed, by another model's) and the digest of its bytes. An in-place change
    # (``add_``, ``copy_``) bumps a tensor's version, so only changed tensors are hashed
    _tensor_digests: dict[tuple[int, int], tuple[weakref.ref[torch.Tensor], bytes]] = (
        field(default_factory=dict, repr=False)
    )

    @property
    def repeated_share(self) -> float:
        return self.repeated_tokens / self.tokens if self.tokens else 0.0

    def summary(self) -> dict[str, float | int]:
        return {
            "forwarded_tokens": self.tokens,
            "repeated_tokens": self.repeated_tokens,
            "repeated_share": round(self.repeated_share, 4),
            "unknown_context_tokens": self.unknown_context_tokens,
            "grad_tokens": self.grad_tokens,
        }

    def state_digest(self, model: torch.nn.Module) -> bytes:
        """A digest of the model's parameters (names and bytes)."""
        digest = hashlib.blake2b(digest_size=16)
        for name, param in model.named_parameters():
            key = (id(param), param._version)
            known = self._tensor_digests.get(key)
            if known is None or known[0]() is not param:
                flat = param.detach().contiguous().reshape(-1)
                known = (
                    weakref.ref(param),
                    hashlib.blake2b(
                        flat.view(torch.uint8).cpu().numpy().tobytes(), digest_size=16
                    ).digest(),
                )
                self._tensor_digests[key] = known
            digest.update(name.encode())
            digest.update(known[1])
        return digest.digest()

    def record(self, state: bytes, ids: torch.Tensor, mask: torch.Tensor, new: int):
        """Count one call's rows: ``ids`` and ``mask`` are whole sequences (the cache's
        tokens, then the ``new`` ones the call forwards)."""
        node = caller()
        for row_ids, row_mask in zip(ids.tolist(), mask.tolist(), strict=True):
            kept = [t for t, m in zip(row_ids, row_mask, strict=True) if m]
            count = sum(row_mask[-new:]) if new else 0
            key = hashlib.blake2b(state + repr(kept).encode(), digest_size=16).digest()
            self.tokens += count
            self.by_node[node] += count
            if torch.is_grad_enabled():
                self.grad_tokens += count
            if key in self._seen:
                self.repeated_tokens += count
                self.repeated_by_node[node] += count
            self._seen.add(key)

    def _record_packed(
        self, model: torch.nn.Module, ids: torch.Tensor, positions: torch.Tensor
    ) -> None:
        sequences = packed_sequences(ids, positions, self.padding_id)
        if not sequences:
            return
        width = max(len(s) for s in sequences)
        rows = torch.zeros((len(sequences), width), dtype=torch.long)
        kept = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, sequence in enumerate(sequences):
            rows[row, : len(sequence)] = torch.tensor(sequence)
            kept[row, : len(sequence)] = 1
        self.record(self.state_digest(model), rows, kept, width)

    @contextmanager
    def watching(self, model: torch.nn.Module) -> Iterator[ForwardLedger]:
        """Record every forward call of ``model`` (its top-level module) meanwhile."""
        pending: list[tuple[torch.Tensor, torch.Tensor] | None] = []

        def before(_module, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            if ids is None:  # embeddings passed in: not a sequence of tokens
                pending.append(None)
                return
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            new = ids.shape[-1]
            mask = kwargs.get("attention_mask")
            new_mask = (
                torch.ones_like(ids) if mask is None else mask[:, -new:].to(ids.dtype)
            )
            context = _context_of(cache, ids.shape[0])
            positions = kwargs.get("position_ids")
            starts_afresh = context is not None and context[0].shape[1] == 0
            if mask is None and starts_afresh and _restarts(positions):
                self._record_packed(model, ids, positions)
                pending.append(None)
                return
            if context is None:
                self.unknown_context_tokens += int(new_mask.sum())
                self.tokens += int(new_mask.sum())
                pending.append(None)
                return
            full_ids = torch.cat([context[0], ids.cpu()], dim=1)
            full_mask = torch.cat([context[1], new_mask.cpu()], dim=1)
            self.record(self.state_digest(model), full_ids, full_mask, new)
            pending.append((full_ids, full_mask))

        def after(_module, _args, _kwargs, output):
            seen = pending.pop()
            cache = getattr(output, "cache", None) or getattr(
                output, "past_key_values", None
            )
            if isinstance(cache, Cache):
                setattr(cache, _RECORD, seen)

        with ExitStack() as stack:
            stack.enter_context(_following_caches())
            for handle in (
                model.register_forward_pre_hook(before, with_kwargs=True),
                model.register_forward_hook(after, with_kwargs=True),
            ):
                stack.callback(handle.remove)
            yield self


def _restarts(positions: torch.Tensor | None) -> bool:
    """Whether a position does not follow the one before it in some row: packed."""
    if positions is None:
        return False
    return bool((positions[..., 1:] != positions[..., :-1] + 1).any())


def packed_sequences(
    ids: torch.Tensor, positions: torch.Tensor, padding_id: int | None = None
) -> list[list[int]]:
    """The token ids of each sequence in a call's rows (no attention mask, no cache):
    one starts wherever a position does not follow the one before, as transformers
    reads packed rows. A sequence made only of ``padding_id`` is left out."""
    positions = positions.expand(ids.shape[0], -1).cpu()
    sequences = []
    for row_ids, row_positions in zip(
        ids.cpu().tolist(), positions.tolist(), strict=True
    ):
        starts = [
            column
            for column, position in enumerate(row_positions)
            if column == 0 or position != row_positions[column - 1] + 1
        ]
        for start, end in zip(starts, [*starts[1:], len(row_ids)], strict=True):
            sequence = row_ids[start:end]
            if padding_id is None or any(t != padding_id for t in sequence):
                sequences.append(sequence)
    return sequences


def caller() -> str:
    """The pipeline node that made the current call: the outermost function of a
    ``kebench.pipelines`` module on the stack ("-" outside any)."""
    frame, node = sys._getframe(1), "-"
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("kebench.pipelines."):
            node = frame.f_code.co_name
        frame = frame.f_back
    return node


def _context_of(cache: Any, rows: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The token ids and mask a cache holds, empty for no cache; None when unknown."""
    empty = torch.zeros((rows, 0), dtype=torch.long)
    if cache is None or (isinstance(cache, Cache) and cache.get_seq_length() == 0):
        return empty, empty
    record = getattr(cache, _RECORD, None)
    if record is None:
        return None
    ids, mask = record
    if ids.shape != (rows, cache.get_seq_length()):
        return None
    return ids, mask


def _reorder(record, beam_idx):
    return tuple(t[beam_idx.cpu()] for t in record)


def _crop(record, tokens_to_remove):
    # ``crop(-n)`` drops the last n tokens (a positive count is refused by the cache)
    width = record[0].shape[1]
    return tuple(t[:, : width - abs(tokens_to_remove)] for t in record)


def _repeat(record, repeats):
    return tuple(t.repeat_interleave(repeats, dim=0) for t in record)


# each wrapped cache method, and what it does to the recorded rows
_FOLLOWED: dict[str, Callable] = {
    "reorder_cache": _reorder,
    "batch_select_indices": _reorder,
    "crop": _crop,
    "batch_repeat_interleave": _repeat,
}


@contextmanager
def _following_caches() -> Iterator[None]:
    originals = {name: getattr(Cache, name) for name in _FOLLOWED}

    def follow(name: str):
        original = originals[name]

        @functools.wraps(original)
        def wrapper(cache, argument):
            result = original(cache, argument)
            record = getattr(cache, _RECORD, None)
            if record is not None:
                setattr(cache, _RECORD, _FOLLOWED[name](record, argument))
            return result

        return wrapper

    for name in _FOLLOWED:
        setattr(Cache, name, follow(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(Cache, name, original)
