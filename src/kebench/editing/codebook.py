"""Key-value codebooks at a module's output (GRACE): their entries, and the hooks that
put them on a model and take them off again without touching a weight.

An entry is (id, key, value, radius, label). When a forward pass reads a row whose
query (the module's input at the row's query position) lies within ``radius`` of its
nearest key (Euclidean distance in float32, as GRACE measures it), the module's output
at that position becomes that key's value; other positions and rows pass unchanged.

The query position is the last token of a forward that starts its sequence, which is
the prompt's last token wherever kebench reads a prompt (``kebench.editing.module_hooks``,
which applies codebooks); a forward that continues a cache reads no query. (EasyEdit's
GRACE adapter instead keeps the position of the last edit's prompt for every later
input; ``docs/editing.md``.)

Several codebooks can be applied at one module: a sequential stream's deltas each
hold the entries their edit made or changed. The active codebook merges them in the
order they were applied, a later entry replacing an earlier one of the same id.
Reverting one removes its entries again, so apply and revert are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from kebench.editing.module_hooks import Forward, by_token, latest_by_id

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
        return cls(**fields).select(latest_by_id(fields["ids"].tolist()))

    def nearest(self, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each query's distance to its nearest key, and that key's row."""
        distances = torch.cdist(self.keys.float(), queries.float(), p=2)
        return distances.min(dim=0)

    def output(
        self, _module: nn.Module, inputs: tuple, output: torch.Tensor, forward: Forward
    ) -> torch.Tensor | None:
        """The module's output with each matching row's query position replaced."""
        if forward.rows is None or not len(self):
            return None
        positions = forward.rows.to(output.device)
        rows = torch.arange(positions.shape[0], device=output.device)
        queries = by_token(inputs[0], len(rows))[rows, positions]
        distance, nearest = self.nearest(queries)
        hit = distance <= self.radii[nearest]
        replaced = by_token(output, len(rows)).clone()
        replaced[rows[hit], positions[hit]] = self.values[nearest[hit]].to(output.dtype)
        return replaced.reshape(output.shape)
