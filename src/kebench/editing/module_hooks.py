"""Hooks that change a module's output without touching a weight: the plumbing shared by
GRACE's codebooks (``kebench.editing.codebook``) and WISE's side memories
(``kebench.editing.sidememory``).

A hooked kind is a dataclass with ``merged`` (several applied at one module, in the
order applied), ``to`` (a device) and ``output`` (the module's new output, or None to
keep it). A forward pre-hook on the model records what those rules read about the
current forward (``Forward``): which rows' query positions it holds, and which of its
tokens the attention mask keeps.

A row's query position is the last token of a forward that starts its sequence (no
cache, or an empty one): the last token its attention mask keeps, with padding on
either side. That is the prompt's last token wherever kebench reads a prompt: the
scorer runs each prompt before its answers' tokens, which continue its cache, and
generation's prefill runs the prompt before the decoded tokens continue it. A forward
that continues a cache has no query positions.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn


class Hooked(Protocol):
    """What one delta puts at a module's output."""

    def to(self, device: torch.device) -> Any: ...

    def output(
        self, module: nn.Module, inputs: tuple, output: torch.Tensor, forward: Forward
    ) -> torch.Tensor | None: ...


@dataclass
class Forward:
    """The current forward of a model: each row's query position (None when it
    continues a cache) and the (rows, tokens) mask of its own tokens kept by the
    attention mask (None: every token)."""

    rows: torch.Tensor | None = None
    kept: torch.Tensor | None = None


@dataclass
class _ModelHooks:
    """The hooks of one model: its current forward, and per module what is applied."""

    tracker: torch.utils.hooks.RemovableHandle
    forward: Forward = field(default_factory=Forward)
    suspended: int = 0
    layers: dict[str, _LayerHooks] = field(default_factory=dict)


@dataclass
class _LayerHooks:
    handle: torch.utils.hooks.RemovableHandle
    applied: list[Any] = field(default_factory=list)
    active: Any = None


_HOOKS: weakref.WeakKeyDictionary[nn.Module, _ModelHooks] = weakref.WeakKeyDictionary()


def module_dims(module: nn.Module) -> tuple[int, int]:
    """(d_in, d_out) of a Linear or GPT-2 Conv1D module."""
    weight = getattr(module, "weight", None)
    if weight is None or weight.dim() != 2:  # noqa: PLR2004 - a matrix
        raise ValueError(f"{type(module).__name__} has no weight matrix")
    d_out, d_in = weight.shape
    return (d_out, d_in) if weight_is_transposed(module) else (d_in, d_out)


def weight_is_transposed(module: nn.Module) -> bool:
    """True for GPT-2's Conv1D, whose weight is (in_features, out_features)."""
    return type(module).__name__ == "Conv1D"


def by_token(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """A module's input or output as (rows, tokens, features): some architectures
    (OPT) run their MLP on the rows' tokens flattened to (rows · tokens, features)."""
    return tensor.reshape(rows, -1, tensor.shape[-1])


def latest_by_id(ids: list[int]) -> list[int]:
    """The rows that merging items in order keeps: per id its last row, in the place of
    its first."""
    row_of: dict[int, int] = {}
    for row, entry in enumerate(ids):
        row_of[entry] = row  # dicts keep the first insertion's place
    return list(row_of.values())


def _ids(kwargs: dict, args: tuple) -> torch.Tensor:
    ids = kwargs.get("input_ids", args[0] if args else None)
    return kwargs["inputs_embeds"] if ids is None else ids


def _own_mask(kwargs: dict, args: tuple) -> torch.Tensor | None:
    """The attention mask's columns of the forward's own tokens, or None."""
    mask = kwargs.get("attention_mask")
    if mask is None or mask.dim() != 2:  # noqa: PLR2004 - a (rows, tokens) mask
        return None
    return mask[:, -_ids(kwargs, args).shape[1] :]


def query_rows(kwargs: dict, args: tuple) -> torch.Tensor | None:
    """Each row's query position in a forward called with ``args``, ``kwargs``; None
    when the forward continues a cache (module docstring)."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is not None and cache.get_seq_length() > 0:
        return None
    ids = _ids(kwargs, args)
    width = ids.shape[1]
    mask = _own_mask(kwargs, args)
    if mask is None:
        return torch.full((ids.shape[0],), width - 1, device=ids.device)
    # the last kept column: the first in the reversed mask
    return width - 1 - mask.flip(1).int().argmax(dim=1)


def kept_tokens(kwargs: dict, args: tuple) -> torch.Tensor | None:
    """The (rows, tokens) bool mask of the forward's own tokens that its attention mask
    keeps; None when it has no 2-d mask (every token counts)."""
    mask = _own_mask(kwargs, args)
    return None if mask is None else mask.bool()


def attach(model: nn.Module, path: str, item: Hooked) -> Any:
    """Apply ``item`` at the module ``path`` of ``model`` (after any applied there);
    the applied copy, on the module's device, which ``detach`` takes."""
    module = model.get_submodule(path)
    state = _HOOKS.get(model)
    if state is None:

        def track(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            _HOOKS[model].forward = Forward(
                query_rows(kwargs, args), kept_tokens(kwargs, args)
            )

        handle = model.register_forward_pre_hook(track, with_kwargs=True)
        state = _HOOKS[model] = _ModelHooks(handle)
    layer = state.layers.get(path)
    if layer is None:

        def replace(module: nn.Module, args: tuple, output: torch.Tensor):
            active = state.layers[path].active
            if state.suspended:
                return None
            return active.output(module, args, output, state.forward)

        layer = state.layers[path] = _LayerHooks(module.register_forward_hook(replace))
    elif type(layer.active) is not type(item):
        raise ValueError(
            f"{path} already holds a {type(layer.active).__name__}; a "
            f"{type(item).__name__} cannot be applied there too"
        )
    applied = item.to(module.weight.device)
    layer.applied.append(applied)
    layer.active = type(item).merged(layer.applied)
    return applied


def detach(model: nn.Module, path: str, applied: Hooked) -> None:
    """Take ``applied`` (what ``attach`` returned) off again; the hooks go with the
    model's last applied item."""
    state = _HOOKS[model]
    layer = state.layers[path]
    layer.applied = [a for a in layer.applied if a is not applied]
    layer.active = type(applied).merged(layer.applied) if layer.applied else None
    if not layer.applied:
        layer.handle.remove()
        del state.layers[path]
    if not state.layers:
        state.tracker.remove()
        del _HOOKS[model]


def active(model: nn.Module, path: str) -> Any:
    """What is now applied at ``path`` (every applied item merged), or None."""
    state = _HOOKS.get(model)
    layer = state.layers.get(path) if state else None
    return layer.active if layer else None


@contextmanager
def suspended(model: nn.Module) -> Iterator[None]:
    """The model's hooked modules pass every output unchanged inside the block."""
    state = _HOOKS.get(model)
    if state is None:
        yield
        return
    state.suspended += 1
    try:
        yield
    finally:
        state.suspended -= 1
