"""Exact AMIE 3 rule mining, vectorised over sparse relation matrices.

Every relation r is a sparse boolean matrix over entities, used in two orientations:
label ``2r`` is r itself (pairs (s, o)) and label ``2r + 1`` its inverse (pairs (o, s)).
With head ``r(?a, ?b)``, a body atom over {?a, ?b} is a label L meaning L(?a, ?b).
AMIE's rules up to three atoms are then:

* two atoms ``L => r``: support is the overlap of two pair sets;
* three atoms, type (i) ``L1, L2 => r``: the overlap of three pair sets;
* three atoms, path ``LX(?a, z), LY(z, ?b) => r``: the body is the boolean product
  A_LX · A_LY.

Supports of all path rules come from one pass over wedges a - z - b that close a head
fact (a, b), enumerated from the end with the smaller degree. Body and PCA body sizes
are row counts of the body matrix summed over the rows that are subjects (or objects)
of the head relation. A product row with a single join entity needs no product at all
(its count is the degree of that entity), so sparse products run only for the rows
that join through several entities, once per distinct join set, in bounded chunks.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from kebench.rules.amie_format import format_rule_text, java_order_key, sorted_body
from kebench.rules.kb import KnowledgeBase, RuleMiningError
from kebench.rules.model import (
    FRESH_AS_OBJECT,
    FRESH_AS_SUBJECT,
    HEAD_OBJECT,
    HEAD_SUBJECT,
    Atom,
    Rule,
)

logger = logging.getLogger(__name__)

# Bounds on the size of intermediate arrays (entries), to keep memory flat.
_WEDGE_CHUNK = 1 << 22
_ENTRY_CHUNK = 1 << 23
_PRODUCT_CHUNK = 1 << 24
_THREE_ATOMS = 3
_MIN_DEPTH = 2
_AMIE_OPTIONS = ("mins", "minhc", "minis", "minc", "minpca", "maxad", "rl")


@dataclass(frozen=True)
class MiningParams:
    """AMIE 3's mining parameters; the defaults are those of ``-mins 1``.

    Attributes:
        min_support: ``-mins``, support threshold of the support pruning metric.
        pruning_metric: ``support`` (``-mins``) or ``head_coverage`` (``-minhc``).
        min_head_coverage: ``-minhc``; a rule of head r needs support of at least
            ceil(min_head_coverage * |r|) under the head-coverage metric.
        min_initial_support: ``-minis``, the minimum number of facts of a head relation.
        min_std_confidence: ``-minc``, standard confidence threshold.
        min_pca_confidence: ``-minpca``, PCA confidence threshold (inclusive).
        max_depth: ``-maxad``, most atoms in a rule, head included. The built-in
            miner supports 2 and 3; AMIE's jar backend also longer rules.
        recursivity_limit: ``-rl``, most occurrences of a body relation in a rule.
        skyline: output a type (i) rule only if it beats its parents' PCA confidence.
        perfect_rule_pruning: do not extend a rule whose PCA confidence is 1.
    """

    min_support: int = 1
    pruning_metric: Literal["support", "head_coverage"] = "support"
    min_head_coverage: float = 0.01
    min_initial_support: int = 1
    min_std_confidence: float = 0.0
    min_pca_confidence: float = 0.1
    max_depth: int = 3
    recursivity_limit: int = 3
    skyline: bool = True
    perfect_rule_pruning: bool = True

    def __post_init__(self) -> None:
        if self.max_depth < _MIN_DEPTH:
            raise ValueError(
                f"max_depth (-maxad) must be at least 2, got {self.max_depth}"
            )
        if self.pruning_metric not in ("support", "head_coverage"):
            raise ValueError(f"unknown pruning metric {self.pruning_metric!r}")

    @classmethod
    def from_amie_options(cls, **options: float | None) -> MiningParams:
        """Parameters as AMIE's command line sets them from its options.

        Args:
            **options: AMIE option names without the dash (mins, minhc, minis, minc,
                minpca, maxad, rl); None or absent means not given.

        As in AMIE, ``-mins`` alone selects the support metric (and the minimum head
        size defaults to mins); otherwise head coverage is the metric (threshold 0.01
        and minimum head size 100 unless given).
        """
        unknown = set(options) - set(_AMIE_OPTIONS)
        if unknown:
            raise ValueError(f"unknown AMIE option(s): {sorted(unknown)}")
        given = {name: value for name, value in options.items() if value is not None}
        support_metric = "mins" in given and "minhc" not in given
        default_head_size = given.get("mins", 1) if support_metric else 100
        return cls(
            min_support=int(given.get("mins", 100)),
            pruning_metric="support" if support_metric else "head_coverage",
            min_head_coverage=float(given.get("minhc", 0.01)),
            min_initial_support=int(given.get("minis", default_head_size)),
            min_std_confidence=float(given.get("minc", 0.0)),
            min_pca_confidence=float(given.get("minpca", 0.1)),
            max_depth=int(given.get("maxad", _THREE_ATOMS)),
            recursivity_limit=int(given.get("rl", 3)),
        )

    def support_thresholds(self, head_sizes: np.ndarray) -> np.ndarray:
        """The support a rule needs, per head relation (never below 1)."""
        if self.pruning_metric == "support":
            thresholds = np.full(len(head_sizes), float(self.min_support))
        else:
            thresholds = np.array(
                [
                    math.ceil(self.min_head_coverage * float(size))
                    for size in head_sizes
                ],
                dtype=float,
            )
        return np.maximum(thresholds, 1.0)


def _expand_ranges(
    starts: np.ndarray, stops: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For ranges [start, stop): the range index and the position of every member."""
    counts = stops - starts
    owners = np.repeat(np.arange(len(starts)), counts)
    run_starts = np.cumsum(counts) - counts
    positions = np.arange(len(owners)) - np.repeat(run_starts - starts, counts)
    return owners, positions


def _chunks(weights: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive [lo, hi) slices whose summed weight stays near ``limit``."""
    ends = np.cumsum(weights)
    bounds = [0]
    while bounds[-1] < len(weights):
        done = ends[bounds[-1] - 1] if bounds[-1] else 0
        bounds.append(
            max(int(np.searchsorted(ends, done + limit, "right")), bounds[-1] + 1)
        )
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _pairs_within_groups(
    group_starts: np.ndarray, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j), i < j, of members of the same group of a grouped array."""
    sizes = np.diff(np.append(group_starts, length))
    position = np.arange(length) - np.repeat(group_starts, sizes)
    partners = np.repeat(sizes, sizes) - position - 1
    first = np.repeat(np.arange(length), partners)
    offsets = np.arange(len(first)) - np.repeat(
        np.cumsum(partners) - partners, partners
    )
    return first, first + 1 + offsets


def _group_starts(*keys: np.ndarray) -> np.ndarray:
    """Start index of each run of equal consecutive key tuples."""
    change = np.zeros(len(keys[0]), dtype=bool)
    change[:1] = True
    for key in keys:
        change[1:] |= key[1:] != key[:-1]
    return np.flatnonzero(change)


def _mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a well-spread 64-bit hash of each value."""
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


def _first_equal_row(matrix: sp.csr_matrix) -> np.ndarray:
    """For each row of a CSR matrix with sorted indices, the first row equal to it.

    Rows are grouped by length and two 64-bit hashes of their indices, then each row is
    compared entry by entry with its group's first row, so the result is exact.
    """
    lengths = np.diff(matrix.indptr)
    rows = np.arange(len(lengths))
    hashes = [
        np.add.reduceat(
            _mix64(matrix.indices.astype(np.uint64) + np.uint64(seed)),
            matrix.indptr[:-1],
        )
        for seed in (0x9E3779B97F4A7C15, 0xD1B54A32D192ED03)
    ]
    order = np.lexsort((rows, *hashes, lengths))
    starts = _group_starts(lengths[order], *(h[order] for h in hashes))
    first = np.empty(len(rows), dtype=np.int64)
    first[order] = np.repeat(order[starts], np.diff(np.append(starts, len(order))))
    owners, positions = _expand_ranges(matrix.indptr[:-1], matrix.indptr[1:])
    offsets = positions - matrix.indptr[owners]
    differs = (
        matrix.indices[positions]
        != matrix.indices[matrix.indptr[first[owners]] + offsets]
    )
    first[np.unique(owners[differs])] = rows[np.unique(owners[differs])]
    return first


class _RowSums:
    """Body sizes and masked row sums, accumulated over batches of bodies."""

    def __init__(self, index: _SparseKB, n_bodies: int) -> None:
        self.index, self.n_bodies = index, n_bodies
        self.body_sizes = np.zeros(n_bodies, dtype=np.int64)
        self.parts: dict[str, list[sp.coo_matrix]] = {
            side: [] for side in index.members
        }

    def add(self, bodies: np.ndarray, rows: np.ndarray, counts: np.ndarray) -> None:
        """Add the row counts of some bodies (each body in one batch only)."""
        self.body_sizes += np.bincount(
            bodies, weights=counts, minlength=self.n_bodies
        ).astype(np.int64)
        for side, parts in self.parts.items():
            parts.append(
                self.index.masked_row_sums(
                    bodies, rows, counts, self.n_bodies, side
                ).tocoo()
            )

    def matrices(self) -> dict[str, sp.csr_matrix]:
        """Per side, the body x relation matrix of summed row counts."""
        return {
            side: sp.csr_matrix(
                (
                    np.concatenate(
                        [part.data for part in parts] + [np.zeros(0, np.int64)]
                    ),
                    (
                        np.concatenate(
                            [part.row for part in parts] + [np.zeros(0, np.int64)]
                        ),
                        np.concatenate(
                            [part.col for part in parts] + [np.zeros(0, np.int64)]
                        ),
                    ),
                ),
                shape=(self.n_bodies, self.index.relation_count),
            )
            for side, parts in self.parts.items()
        }


class _SparseKB:
    """Indexes of a KnowledgeBase for the counting queries of the miner."""

    def __init__(self, kb: KnowledgeBase) -> None:
        n = self.n = kb.entity_count
        self.relation_count = len(kb.relation_names)
        self.label_count = 2 * self.relation_count
        self.subjects, self.relations, self.objects = (
            kb.subjects,
            kb.relations,
            kb.objects,
        )
        self.head_sizes = np.bincount(kb.relations, minlength=self.relation_count)
        x = np.concatenate([kb.subjects, kb.objects])
        y = np.concatenate([kb.objects, kb.subjects])
        labels = np.concatenate([2 * kb.relations, 2 * kb.relations + 1])

        # Label-major order: each label's matrix as rows of (x -> y).
        order = np.lexsort((y, x, labels))
        self.label_x, self.label_y = x[order], y[order]
        sorted_labels = labels[order]
        self.label_offsets = np.searchsorted(
            sorted_labels, np.arange(self.label_count + 1)
        )
        row_starts = _group_starts(sorted_labels, self.label_x)
        self.row_labels = sorted_labels[row_starts]
        self.row_entities = self.label_x[row_starts]
        self.row_offsets = np.append(row_starts, len(order))
        self.row_degrees = np.diff(self.row_offsets)
        self.label_row_offsets = np.searchsorted(
            self.row_labels, np.arange(self.label_count + 1)
        )
        # All label matrices stacked: row (label, x) holds the y with label(x, y).
        self.stacked = sp.csr_matrix(
            (np.ones(len(order), dtype=bool), self.label_y, self.row_offsets),
            shape=(len(row_starts), n),
        )

        # Pair-major order: the labels of each entity pair, and each entity's adjacency.
        order = np.lexsort((labels, y, x))
        self.pair_x, self.pair_y, self.pair_labels = x[order], y[order], labels[order]
        pair_starts = _group_starts(self.pair_x, self.pair_y)
        self.pair_directory = self.pair_x[pair_starts] * n + self.pair_y[pair_starts]
        self.pair_offsets = np.append(pair_starts, len(order))
        self.adjacency_offsets = np.append(
            0, np.cumsum(np.bincount(self.pair_x, minlength=n))
        )

        # The rows of label 2r are the subjects of r, those of label 2r + 1 its objects.
        self.members = {
            side: self._membership(self.row_labels % 2 == parity)
            for side, parity in (("subject", 0), ("object", 1))
        }
        rows_per_label = np.bincount(self.row_labels, minlength=self.label_count)
        self.subject_counts, self.object_counts = (
            rows_per_label[0::2],
            rows_per_label[1::2],
        )

    def _membership(self, rows: np.ndarray) -> sp.csr_matrix:
        """Entity x relation 0/1 matrix from the label rows selected by a mask."""
        return sp.csr_matrix(
            (
                np.ones(int(rows.sum()), dtype=np.int64),
                (self.row_entities[rows], self.row_labels[rows] // 2),
            ),
            shape=(self.n, self.relation_count),
        )

    def pair_labels_of(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For pair keys x * n + y: (index of the key, label L with L(x, y)) per match."""
        # Sorted queries make the binary searches cache-friendly (several times faster).
        order = np.argsort(keys)
        found = np.minimum(
            np.searchsorted(self.pair_directory, keys[order]),
            len(self.pair_directory) - 1,
        )
        hit = self.pair_directory[found] == keys[order]
        lo = np.zeros(len(keys), dtype=np.int64)
        hi = np.zeros(len(keys), dtype=np.int64)
        lo[order[hit]] = self.pair_offsets[found[hit]]
        hi[order[hit]] = self.pair_offsets[found[hit] + 1]
        owners, positions = _expand_ranges(lo, hi)
        return owners, self.pair_labels[positions]

    def masked_row_sums(
        self,
        bodies: np.ndarray,
        rows: np.ndarray,
        counts: np.ndarray,
        n_bodies: int,
        side: str,
    ) -> sp.csr_matrix:
        """Per body and relation r: its row counts summed over the subjects (or objects) of r."""
        matrix = sp.csr_matrix((counts, (bodies, rows)), shape=(n_bodies, self.n))
        return matrix @ self.members[side]

    def intersection_row_sums(
        self, combos: np.ndarray
    ) -> tuple[np.ndarray, sp.csr_matrix, sp.csr_matrix]:
        """Body sizes and row sums of label intersections L1 ∩ L2 (combo L1 * nl + L2).

        Returns the sizes, the sums of ?a-rows over subjects of each relation and the
        sums of ?b-columns over its objects.
        """
        first, second = _pairs_within_groups(
            self.pair_offsets[:-1], len(self.pair_labels)
        )
        keys = self.pair_labels[first] * self.label_count + self.pair_labels[second]
        body = np.searchsorted(combos, keys)
        hit = body < len(combos)
        hit[hit] = combos[body[hit]] == keys[hit]
        body, pair = body[hit], first[hit]
        x, y = self.pair_x[pair], self.pair_y[pair]
        ones = np.ones(len(body), dtype=np.int64)
        return (
            np.bincount(body, minlength=len(combos)),
            self.masked_row_sums(body, x, ones, len(combos), "subject"),
            self.masked_row_sums(body, y, ones, len(combos), "object"),
        )

    def product_row_sums(
        self, first_labels: np.ndarray, second_labels: np.ndarray
    ) -> tuple[np.ndarray, dict[str, sp.csr_matrix]]:
        """Body sizes and masked row sums (both sides) of the products A_L1 · A_L2."""
        sums = _RowSums(self, len(first_labels))
        pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        pending_entries = 0
        join_row = np.full(self.n, -1, dtype=np.int64)
        by_second = np.argsort(second_labels, kind="stable")
        groups = np.split(by_second, _group_starts(second_labels[by_second])[1:])
        for group in groups if len(by_second) else []:
            # Entities that have a row in A_L2, mapped to that row of `stacked`.
            rows = self.row_range(second_labels[group[0]])
            join_row[self.row_entities[rows]] = np.arange(rows.start, rows.stop)
            firsts = first_labels[group]
            sizes = self.label_offsets[firsts + 1] - self.label_offsets[firsts]
            for lo, hi in _chunks(sizes, _ENTRY_CHUNK):
                owners, positions = _expand_ranges(
                    self.label_offsets[firsts[lo:hi]],
                    self.label_offsets[firsts[lo:hi] + 1],
                )
                joined = join_row[self.label_y[positions]]
                valid = joined >= 0
                owners = group[lo:hi][owners[valid]]
                pending.append((owners, self.label_x[positions[valid]], joined[valid]))
                pending_entries += len(owners)
                # Many small products go through one batch, to pay numpy's and
                # scipy's per-call costs once.
                if pending_entries >= _ENTRY_CHUNK:
                    sums.add(*self._product_rows(pending))
                    pending, pending_entries = [], 0
            join_row[self.row_entities[rows]] = -1
        if pending:
            sums.add(*self._product_rows(pending))
        return sums.body_sizes, sums.matrices()

    def row_range(self, label: int) -> slice:
        """The rows of `stacked` that belong to one label."""
        return slice(self.label_row_offsets[label], self.label_row_offsets[label + 1])

    def _product_rows(
        self, pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Nonzero rows of products from their joined entries (body, x, row of A_L2).

        Each body's entries are contiguous and sorted by x. Returns, per product row:
        the body, the row entity x, its count of distinct columns.
        """
        bodies, x, joined = (
            np.concatenate(column) for column in zip(*pending, strict=True)
        )
        starts = _group_starts(bodies, x)
        sizes = np.diff(np.append(starts, len(bodies)))
        counts = np.zeros(len(starts), dtype=np.int64)
        single = sizes == 1
        counts[single] = self.row_degrees[joined[starts[single]]]
        multi = ~single
        if multi.any():
            entries = np.repeat(multi, sizes)
            left = sp.csr_matrix(
                (
                    np.ones(int(entries.sum()), dtype=bool),
                    joined[entries],
                    np.append(0, np.cumsum(sizes[multi])),
                ),
                shape=(int(multi.sum()), self.stacked.shape[0]),
            )
            counts[multi] = self._product_row_nnz(left)
        return bodies[starts], x[starts], counts

    def _product_row_nnz(self, left: sp.csr_matrix) -> np.ndarray:
        """Nonzeros per row of left · stacked, computed in chunks of bounded size.

        Equal rows of left (entities with the same join set, as with type-like
        relations) have equal products, so each distinct row is multiplied once.
        """
        representative = _first_equal_row(left)
        distinct = np.flatnonzero(representative == np.arange(left.shape[0]))
        left = left[distinct]
        work = np.add.reduceat(self.row_degrees[left.indices], left.indptr[:-1])
        nnz = np.zeros(left.shape[0], dtype=np.int64)
        for lo, hi in _chunks(work, _PRODUCT_CHUNK):
            nnz[lo:hi] = np.diff((left[lo:hi] @ self.stacked).indptr)
        return nnz[np.searchsorted(distinct, representative)]

    def path_supports(
        self, facts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Supports of all path rules LX(?a, z), LY(z, ?b) => r(?a, ?b) over the facts.

        Returns (head relation, LX, LY, support) for every combination with support.
        """
        degrees = np.diff(self.adjacency_offsets)
        a, b = self.subjects[facts], self.objects[facts]
        from_subject = degrees[a] <= degrees[b]
        nl = self.label_count
        keys: list[np.ndarray] = []
        supports: list[np.ndarray] = []
        for side in (True, False):
            chosen = facts[from_subject == side]
            pivot = self.subjects[chosen] if side else self.objects[chosen]
            for lo, hi in _chunks(degrees[pivot], _WEDGE_CHUNK):
                # A fact lies in one chunk, so per-chunk supports add up.
                chunk_keys, chunk_supports = np.unique(
                    self._wedge_keys(chosen[lo:hi], pivot_is_subject=side),
                    return_counts=True,
                )
                keys.append(chunk_keys)
                supports.append(chunk_supports)
        all_keys, where = np.unique(
            np.concatenate([*keys, np.zeros(0, np.int64)]), return_inverse=True
        )
        totals = np.bincount(
            where, weights=np.concatenate([*supports, np.zeros(0, np.int64)])
        ).astype(np.int64)
        head, labels = np.divmod(all_keys, nl * nl)
        first, second = np.divmod(labels, nl)
        return head, first, second, totals

    def _wedge_keys(self, facts: np.ndarray, pivot_is_subject: bool) -> np.ndarray:
        """Distinct (fact, LX, LY) of the wedges closing the facts, as head-rule keys."""
        a, b = self.subjects[facts], self.objects[facts]
        pivot = a if pivot_is_subject else b
        owners, positions = _expand_ranges(
            self.adjacency_offsets[pivot], self.adjacency_offsets[pivot + 1]
        )
        z = self.pair_y[positions]
        pivot_labels = self.pair_labels[positions]
        if pivot_is_subject:
            wedge, other_labels = self.pair_labels_of(z * self.n + b[owners])
            first, second = pivot_labels[wedge], other_labels
        else:
            wedge, other_labels = self.pair_labels_of(a[owners] * self.n + z)
            # pivot label L(b, z) is the atom L^-1(z, b)
            first, second = other_labels, pivot_labels[wedge] ^ 1
        nl = self.label_count
        fact_keys = np.unique((facts[owners[wedge]] * nl + first) * nl + second)
        fact, labels = np.divmod(fact_keys, nl * nl)
        return self.relations[fact] * nl * nl + labels


def _label_atom(label: int, relation_names: tuple[str, ...]) -> Atom:
    """The atom over the head variables for a label: L(?a, ?b)."""
    relation = relation_names[label // 2]
    return (
        (HEAD_SUBJECT, relation, HEAD_OBJECT)
        if label % 2 == 0
        else (
            HEAD_OBJECT,
            relation,
            HEAD_SUBJECT,
        )
    )


def _path_atoms(
    first: int, second: int, relation_names: tuple[str, ...]
) -> tuple[Atom, Atom]:
    """Atoms LX(?a, z), LY(z, ?b), naming z as AMIE does.

    AMIE reaches the rule first from its dangling atom that was created with the fresh
    variable as object, if there is one; the variable keeps that name.
    """
    fresh = FRESH_AS_OBJECT if first % 2 == 0 or second % 2 == 1 else FRESH_AS_SUBJECT
    x_relation, y_relation = relation_names[first // 2], relation_names[second // 2]
    x_atom = (
        (HEAD_SUBJECT, x_relation, fresh)
        if first % 2 == 0
        else (
            fresh,
            x_relation,
            HEAD_SUBJECT,
        )
    )
    y_atom = (
        (fresh, y_relation, HEAD_OBJECT)
        if second % 2 == 0
        else (
            HEAD_OBJECT,
            y_relation,
            fresh,
        )
    )
    return x_atom, y_atom


@dataclass
class _Candidates:
    """Rules of one shape that reach the support threshold, with their counts."""

    head: np.ndarray
    labels: tuple[np.ndarray, ...]
    support: np.ndarray
    body_size: np.ndarray
    pca_body_size: np.ndarray
    is_path: bool = False

    def confidences(self) -> tuple[np.ndarray, np.ndarray]:
        """Standard and PCA confidence, as IEEE doubles like AMIE's."""
        support = self.support.astype(float)
        return support / self.body_size, support / self.pca_body_size

    def subset(self, keep: np.ndarray) -> _Candidates:
        """Only the candidates where keep is true."""
        return _Candidates(
            self.head[keep],
            tuple(labels[keep] for labels in self.labels),
            self.support[keep],
            self.body_size[keep],
            self.pca_body_size[keep],
            self.is_path,
        )


class _Miner:
    """One mining run: candidate rules of each shape, then AMIE's output filter."""

    def __init__(self, kb: KnowledgeBase, params: MiningParams) -> None:
        self.kb, self.params = kb, params
        self.index = index = _SparseKB(kb)
        self.thresholds = params.support_thresholds(index.head_sizes)
        self.functional_subject = index.subject_counts >= index.object_counts
        is_head = index.head_sizes >= params.min_initial_support
        self.head_facts = np.flatnonzero(is_head[kb.relations])

    def _recursion_ok(self, head: np.ndarray, *labels: np.ndarray) -> np.ndarray:
        """True where no body relation occurs more than recursivity_limit times."""
        relations = [head, *(label // 2 for label in labels)]
        ok = np.ones(len(head), dtype=bool)
        for body_relation in relations[1:]:
            occurrences = sum(
                (relation == body_relation).astype(int) for relation in relations
            )
            ok &= occurrences <= self.params.recursivity_limit
        return ok

    def _pca_body_sizes(
        self,
        head: np.ndarray,
        subject_rows: np.ndarray,
        subject_sums: sp.csr_matrix,
        object_rows: np.ndarray,
        object_sums: sp.csr_matrix,
    ) -> np.ndarray:
        """PCA body size per rule: row sums over subjects or objects of the head."""
        result = np.zeros(len(head), dtype=np.int64)
        subject = self.functional_subject[head]
        for rows, sums, chosen in (
            (subject_rows, subject_sums, subject),
            (object_rows, object_sums, ~subject),
        ):
            if chosen.any():
                result[chosen] = np.asarray(sums[rows[chosen], head[chosen]]).ravel()
        return result

    def _reaching_support(
        self, head: np.ndarray, supports: np.ndarray, *labels: np.ndarray
    ):
        """Mask of rules with enough support and within the recursivity limit."""
        return (supports >= self.thresholds[head]) & self._recursion_ok(head, *labels)

    def two_atom_candidates(self) -> tuple[_Candidates, np.ndarray, np.ndarray]:
        """2-atom candidates, plus each head fact's pair labels (for type (i) rules)."""
        index, facts, nl = self.index, self.head_facts, self.index.label_count
        owners, labels = index.pair_labels_of(
            index.subjects[facts] * index.n + index.objects[facts]
        )
        # The atom equal to the head is never added.
        not_head = labels != 2 * index.relations[facts[owners]]
        fact_of_label, labels = facts[owners[not_head]], labels[not_head]
        keys, supports = np.unique(
            index.relations[fact_of_label] * nl + labels, return_counts=True
        )
        head, label = np.divmod(keys, nl)
        keep = self._reaching_support(head, supports, label)
        head, label, supports = head[keep], label[keep], supports[keep]
        rows = (index.row_labels, index.row_entities, index.row_degrees, nl)
        candidates = _Candidates(
            head,
            (label,),
            supports,
            index.head_sizes[label // 2],
            self._pca_body_sizes(
                head,
                label,
                index.masked_row_sums(*rows, "subject"),
                label ^ 1,  # the ?b-columns of L are the rows of its inverse
                index.masked_row_sums(*rows, "object"),
            ),
        )
        return candidates, fact_of_label, labels

    def type_one_candidates(
        self, fact_of_label: np.ndarray, labels: np.ndarray
    ) -> _Candidates:
        """Type (i) candidates L1(?a, ?b), L2(?a, ?b) => r, from each head fact's labels."""
        index, nl = self.index, self.index.label_count
        first, second = _pairs_within_groups(_group_starts(fact_of_label), len(labels))
        keys, supports = np.unique(
            (index.relations[fact_of_label[first]] * nl + labels[first]) * nl
            + labels[second],
            return_counts=True,
        )
        head, combo = np.divmod(keys, nl * nl)
        keep = self._reaching_support(head, supports, combo // nl, combo % nl)
        head, combo, supports = head[keep], combo[keep], supports[keep]
        combos = np.unique(combo)
        sizes, subject_sums, object_sums = index.intersection_row_sums(combos)
        body = np.searchsorted(combos, combo)
        pca = self._pca_body_sizes(head, body, subject_sums, body, object_sums)
        return _Candidates(head, (combo // nl, combo % nl), supports, sizes[body], pca)

    def path_candidates(self) -> _Candidates:
        """Path candidates LX(?a, z), LY(z, ?b) => r with their counts."""
        index, nl = self.index, self.index.label_count
        head, first, second, supports = index.path_supports(self.head_facts)
        keep = self._reaching_support(head, supports, first, second)
        head, first, second, supports = (
            v[keep] for v in (head, first, second, supports)
        )
        # With ?b functional, the PCA body counts rows of the transposed body
        # A_LY^-1 · A_LX^-1 (its rows are the ?b values).
        subject = self.functional_subject[head]
        body_keys = np.where(
            subject, first * nl + second, (second ^ 1) * nl + (first ^ 1)
        )
        keys = np.unique(body_keys)
        body = np.searchsorted(keys, body_keys)
        sizes, sums = index.product_row_sums(keys // nl, keys % nl)
        pca = self._pca_body_sizes(head, body, sums["subject"], body, sums["object"])
        return _Candidates(
            head, (first, second), supports, sizes[body], pca, is_path=True
        )

    def _passes(self, candidates: _Candidates) -> tuple[np.ndarray, np.ndarray]:
        """AMIE's output thresholds on confidences, and the PCA confidences."""
        std, pca = candidates.confidences()
        ok = (pca >= self.params.min_pca_confidence) & (
            std >= self.params.min_std_confidence
        )
        return ok, pca

    def _skyline_keep(
        self,
        two: _Candidates,
        two_ok: np.ndarray,
        two_pca: np.ndarray,
        one: _Candidates,
    ) -> np.ndarray:
        """Type (i) rules that AMIE reaches and that beat their 2-atom parents' PCA."""
        nl, pruning = self.index.label_count, self.params.perfect_rule_pruning
        _, one_pca = one.confidences()
        parent_keys = two.head * nl + two.labels[0]
        reachable = np.zeros(len(one.head), dtype=bool)
        beats_parents = np.ones(len(one.head), dtype=bool)
        for label in one.labels:
            parent = np.searchsorted(parent_keys, one.head * nl + label)
            refined = ~(pruning & (two_pca[parent] == 1.0))
            reachable |= refined
            # AMIE compares a rule with its output parents and with the parent it was
            # refined from; a perfect parent is never refined from.
            compared = two_ok[parent] | refined
            beats_parents &= ~compared | (one_pca > two_pca[parent])
        return reachable & (beats_parents | (not self.params.skyline))

    def rules(self) -> list[Rule]:
        """All output rules: 2-atom rules first, then 3-atom rules."""
        two, fact_of_label, labels = self.two_atom_candidates()
        two_ok, two_pca = self._passes(two)
        output = self._to_rules(two.subset(two_ok))
        if self.params.max_depth < _THREE_ATOMS:
            return output
        one = self.type_one_candidates(fact_of_label, labels)
        one_ok, _ = self._passes(one)
        one_keep = one_ok & self._skyline_keep(two, two_ok, two_pca, one)
        path = self.path_candidates()
        path_ok, _ = self._passes(path)
        return (
            output
            + self._to_rules(one.subset(one_keep))
            + self._to_rules(path.subset(path_ok))
        )

    def _to_rules(self, candidates: _Candidates) -> list[Rule]:
        """Rule values in a stable order (head relation, then rule text)."""
        names = self.kb.relation_names
        std, pca = candidates.confidences()
        rules = []
        for i, head in enumerate(candidates.head.tolist()):
            labels = [int(label[i]) for label in candidates.labels]
            if candidates.is_path:
                body = _path_atoms(labels[0], labels[1], names)
            else:
                body = tuple(_label_atom(label, names) for label in labels)
            support = int(candidates.support[i])
            rules.append(
                Rule(
                    body=sorted_body(body),
                    head=(HEAD_SUBJECT, names[head], HEAD_OBJECT),
                    head_coverage=support / float(self.index.head_sizes[head]),
                    std_confidence=float(std[i]),
                    pca_confidence=float(pca[i]),
                    support=support,
                    body_size=int(candidates.body_size[i]),
                    pca_body_size=int(candidates.pca_body_size[i]),
                    functional_variable=(
                        HEAD_SUBJECT if self.functional_subject[head] else HEAD_OBJECT
                    ),
                )
            )
        return sorted(
            rules,
            key=lambda rule: (
                java_order_key(rule.head[1]),
                format_rule_text(rule.body, rule.head),
            ),
        )


def mine_rules(kb: KnowledgeBase, params: MiningParams | None = None) -> list[Rule]:
    """Mine AMIE 3's rules from a knowledge base.

    Args:
        kb: the facts.
        params: AMIE's parameters; the default is AMIE's ``-mins 1``.

    Returns:
        The rules AMIE outputs, 2-atom rules first; an empty list (with a warning)
        when no rule reaches the thresholds.

    Raises:
        RuleMiningError: if the knowledge base has no fact.
        ValueError: if params.max_depth is above 3.
    """
    params = params or MiningParams()
    if params.max_depth > _THREE_ATOMS:
        raise ValueError(
            f"the built-in miner mines rules of at most {_THREE_ATOMS} atoms "
            f"(-maxad {params.max_depth} asked); use AMIE's jar backend for longer rules"
        )
    if kb.size == 0:
        raise RuleMiningError(f"{kb.source}: the knowledge base has no fact")
    rules = _Miner(kb, params).rules()
    if not rules:
        logger.warning(
            "%s: no rule reaches the mining thresholds %s", kb.source, params
        )
    return rules
