"""Weight deltas in their smallest exact form, stored as safetensors, applied and reverted.

A delta maps parameter names to changes of one of three kinds:
    low_rank: ``W += left @ right.T`` (ROME: rank one, ``left`` and ``right`` are u, v;
        MEMIT: rank = number of edits per layer);
    index: ``W.index_add_(dim, index, values)`` (KN: a few neurons' slices);
    dense: ``W += values`` (FT: the whole matrix).
An edit that changes no weights has no parameters but a text ``prefix`` (IKE),
key-value ``codebooks`` at modules' outputs (GRACE, ``kebench.editing.codebook``) or
``side_memories`` routed at modules' outputs (WISE, ``kebench.editing.sidememory``) or
a ``memory`` of edited facts as sentences, which the scorer retrieves from (MeLLo,
``kebench.scoring.mello``). A
method whose later edits of a sequential stream depend on this one keeps what they
need in ``state`` (AlphaEdit: the keys it wrote, which later edits must preserve).

Applying a delta backs up only the slices it touches, in memory; reverting copies them
back, so the base weights come back bit for bit. Files are never pickles.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from kebench.atomic import atomic_path
from kebench.editing.codebook import FIELDS, Codebook
from kebench.editing.module_hooks import attach, detach, module_dims
from kebench.editing.sidememory import FIELDS as SIDE_FIELDS
from kebench.editing.sidememory import SideMemory

KINDS = {
    "low_rank": ("left", "right"),
    "index": ("index", "values"),
    "dense": ("values",),
}
FORMAT = "kebench-delta/1"
# A delta with codebooks: a reader that knows only /1 would apply it as no change, so it
# refuses the file instead.
FORMAT_CODEBOOKS = "kebench-delta/2"
# The tensor-name prefix of a delta's state in its file (no parameter name starts so).
STATE = "state:"
# A delta with side memories, which a /2 reader would apply as no change.
FORMAT_SIDE_MEMORIES = "kebench-delta/3"
# A delta with a text memory, which a /3 reader would apply as no change.
FORMAT_MEMORY = "kebench-delta/4"
FORMATS = (FORMAT, FORMAT_CODEBOOKS, FORMAT_SIDE_MEMORIES, FORMAT_MEMORY)
# The tensor-name prefix of a codebook's entries in its file.
CODEBOOK = "codebook:"
# The tensor-name prefix of a side memory's shards in its file.
SIDE_MEMORY = "sidememory:"


@dataclass
class ParamDelta:
    """The change of one parameter; ``dim`` is the indexed dimension of an ``index`` change."""

    kind: str
    tensors: dict[str, torch.Tensor]
    dim: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"unknown delta kind {self.kind!r}; known: {sorted(KINDS)}"
            )
        if set(self.tensors) != set(KINDS[self.kind]):
            raise ValueError(
                f"a {self.kind} delta needs tensors {KINDS[self.kind]}, got {sorted(self.tensors)}"
            )

    def full(self, like: torch.Tensor) -> torch.Tensor:
        """The change as a tensor of the parameter's shape and dtype."""
        if self.kind == "low_rank":
            change = self.tensors["left"] @ self.tensors["right"].T
        elif self.kind == "dense":
            change = self.tensors["values"]
        else:
            change = torch.zeros(like.shape, dtype=self.tensors["values"].dtype)
            change = change.to(like.device).index_add_(
                self.dim, self.tensors["index"].to(like.device), self.tensors["values"]
            )
        return change.to(device=like.device, dtype=like.dtype)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def mismatch(self, param: torch.Tensor) -> str | None:
        """Why this change cannot be added to ``param``, or None when it fits."""
        shape = tuple(param.shape)
        if self.kind == "low_rank":
            left, right = self.tensors["left"], self.tensors["right"]
            got = (left.shape[0], right.shape[0])
            if left.dim() != right.dim() or left.shape[1:] != right.shape[1:]:
                return f"low-rank factors {tuple(left.shape)}, {tuple(right.shape)}"
        elif self.kind == "dense":
            got = tuple(self.tensors["values"].shape)
        else:
            values, index = self.tensors["values"], self.tensors["index"]
            if self.dim is None or not 0 <= self.dim < len(shape):
                return f"indexed dimension {self.dim} of a {len(shape)}-d parameter"
            if index.numel() and int(index.max()) >= shape[self.dim]:
                return f"index {int(index.max())} past size {shape[self.dim]}"
            got = tuple(
                n if axis != self.dim else shape[axis]
                for axis, n in enumerate(values.shape)
            )
        return None if got == shape else f"a change of shape {got}"


@dataclass
class Delta:
    """One edit's (or one batch's) change to a model.

    Attributes:
        params: parameter name -> its change.
        prefix: text put before every prompt (in-context editing); empty otherwise.
        codebooks: module path -> the codebook entries applied at its output.
        side_memories: module path -> the side memory routed at its output.
        memory: edited facts as sentences, retrieved at scoring time (MeLLo); the
            scorer's settings for them are in ``meta["mello"]``.
        meta: free-form strings stored in the file header (method, case ids...).
        state: tensors that change no weight, which later edits of a sequential
            stream read (``EditContext.earlier``); stored with the delta.
        origin: the file it was read from, to name it in errors (not stored).
    """

    params: dict[str, ParamDelta] = field(default_factory=dict)
    prefix: str = ""
    codebooks: dict[str, Codebook] = field(default_factory=dict)
    side_memories: dict[str, SideMemory] = field(default_factory=dict)
    memory: list[str] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    origin: str = field(default="", compare=False)

    @property
    def changes_forward(self) -> bool:
        """Whether applying it changes a forward pass over a text: weights, hooks or a
        prefix. A memory alone changes only what MeLLo's loop retrieves."""
        return bool(self.params or self.prefix or self.codebooks or self.side_memories)

    def label(self) -> str:
        """How errors name this delta: its file, else its method and cases."""
        return self.origin or json.dumps(self.meta, sort_keys=True)

    def check_fits(self, model: torch.nn.Module) -> None:
        """Raise a ValueError naming this delta when it does not fit ``model``."""
        for name, change in self.params.items():
            try:
                param = model.get_parameter(name)
            except AttributeError:
                raise ValueError(
                    f"delta {self.label()}: the model has no parameter {name!r}"
                ) from None
            problem = change.mismatch(param)
            if problem:
                raise ValueError(
                    f"delta {self.label()} does not fit {name} of shape "
                    f"{tuple(param.shape)}: {problem}"
                )
        for path, book in self.codebooks.items():
            try:
                dims = module_dims(model.get_submodule(path))
            except (AttributeError, ValueError) as err:
                raise ValueError(
                    f"delta {self.label()}: no codebook fits module {path!r}: {err}"
                ) from None
            got = (book.keys.shape[1], book.values.shape[1])
            if got != dims:
                raise ValueError(
                    f"delta {self.label()}: a codebook of (key, value) sizes {got} "
                    f"does not fit {path}, whose (input, output) sizes are {dims}"
                )
        for path, memory in self.side_memories.items():
            try:
                shape = tuple(model.get_submodule(path).weight.shape)
            except AttributeError as err:
                raise ValueError(
                    f"delta {self.label()}: no side memory fits module {path!r}: {err}"
                ) from None
            if tuple(memory.weights.shape[1:]) != shape:
                raise ValueError(
                    f"delta {self.label()}: side weights of shape "
                    f"{tuple(memory.weights.shape[1:])} do not fit {path}, whose "
                    f"weight is {shape}"
                )

    def nbytes(self) -> int:
        """The bytes of its tensors, the state's included (what its file holds)."""
        return (
            sum(p.nbytes() for p in self.params.values())
            + sum(b.nbytes() for b in self.codebooks.values())
            + sum(m.nbytes() for m in self.side_memories.values())
            + sum(t.numel() * t.element_size() for t in self.state.values())
        )

    def describe(self, model: torch.nn.Module) -> dict[str, list]:
        """Parameter names, shapes and the Frobenius norm of each full change."""
        names = sorted(self.params)
        shapes, norms = [], []
        for name in names:
            param = model.get_parameter(name)
            shapes.append(list(param.shape))
            norms.append(float(self.params[name].full(param).double().norm()))
        return {"param_names": names, "shapes": shapes, "norms": norms}

    def is_finite(self) -> bool:
        return all(
            torch.isfinite(t).all()
            for p in self.params.values()
            for key, t in p.tensors.items()
            if key != "index"
        ) and all(
            b.is_finite()
            for b in [*self.codebooks.values(), *self.side_memories.values()]
        )


def save_delta(delta: Delta, path: str | Path) -> None:
    """Write ``delta`` to a safetensors file, atomically."""
    tensors = {
        f"{name}/{key}": tensor.detach().to("cpu").contiguous()
        for name, change in delta.params.items()
        for key, tensor in change.tensors.items()
    }
    tensors.update(
        {
            f"{STATE}/{key}": t.detach().to("cpu").contiguous()
            for key, t in delta.state.items()
        }
    )
    tensors.update(
        {
            f"{CODEBOOK}{path}/{key}": t.detach().to("cpu").contiguous()
            for path, book in delta.codebooks.items()
            for key, t in book.tensors().items()
        }
    )
    tensors.update(
        {
            f"{SIDE_MEMORY}{path}/{key}": t.detach().to("cpu").contiguous()
            for path, memory in delta.side_memories.items()
            for key, t in memory.tensors().items()
        }
    )
    header = {
        "format": FORMAT_MEMORY
        if delta.memory
        else FORMAT_SIDE_MEMORIES
        if delta.side_memories
        else FORMAT_CODEBOOKS
        if delta.codebooks
        else FORMAT,
        "params": json.dumps(
            {name: {"kind": c.kind, "dim": c.dim} for name, c in delta.params.items()}
        ),
        "prefix": delta.prefix,
        "memory": json.dumps(delta.memory),
        "meta": json.dumps(delta.meta, sort_keys=True),
        "state": json.dumps(sorted(delta.state)),
        "codebooks": json.dumps(sorted(delta.codebooks)),
        "side_memories": json.dumps(
            {path: m.header() for path, m in sorted(delta.side_memories.items())}
        ),
    }
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata=header)


def load_delta(path: str | Path) -> Delta:
    """Read a delta written by ``save_delta``."""
    with safe_open(str(path), framework="pt") as handle:
        header = handle.metadata() or {}
        if header.get("format") not in FORMATS:
            raise ValueError(
                f"{path} is not a kebench delta (format {header.get('format')!r})"
            )
        specs = json.loads(header["params"])
        params = {
            name: ParamDelta(
                kind=spec["kind"],
                tensors={
                    key: handle.get_tensor(f"{name}/{key}")
                    for key in KINDS[spec["kind"]]
                },
                dim=spec["dim"],
            )
            for name, spec in specs.items()
        }
        # files written before deltas had a state have no "state" entry
        state = {
            key: handle.get_tensor(f"{STATE}/{key}")
            for key in json.loads(header.get("state", "[]"))
        }
        try:
            codebooks = {
                module: Codebook(
                    **{k: handle.get_tensor(f"{CODEBOOK}{module}/{k}") for k in FIELDS}
                )
                for module in json.loads(header.get("codebooks", "[]"))
            }
            side_memories = {
                module: SideMemory.from_file(
                    {
                        k: handle.get_tensor(f"{SIDE_MEMORY}{module}/{k}")
                        for k in SIDE_FIELDS
                    },
                    described,
                )
                for module, described in json.loads(
                    header.get("side_memories", "{}")
                ).items()
            }
        except (ValueError, KeyError) as err:
            raise ValueError(f"{path}: {err}") from err
    return Delta(
        params=params,
        prefix=header["prefix"],
        codebooks=codebooks,
        memory=_memory(header, path),
        side_memories=side_memories,
        meta=json.loads(header["meta"]),
        state=state,
        origin=str(path),
    )


def _memory(header: dict[str, str], path: str | Path) -> list[str]:
    """The header's memory sentences (files before format 4 have none)."""
    memory = json.loads(header.get("memory", "[]"))
    if not isinstance(memory, list) or not all(isinstance(m, str) for m in memory):
        raise ValueError(f"{path}: its memory is not a list of sentences")
    return memory


@dataclass
class Applied:
    """What ``apply_delta`` overwrote: the original values of the touched slices, and
    the codebooks and side memories it attached (module path, the attached copy)."""

    backups: list[tuple[str, ParamDelta, torch.Tensor]]
    hooked: list[tuple[str, Codebook | SideMemory]] = field(default_factory=list)


@torch.no_grad()
def apply_delta(model: torch.nn.Module, delta: Delta) -> Applied:
    """Add ``delta`` to the model's weights in place; keep what is needed to revert.

    A delta that does not fit the model is refused before any weight changes.
    """
    delta.check_fits(model)
    backups = []
    for name, change in delta.params.items():
        param = model.get_parameter(name)
        if change.kind == "index":
            index = change.tensors["index"].to(param.device)
            backups.append(
                (name, change, param.index_select(change.dim, index).clone())
            )
            values = change.tensors["values"].to(device=param.device, dtype=param.dtype)
            param.index_add_(change.dim, index, values)
        else:
            backups.append((name, change, param.detach().clone()))
            param.add_(change.full(param))
    hooked = [
        (path, attach(model, path, item))
        for path, item in [*delta.codebooks.items(), *delta.side_memories.items()]
    ]
    return Applied(backups, hooked)


@torch.no_grad()
def revert_delta(model: torch.nn.Module, applied: Applied) -> None:
    """Restore the values ``apply_delta`` overwrote, bit for bit, in reverse order,
    and take its codebooks and side memories off."""
    for path, item in reversed(applied.hooked):
        detach(model, path, item)
    for name, change, original in reversed(applied.backups):
        param = model.get_parameter(name)
        if change.kind == "index":
            param.index_copy_(
                change.dim, change.tensors["index"].to(param.device), original
            )
        else:
            param.copy_(original)


@contextmanager
def delta_applied(model: torch.nn.Module, delta: Delta) -> Iterator[None]:
    """The model with ``delta`` applied inside the block, restored exactly after it."""
    applied = apply_delta(model, delta)
    try:
        yield
    finally:
        revert_delta(model, applied)


@dataclass(frozen=True)
class Agreement:
    """How far apart two weight changes a and b are: the cosine of their ΔW and the
    norm ratio ‖a‖ / ‖b‖ (Frobenius), over every parameter either changes, with both
    norms (nan where a norm is zero)."""

    cosine: float
    norm_ratio: float
    norm_a: float
    norm_b: float

    @classmethod
    def of(cls, dot: float, a_sq: float, b_sq: float) -> Agreement:
        denominator = math.sqrt(a_sq * b_sq)
        return cls(
            cosine=dot / denominator if denominator else math.nan,
            norm_ratio=math.sqrt(a_sq / b_sq) if b_sq else math.nan,
            norm_a=math.sqrt(a_sq),
            norm_b=math.sqrt(b_sq),
        )


def agreement(
    model: torch.nn.Module, a: Delta, b: Delta
) -> tuple[Agreement, dict[str, Agreement]]:
    """The agreement of ``a`` and ``b`` over all parameters, and per parameter (in
    float64; a parameter only one of them changes counts as zero change in the other).
    Codebooks count as their keys and values, entry by entry (``<module>/codebook``),
    and side memories as each shard's change of the module's weight
    (``<module>/side_memory``); different numbers of entries or shards cannot agree
    (nan)."""
    dot = a_sq = b_sq = 0.0
    per_param = {}
    for name in sorted(set(a.params) | set(b.params)):
        param = model.get_parameter(name)
        x, y = (
            d.params[name].full(param).double()
            if name in d.params
            else torch.zeros(param.shape, dtype=torch.double, device=param.device)
            for d in (a, b)
        )
        per_param[name] = _sums(x, y)
    hooked = [
        (f"{path}/codebook", _entries(a, path), _entries(b, path))
        for path in sorted(set(a.codebooks) | set(b.codebooks))
    ] + [
        (f"{path}/side_memory", _shards(model, a, path), _shards(model, b, path))
        for path in sorted(set(a.side_memories) | set(b.side_memories))
    ]
    for name, x, y in hooked:
        per_param[name] = _sums(*_aligned(x, y))
    for sums in per_param.values():
        dot, a_sq, b_sq = dot + sums.dot, a_sq + sums.a_sq, b_sq + sums.b_sq
    return Agreement.of(dot, a_sq, b_sq), {
        name: Agreement.of(s.dot, s.a_sq, s.b_sq) for name, s in per_param.items()
    }


def _entries(delta: Delta, path: str) -> torch.Tensor | None:
    """The keys and values of ``delta``'s codebook at ``path``, flat (None: it has none)."""
    book = delta.codebooks.get(path)
    if book is None:
        return None
    return torch.cat([book.keys, book.values], dim=1).double().flatten()


def _aligned(
    x: torch.Tensor | None, y: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Entries one delta lacks count as zeros; entries of other sizes cannot agree."""
    x = torch.zeros_like(y) if x is None else x
    y = torch.zeros_like(x) if y is None else y
    if x.shape != y.shape:
        x = y = torch.full((1,), math.nan, dtype=torch.double)
    return x, y


def _shards(model: torch.nn.Module, delta: Delta, path: str) -> torch.Tensor | None:
    """Each shard of ``delta``'s side memory at ``path`` minus the module's weight,
    flat (None: it has none)."""
    memory = delta.side_memories.get(path)
    if memory is None:
        return None
    weight = model.get_submodule(path).weight.detach().double().cpu()
    return (memory.weights.double().cpu() - weight).flatten()


@dataclass(frozen=True)
class _Sums:
    dot: float
    a_sq: float
    b_sq: float


def _sums(x: torch.Tensor, y: torch.Tensor) -> _Sums:
    return _Sums(float((x * y).sum()), float(x.square().sum()), float(y.square().sum()))
