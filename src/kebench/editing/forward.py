"""Forward passes that editing methods share: module lookup, hooks, cached frozen layers.

Module paths come from the hparams templates (``model.layers.{}.mlp.down_proj`` for
Llama-style models, ``transformer.h.{}.mlp.c_proj`` for GPT-2-style ones), so nothing
here names an architecture. GPT-2's ``Conv1D`` stores its weight as (in, out), the
transpose of ``nn.Linear``; ``outer_change`` builds rank-one changes in either layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache

from kebench.editing.delta import ParamDelta
from kebench.editing.module_hooks import weight_is_transposed
from kebench.models.logprobs import pad_batch


def get_module(model: nn.Module, path: str) -> nn.Module:
    """The submodule at ``path``, or an error naming the path and the model class."""
    try:
        return model.get_submodule(path)
    except AttributeError as err:
        raise ValueError(
            f"{type(model).__name__} has no module {path!r}; check the hparams' "
            "*_module_tmp templates for this architecture"
        ) from err


def outer_change(
    module: nn.Module, out_vecs: torch.Tensor, in_vecs: torch.Tensor
) -> ParamDelta:
    """The low-rank change ``out_vecs @ in_vecs.T`` of the module's (out, in) map.

    ``out_vecs`` is (d_out, r) and ``in_vecs`` (d_in, r); the factors are stored in the
    weight's own layout, so ``W += left @ right.T`` holds for Linear and Conv1D alike.
    """
    out_vecs = out_vecs.reshape(out_vecs.shape[0], -1).detach().float()
    in_vecs = in_vecs.reshape(in_vecs.shape[0], -1).detach().float()
    if weight_is_transposed(module):
        return ParamDelta("low_rank", {"left": in_vecs, "right": out_vecs})
    return ParamDelta("low_rank", {"left": out_vecs, "right": in_vecs})


@dataclass
class Batch:
    """A right-padded batch on the model's device."""

    ids: torch.Tensor
    mask: torch.Tensor
    positions: torch.Tensor

    @classmethod
    def of(
        cls, sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device
    ) -> Batch:
        ids, mask, positions, _offsets = pad_batch(sequences, pad_id, "right")
        return cls(ids.to(device), mask.to(device), positions.to(device))


class StopForward(Exception):  # noqa: N818 - control flow, not an error
    """Raised by a hook once everything needed from a forward pass is captured."""


def run_until(model: nn.Module, batch: Batch) -> None:
    """Run the model on ``batch``; a hook may stop it early with ``StopForward``."""
    try:
        model(
            input_ids=batch.ids,
            attention_mask=batch.mask,
            position_ids=batch.positions,
            use_cache=False,
        )
    except StopForward:
        pass


def by_position(value: torch.Tensor, batch_shape: torch.Size) -> torch.Tensor:
    """``value`` as (batch, tokens, ...): OPT's decoder layers flatten the tokens of a
    batch to (batch * tokens, d) around their MLP; other models keep them apart."""
    if value.dim() == 2 and value.shape[0] == batch_shape[0] * batch_shape[1]:  # noqa: PLR2004 - a flattened (tokens, d) tensor
        return value.view(*batch_shape[:2], value.shape[-1])
    return value


def first_tensor(output: object) -> torch.Tensor:
    """A module's output tensor (decoder layers may return tuples)."""
    return output[0] if isinstance(output, tuple) else output


@torch.no_grad()
def capture(  # noqa: PLR0913 - where and what to capture
    model: nn.Module,
    batch: Batch,
    paths: Sequence[str],
    rows: torch.Tensor,
    cols: torch.Tensor,
    *,
    outputs: bool = False,
) -> dict[str, torch.Tensor]:
    """Inputs (or outputs) of the modules at ``paths`` at positions (rows, cols).

    The forward pass stops once the last of them has run.
    """
    captured: dict[str, torch.Tensor] = {}
    handles = []

    def hook_for(path: str) -> Callable:
        def hook(_module: nn.Module, args: tuple, output: object) -> None:
            value = by_position(
                first_tensor(output) if outputs else args[0], batch.ids.shape
            )
            # a model spread over GPUs: the module's device, not the inputs', holds it
            at = value.device
            captured[path] = value[rows.to(at), cols.to(at)].detach()
            if len(captured) == len(paths):
                raise StopForward

        return hook

    for path in paths:
        handles.append(get_module(model, path).register_forward_hook(hook_for(path)))
    try:
        run_until(model, batch)
    finally:
        for handle in handles:
            handle.remove()
    return captured


class _Passthrough(nn.Module):
    """Stands in for a frozen layer below the cached one: returns its input."""

    def __init__(self, as_tuple: bool) -> None:
        super().__init__()
        self.as_tuple = as_tuple

    def forward(
        self, hidden_states: torch.Tensor, *args: object, **kwargs: object
    ) -> object:
        return (hidden_states,) if self.as_tuple else hidden_states


class _Replay(nn.Module):
    """Stands in for the last frozen layer: returns its cached output of the rows being
    run (``rows``, all when None), plus an edit of those rows."""

    def __init__(
        self,
        cached: torch.Tensor,
        as_tuple: bool,
        edit: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor] | None,
    ) -> None:
        super().__init__()
        self.cached = cached
        self.as_tuple = as_tuple
        self.edit = edit
        self.rows: torch.Tensor | None = None

    def forward(
        self, hidden_states: torch.Tensor, *args: object, **kwargs: object
    ) -> object:
        cached = self.cached if self.rows is None else self.cached[self.rows]
        out = cached if self.edit is None else self.edit(cached, self.rows)
        return (out,) if self.as_tuple else out


@contextmanager
def frozen_below(
    model: nn.Module,
    layer_tmp: str,
    last_frozen: int,
    batch: Batch,
) -> Iterator[None]:
    """Compute layers 0..``last_frozen`` on ``batch`` once; inside the block they replay.

    Later forward passes on the same batch skip those layers: their output comes from
    the cache. Only for layers whose weights do not change inside the block.
    """
    if last_frozen < 0:
        yield
        return
    stored: dict[str, object] = {}

    def keep(_module: nn.Module, _args: tuple, output: object) -> None:
        stored["output"] = output
        raise StopForward

    top = get_module(model, layer_tmp.format(last_frozen))
    handle = top.register_forward_hook(keep)
    try:
        with torch.no_grad():
            run_until(model, batch)
    finally:
        handle.remove()
    as_tuple = isinstance(stored["output"], tuple)
    cached = first_tensor(stored["output"]).detach()
    with _replaced_below(
        model, layer_tmp, last_frozen, _Replay(cached, as_tuple, None)
    ):
        yield


@dataclass
class SplitBatch:
    """Rows cut at one token each (the subject's last), laid out so that every row's
    cut token sits at column ``width``: what precedes it left-padded, the rest
    right-padded. Positions count each row's own tokens.

    Attributes:
        cuts: each row's cut, as an index into the row's own tokens.
    """

    ids: torch.Tensor
    mask: torch.Tensor
    positions: torch.Tensor
    width: int
    cuts: list[int]

    @classmethod
    def of(
        cls,
        sequences: Sequence[Sequence[int]],
        cuts: Sequence[int],
        pad_id: int,
        device: torch.device,
    ) -> SplitBatch:
        width = max(cuts)
        tail = max(len(seq) - cut for seq, cut in zip(sequences, cuts, strict=True))
        ids = torch.full((len(sequences), width + tail), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, (seq, cut) in enumerate(zip(sequences, cuts, strict=True)):
            start = width - cut
            ids[row, start : start + len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, start : start + len(seq)] = 1
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        return cls(
            ids.to(device), mask.to(device), positions.to(device), width, list(cuts)
        )

    def after_cut(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Columns (in the rows' own tokens) as columns of the part from the cut on."""
        cuts = torch.tensor(self.cuts, device=cols.device)
        return cols - cuts[rows]


@contextmanager
def frozen_prefix(
    model: nn.Module,
    layer_tmp: str,
    last_frozen: int,
    batch: SplitBatch,
    edit: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
) -> Iterator[Callable[[torch.Tensor | None], torch.Tensor]]:
    """Like ``frozen_below``, and also the tokens before each row's cut at every layer.

    ``edit`` changes layer ``last_frozen``'s output at the cut tokens only (a vector at
    the subject's last token), so what comes before the cut never changes: its keys and
    values at every layer are computed once, and each pass inside the block runs only
    the tokens from the cut on, through the layers above ``last_frozen``. The block
    gets a function that runs that pass on some rows of the batch (all when None) and
    returns their last hidden states, (rows, tokens from the cut); ``edit`` gets that
    layer's output of those rows and the rows. Rows never see each other, so a row's
    result does not depend on which others run with it. Only for layers whose weights
    do not change inside the block.
    """
    stored: dict[str, object] = {}

    def keep(_module: nn.Module, _args: tuple, output: object) -> None:
        stored["output"] = output

    # plain layers for every model: a sliding-window layer would drop the prefix
    cache = DynamicCache()
    handle = get_module(model, layer_tmp.format(last_frozen)).register_forward_hook(
        keep
    )
    try:
        with torch.no_grad():
            model.base_model(
                input_ids=batch.ids,
                attention_mask=batch.mask,
                position_ids=batch.positions,
                cache=cache,
                use_cache=True,
            )
    finally:
        handle.remove()
    prefix = _prefix_of(cache, batch.width)
    as_tuple = isinstance(stored["output"], tuple)
    after = first_tensor(stored["output"])[:, batch.width :].detach()

    replay = _Replay(after, as_tuple, edit)

    def run(rows: torch.Tensor | None = None) -> torch.Tensor:
        every = slice(None) if rows is None else rows
        _restore(cache, [(keys[every], values[every]) for keys, values in prefix])
        replay.rows = rows
        return model.base_model(
            input_ids=batch.ids[every, batch.width :],
            attention_mask=batch.mask[every],
            position_ids=batch.positions[every, batch.width :],
            cache=cache,
            use_cache=True,
        ).last_hidden_state

    with _replaced_below(model, layer_tmp, last_frozen, replay):
        yield run


def _prefix_of(cache: DynamicCache, width: int) -> list[tuple[torch.Tensor, ...]]:
    """Every layer's keys and values of the first ``width`` tokens, detached."""
    return [
        (layer.keys[..., :width, :].detach(), layer.values[..., :width, :].detach())
        for layer in cache.layers
    ]


def _restore(cache: DynamicCache, prefix: list[tuple[torch.Tensor, ...]]) -> None:
    """Every layer back to the stored prefix (a pass appends the tokens it ran; its
    graph must not reach the next pass)."""
    for layer, (keys, values) in zip(cache.layers, prefix, strict=True):
        layer.keys, layer.values = keys, values


@contextmanager
def _replaced_below(
    model: nn.Module, layer_tmp: str, last_frozen: int, replay: _Replay
) -> Iterator[None]:
    """Layers below ``last_frozen`` pass their input through, which ``replay``
    replaces; the layers come back on exit."""
    originals = []
    for index in range(last_frozen + 1):
        parent_path, _, child = layer_tmp.format(index).rpartition(".")
        parent = get_module(model, parent_path)
        originals.append((parent, child, getattr(parent, child)))
        stub = replay if index == last_frozen else _Passthrough(replay.as_tuple)
        setattr(parent, child, stub)
    try:
        yield
    finally:
        for parent, child, module in originals:
            setattr(parent, child, module)


def logits_at(
    model: nn.Module, batch: Batch, rows: torch.Tensor, cols: torch.Tensor
) -> torch.Tensor:
    """Logits at positions (rows, cols) only: the output head skips every other position."""
    hidden = model.base_model(
        input_ids=batch.ids,
        attention_mask=batch.mask,
        position_ids=batch.positions,
        use_cache=False,
    ).last_hidden_state
    return model.get_output_embeddings()(hidden[rows, cols]).float()
