"""Side memories at a module's output (WISE): trained copies of the module's weight, and
the routing that answers each row from the original weight or from one copy.

A side memory holds shards, each a full copy of the module's weight with a threshold
(the smallest mean activation distance its edits reached, times ``act_ratio``). A
forward computes the module's output with the original weight and with each shard's
copy (the module's bias kept), and measures each copy's distance from the original as
WISE does: ‖act(copy's output) − act(original output)‖ per token, ``act`` the model's
hidden activation, averaged over the row's kept tokens (their maximum past 100
tokens). Then, per row and in WISE-Retrieve's order:
    - the shard being trained (``CURRENT``) answers when its distance reaches its
      threshold; its distance, reached or not, is the one to beat;
    - each saved shard (``SAVED``), in order, answers instead when its distance beats
      the best so far and its own threshold.
Rows nobody claims keep the original output.

Every forward routes on its own tokens: a prompt on the prompt's, an answer that
continues the prompt's cache on the answer's, a decoded token on its own, as WISE's
adapter does. (EasyEdit routes a batch as one, on the mean over its rows and over
padding; kebench routes each row on the tokens its attention mask keeps:
``docs/editing.md``.)

Several side memories applied at one module merge by shard id, in the order applied: a
sequential stream's deltas each hold the shards their edit trained or merged, a later
copy replacing an earlier one of the same id, and a ``RETIRED`` entry removing the
shard of its id (WISE's merge folds saved shards into one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional
from transformers.activations import ACT2FN

from kebench.editing.module_hooks import (
    Forward,
    by_token,
    latest_by_id,
    weight_is_transposed,
)

FIELDS = ("ids", "weights", "thresholds", "roles")
SAVED, CURRENT, RETIRED = 0, 1, 2
# Past this many tokens a row's distance is its largest token's, not the mean (WISE's).
LONG_ROW = 100


@dataclass
class SideMemory:
    """Shards of one module's side memory, row i of each tensor being shard i.

    Attributes:
        ids: (n,) int64, a shard's identity across the deltas of a stream.
        weights: (n, *weight shape) float32, each shard's copy of the module's weight.
        thresholds: (n,) float32, the distance below which a shard does not answer.
        roles: (n,) int64, ``SAVED``, ``CURRENT`` or ``RETIRED`` (module docstring).
        activation: the model's hidden activation (its config's name), which the
            distance is measured after.
    """

    ids: torch.Tensor
    weights: torch.Tensor
    thresholds: torch.Tensor
    roles: torch.Tensor
    activation: str

    def __post_init__(self) -> None:
        n = self.ids.shape[0]
        shapes = {name: tuple(t.shape) for name, t in self.tensors().items()}
        if any(t.shape[0] != n for t in self.tensors().values()) or not (
            self.weights.dim() == 3  # noqa: PLR2004 - shards of matrices
            and self.ids.dim() == self.thresholds.dim() == self.roles.dim() == 1
        ):
            raise ValueError(f"a side memory's shards disagree in shape: {shapes}")
        if self.activation not in ACT2FN:
            raise ValueError(f"a side memory's activation {self.activation!r} unknown")
        if ((self.roles < SAVED) | (self.roles > RETIRED)).any():
            raise ValueError(f"a side memory's roles {self.roles.tolist()} unknown")

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in FIELDS}

    def header(self) -> str:
        """What a file stores besides the tensors."""
        return json.dumps({"activation": self.activation})

    @classmethod
    def from_file(cls, tensors: dict[str, torch.Tensor], header: str) -> SideMemory:
        return cls(**tensors, activation=json.loads(header)["activation"])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def is_finite(self) -> bool:
        return bool(torch.isfinite(self.weights).all()) and bool(
            torch.isfinite(self.thresholds).all()
        )

    def to(self, device: torch.device) -> SideMemory:
        return self.with_tensors({k: t.to(device) for k, t in self.tensors().items()})

    def with_tensors(self, tensors: dict[str, torch.Tensor]) -> SideMemory:
        return SideMemory(**tensors, activation=self.activation)

    def select(self, rows: Sequence[int]) -> SideMemory:
        index = torch.tensor(list(rows), dtype=torch.long, device=self.ids.device)
        return self.with_tensors({k: t[index] for k, t in self.tensors().items()})

    @classmethod
    def merged(cls, memories: Sequence[SideMemory]) -> SideMemory:
        """One side memory of ``memories`` in order (module docstring)."""
        if len({m.activation for m in memories}) > 1:
            raise ValueError("side memories at one module disagree on the activation")
        first = memories[0]
        whole = first.with_tensors(
            {k: torch.cat([getattr(m, k) for m in memories]) for k in FIELDS}
        )
        whole = whole.select(latest_by_id(whole.ids.tolist()))
        return whole.select(
            [row for row, role in enumerate(whole.roles.tolist()) if role != RETIRED]
        )

    def shard(self, role: int) -> list[int]:
        return [row for row, r in enumerate(self.roles.tolist()) if r == role]

    def output(
        self, module: nn.Module, inputs: tuple, output: torch.Tensor, forward: Forward
    ) -> torch.Tensor | None:
        """The module's output, each row answered as the module docstring says."""
        current, saved = self.shard(CURRENT), self.shard(SAVED)
        if not current and not saved:
            return None
        rows = forward.kept.shape[0] if forward.kept is not None else inputs[0].shape[0]
        x, original = by_token(inputs[0], rows), by_token(output, rows)
        kept = forward.kept
        if kept is None or kept.shape[:2] != original.shape[:2]:
            kept = torch.ones(original.shape[:2], dtype=torch.bool)
        kept = kept.to(output.device)
        activation = ACT2FN[self.activation]
        reference = activation(original)
        routed = original.clone()
        best = torch.zeros(rows, device=output.device)
        for row in current + saved:
            answer = side_output(module, x, self.weights[row])
            distance = row_distance(reference, activation(answer), kept)
            if row in current:
                claims = distance >= self.thresholds[row]
            else:
                claims = (distance > self.thresholds[row]) & (distance > best)
            routed[claims] = answer[claims].to(output.dtype)
            best = torch.where(claims | (row in current), distance, best)
        return routed.reshape(output.shape)


def side_output(
    module: nn.Module, x: torch.Tensor, weight: torch.Tensor
) -> torch.Tensor:
    """The module's output on ``x`` with ``weight`` in place of its own (bias kept)."""
    weight = weight.to(device=x.device, dtype=x.dtype)
    bias = getattr(module, "bias", None)
    if weight_is_transposed(module):
        flat = x.reshape(-1, x.shape[-1]) @ weight
        flat = flat if bias is None else flat + bias
        return flat.reshape(*x.shape[:-1], weight.shape[1])
    return functional.linear(x, weight, bias)


def row_distance(
    reference: torch.Tensor, other: torch.Tensor, kept: torch.Tensor
) -> torch.Tensor:
    """Per row, ‖other − reference‖ per token averaged over the kept tokens, or its
    largest kept token's past ``LONG_ROW`` of them; (rows,) float32."""
    per_token = torch.linalg.vector_norm((other - reference).float(), dim=-1)
    counts = kept.sum(dim=1)
    mean = (per_token * kept).sum(dim=1) / counts.clamp(min=1)
    largest = per_token.masked_fill(~kept, 0).amax(dim=1)
    return torch.where(counts > LONG_ROW, largest, mean)
