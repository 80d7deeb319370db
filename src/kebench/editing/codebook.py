"""Key-value codebooks at a module's output (GRACE): their entries, and the hooks that
put them on a model and take them off again without touching a weight.

An entry is (id, key, value, radius, label). When a forward pass reads a row whose
query (the module's input at the row's query position) lies within ``radius`` of its
nearest key (Euclidean distance in float32, as GRACE measures it), the module's output
at that position becomes that key's value; other positions and rows pass unchanged.

A row's query position is the last token of a forward that starts its sequence (no
cache, or an empty one): the last token its attention mask keeps, with padding on
either side. That is the prompt's last token wherever kebench reads a prompt: the
scorer runs each prompt before its answers' tokens, which continue its cache, and
generation's prefill runs the prompt before the decoded tokens continue it. A forward
that continues a cache reads no query. (EasyEdit's GRACE adapter instead keeps the
position of the last edit's prompt for every later input; ``docs/editing.md``.)

Several codebooks can be applied at one module: a sequential stream's deltas each
hold the entries their edit made or changed. The active codebook merges them in the
order they were applied, a later entry replacing an earlier one of the same id.
Reverting one removes its entries again, so apply and revert are exact.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

FIELDS = ("ids", "keys", "values", "radii", "labels")


@dataclass
class Codebook:
    """Entries of one module's codebook, row i of each tensor being entry i.

    Attributes:
        ids: (n,) int64, an entry's identity across the deltas of a stream.
        keys: (n, d_in) float32, inputs of the module that the entry matches.
        values: (n, d_out) float32, the module's output where it matches.
        radii: (n,) float32, how far from its key a query still matches.
        labels: (n,) int64, the identity of the answer the entry was trained for
            (an entry's radius grows for a query of the same label and splits for
            another, GRACE's conflict rule).
    """

    ids: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    radii: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self) -> None:
        n = self.ids.shape[0]
        shapes = {name: tuple(t.shape) for name, t in self.tensors().items()}
        if any(t.shape[0] != n for t in self.tensors().values()) or not (
            self.keys.dim() == self.values.dim() == 2  # noqa: PLR2004 - matrices
            and self.ids.dim() == self.radii.dim() == self.labels.dim() == 1
        ):
            raise ValueError(f"a codebook's entries disagree in shape: {shapes}")

    @classmethod
    def empty(cls, d_in: int, d_out: int) -> Codebook:
        return cls(
            ids=torch.zeros(0, dtype=torch.long),
            keys=torch.zeros(0, d_in),
            values=torch.zeros(0, d_out),
            radii=torch.zeros(0),
            labels=torch.zeros(0, dtype=torch.long),
        )

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in FIELDS}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def is_finite(self) -> bool:
        return all(
            torch.isfinite(t).all() for t in (self.keys, self.values, self.radii)
        )

    def to(self, device: torch.device) -> Codebook:
        return Codebook(**{k: t.to(device) for k, t in self.tensors().items()})

    def select(self, rows: Sequence[int]) -> Codebook:
        index = torch.tensor(list(rows), dtype=torch.long, device=self.ids.device)
        return Codebook(**{k: t[index] for k, t in self.tensors().items()})

    def changed_since(self, before: Codebook) -> Codebook:
        """The entries of this codebook that ``before`` (its first rows, in order)
        lacks or holds with another key, value or radius."""
        return self.select(
            [
                row
                for row in range(len(self))
                if row >= len(before)
                or not all(
                    torch.equal(getattr(self, k)[row], getattr(before, k)[row])
                    for k in ("keys", "values", "radii")
                )
            ]
        )

    @classmethod
    def merged(cls, books: Sequence[Codebook]) -> Codebook:
        """One codebook of ``books`` in order; a later entry replaces an earlier one
        with its id, in the earlier one's place."""
        if len(books) == 1:
            return books[0]
        fields = {name: torch.cat([getattr(b, name) for b in books]) for name in FIELDS}
        row_of: dict[int, int] = {}
        for row, entry in enumerate(fields["ids"].tolist()):
            row_of[entry] = row  # dicts keep the first insertion's place
        return cls(**fields).select(list(row_of.values()))

    def nearest(self, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each query's distance to its nearest key, and that key's row."""
        distances = torch.cdist(self.keys.float(), queries.float(), p=2)
        return distances.min(dim=0)


def module_dims(module: nn.Module) -> tuple[int, int]:
    """(d_in, d_out) of a Linear or GPT-2 Conv1D module."""
    weight = getattr(module, "weight", None)
    if weight is None or weight.dim() != 2:  # noqa: PLR2004 - a matrix
        raise ValueError(f"{type(module).__name__} has no weight matrix")
    d_out, d_in = weight.shape
    return (d_out, d_in) if type(module).__name__ == "Conv1D" else (d_in, d_out)


@dataclass
class _ModelHooks:
    """The codebook hooks of one model: the query positions of its current forward,
    and per module the codebooks applied there."""

    tracker: torch.utils.hooks.RemovableHandle
    rows: torch.Tensor | None = None
    suspended: int = 0
    layers: dict[str, _LayerHooks] = field(default_factory=dict)


@dataclass
class _LayerHooks:
    handle: torch.utils.hooks.RemovableHandle
    books: list[Codebook] = field(default_factory=list)
    active: Codebook | None = None


_HOOKS: weakref.WeakKeyDictionary[nn.Module, _ModelHooks] = weakref.WeakKeyDictionary()


def query_rows(kwargs: dict, args: tuple) -> torch.Tensor | None:
    """Each row's query position in a forward called with ``args``, ``kwargs``; None
    when the forward continues a cache (module docstring)."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is not None and cache.get_seq_length() > 0:
        return None
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        ids = kwargs["inputs_embeds"]
    mask = kwargs.get("attention_mask")
    width = ids.shape[1]
    if mask is None or mask.dim() != 2:  # noqa: PLR2004 - a (rows, tokens) mask
        return torch.full((ids.shape[0],), width - 1, device=ids.device)
    # the last kept column: the first in the reversed mask
    return width - 1 - mask[:, -width:].flip(1).int().argmax(dim=1)


def by_token(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """A module's input or output as (rows, tokens, features): some architectures
    (OPT) run their MLP on the rows' tokens flattened to (rows · tokens, features)."""
    return tensor.reshape(rows, -1, tensor.shape[-1])


def _replace(
    state: _ModelHooks, layer: _LayerHooks, inputs: tuple, output: torch.Tensor
) -> torch.Tensor | None:
    """The module's output with each matching row's query position replaced."""
    book = layer.active
    if state.suspended or state.rows is None or book is None or not len(book):
        return None
    positions = state.rows.to(output.device)
    rows = torch.arange(positions.shape[0], device=output.device)
    queries = by_token(inputs[0], len(rows))[rows, positions]
    distance, nearest = book.nearest(queries)
    hit = distance <= book.radii[nearest]
    replaced = by_token(output, len(rows)).clone()
    replaced[rows[hit], positions[hit]] = book.values[nearest[hit]].to(output.dtype)
    return replaced.reshape(output.shape)


def attach(model: nn.Module, path: str, book: Codebook) -> Codebook:
    """Apply ``book`` at the module ``path`` of ``model`` (after any applied there);
    the applied copy, on the module's device, which ``detach`` takes."""
    module = model.get_submodule(path)
    state = _HOOKS.get(model)
    if state is None:

        def track(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            _HOOKS[model].rows = query_rows(kwargs, args)

        handle = model.register_forward_pre_hook(track, with_kwargs=True)
        state = _HOOKS[model] = _ModelHooks(handle)
    layer = state.layers.get(path)
    if layer is None:

        def replace(_module: nn.Module, args: tuple, output: torch.Tensor):
            return _replace(state, state.layers[path], args, output)

        layer = state.layers[path] = _LayerHooks(module.register_forward_hook(replace))
    applied = book.to(module.weight.device)
    layer.books.append(applied)
    layer.active = Codebook.merged(layer.books)
    return applied


def detach(model: nn.Module, path: str, applied: Codebook) -> None:
    """Take ``applied`` (what ``attach`` returned) off again; the hooks go with the
    model's last codebook."""
    state = _HOOKS[model]
    layer = state.layers[path]
    layer.books = [b for b in layer.books if b is not applied]
    layer.active = Codebook.merged(layer.books) if layer.books else None
    if not layer.books:
        layer.handle.remove()
        del state.layers[path]
    if not state.layers:
        state.tracker.remove()
        del _HOOKS[model]


def active(model: nn.Module, path: str) -> Codebook | None:
    """The codebook now applied at ``path`` (every applied one merged), or None."""
    state = _HOOKS.get(model)
    layer = state.layers.get(path) if state else None
    return layer.active if layer else None


@contextmanager
def suspended(model: nn.Module) -> Iterator[None]:
    """The model's codebooks pass every output unchanged inside the block."""
    state = _HOOKS.get(model)
    if state is None:
        yield
        return
    state.suspended += 1
    try:
        yield
    finally:
        state.suspended -= 1
