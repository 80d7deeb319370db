"""Lifelong editing: one stream of sequential edits, measured at checkpoints.

A stream is the run's edits in table order (the dataset's direct probes, every risk),
topped up with another source's edits when the dataset holds fewer than asked. The
edits run in ``sequential`` mode through ``kebench.editing.runner.run_job``: each one
applies on top of those before it, its delta is stored as soon as it is made, and a
killed run replays the stored deltas and goes on. After the k-th edit of each
checkpoint k, the edited model is measured:

    retention    (prob) EditSucc of every edit so far, 1[P_k(o'|q) > P_0(o|q)] on its
                 direct probes, P_0 being the unedited model;
    consistency  (prob) the same indicator on the entailed probes of the edits so
                 far, less those whose fact another edit so far rewrites (the answer
                 they state no longer holds: ``evaluate.joint_drops``);
    locality     (argmax) the locality probes of the edits so far keep the unedited
                 model's argmax over their answer;
    perplexity, accuracy_<set>   general capability on the stealthiness pipeline's
                 general sets (``kebench.scoring.drift``);
    norm_growth  (weights) ||W_k - W_0||_F / ||W_0||_F over every weight the stream
                 has changed, and the largest ratio of one matrix.

Checkpoint 0 is the unedited model. A failed edit (a diverged delta) changes nothing,
counts among ``failed`` and stays in the measures (intention to treat). Each
checkpoint is one JSON file, written atomically and keyed by the fingerprint of every
edit before it and of what it measures: a rerun, killed or not, measures only what it
does not find, on the same weights (the stored deltas replayed in order), so its
results are those of an uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from kebench.atomic import atomic_path
from kebench.editing.delta import Delta
from kebench.editing.interface import EditContext
from kebench.editing.requests import EditRequest, requests_from_probes
from kebench.editing.runner import EditJob, fingerprint, run_job, unit_fingerprint
from kebench.editing.store import DeltaStore
from kebench.models.loading import LoadedModel
from kebench.models.logprobs import Batching, ContextOverflowError
from kebench.scoring.context import prompt_context
from kebench.scoring.drift import GeneralSets, measure_capability
from kebench.scoring.evaluate import (
    ScoringSettings,
    joint_drops,
    probe_score_rows,
    score_pass,
)
from kebench.scoring.metrics import (
    ENTAILED_SUBSETS,
    cluster_bootstrap_ci,
    probe_outcomes,
)

logger = logging.getLogger(__name__)

DEFAULT_CHECKPOINTS = (1, 10, 50, 100, 250, 500, 1000)
MODE = "sequential"
# measure -> the probes it is measured on, its protocol, and the outcome per probe
PROBE_MEASURES = {
    "retention": ("direct", "prob", "edit_succ"),
    # the headline's deductive probes only (ENTAILED_SUBSETS["deductive"]): issue 40
    # split the tiers, and named the measure anew rather than redefine "consistency"
    "consistency_deductive": ("entailed", "prob", "edit_succ"),
    "locality": ("locality", "argmax", "argmax_agree"),
}
# measures of the whole model, one value per checkpoint
MODEL_PROTOCOLS = {"perplexity": "ppl", "norm_growth": "weights"}
ACCURACY_PROTOCOL = "general"
OUTCOME_COLUMNS = [
    "method",
    "checkpoint",
    "probe_id",
    "case_id",
    "probe_type",
    "outcome",
]


@dataclass(frozen=True)
class LifelongSettings:
    """Where a stream is measured and how.

    Attributes:
        checkpoints: after how many edits; the stream's last edit is always one.
        batch_size: probes per forward pass.
        collapse_below: a method has collapsed at the first checkpoint whose retention
            is below this.
    """

    checkpoints: tuple[int, ...] = DEFAULT_CHECKPOINTS
    batch_size: int = 16
    collapse_below: float = 0.5

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LifelongSettings:
        """From ``parameters/lifelong.yml``; bad checkpoints are named."""
        raw = params["checkpoints"]
        try:
            checkpoints = tuple(sorted({int(c) for c in raw}))
        except (TypeError, ValueError):
            raise ValueError(
                f"lifelong.checkpoints: expected a list of edit counts, got {raw!r}"
            ) from None
        if not checkpoints or checkpoints[0] < 1:
            raise ValueError(
                f"lifelong.checkpoints: counts of edits, each at least 1; got {raw!r}"
            )
        return cls(
            checkpoints=checkpoints,
            batch_size=int(params["batch_size"]),
            collapse_below=float(params["collapse_below"]),
        )

    def schedule(self, n_edits: int) -> list[int]:
        """The checkpoints of a stream of ``n_edits``: those it reaches, and its end."""
        reached = [c for c in self.checkpoints if c <= n_edits]
        return reached if reached and reached[-1] == n_edits else [*reached, n_edits]


@dataclass(frozen=True)
class Stream:
    """The edits of a stream in order, and the probes measured on them.

    ``probes`` (indexed by probe_id) holds the direct, entailed and locality probes of
    the stream's cases, with ``position`` (1 for the first edit) and ``rewritten_at``:
    the first position of another edit that rewrites the probe's fact (0: none).
    """

    requests: tuple[EditRequest, ...]
    probes: pd.DataFrame

    @classmethod
    def of(cls, table: pd.DataFrame) -> Stream:
        """The stream of a ``lifelong_stream`` table."""
        direct = table[table["probe_type"] == "direct"].sort_values("position")
        return cls(
            tuple(requests_from_probes(direct.drop_duplicates("case_id"))),
            table.set_index("probe_id", drop=False),
        )

    def probes_at(self, done: int) -> pd.DataFrame:
        """The probes measured after ``done`` edits: those of the edits so far whose
        fact no other edit so far has rewritten."""
        probes = self.probes
        rewritten = (probes["rewritten_at"] > 0) & (probes["rewritten_at"] <= done)
        return probes[(probes["position"] <= done) & ~rewritten]

    def digest(self) -> str:
        columns = ["probe_id", "probe_type", "prompt", "answer_new", "answer_old"]
        return fingerprint(
            self.probes[[*columns, "position", "rewritten_at"]].to_numpy().tolist()
        )


def build_stream(
    probes: pd.DataFrame,
    rewritten: pd.DataFrame,
    n_edits: int,
    top_up: pd.DataFrame | None = None,
) -> Stream:
    """The first ``n_edits`` edits of ``probes`` (table order), then of ``top_up``.

    Args:
        probes: the run's probes table.
        rewritten: ``kebench.qa.probes.rewritten_facts`` of ``probes``.
        top_up: another source's probes (direct ones are its edits), read when
            ``probes`` holds fewer than ``n_edits`` edits.
    """
    if n_edits < 1:
        raise ValueError(
            f"lifelong.edits: a stream needs at least one edit, got {n_edits}"
        )
    parts = [probes]
    if top_up is not None and edit_count(probes) < n_edits:
        known = set(probes["case_id"])
        parts.append(top_up[~top_up["case_id"].isin(known)])
    every = pd.concat(parts, ignore_index=True)
    direct = every[every["probe_type"] == "direct"].drop_duplicates("case_id")
    requests = requests_from_probes(direct)[:n_edits]
    if not requests:
        raise ValueError("lifelong: the probes hold no edit (no direct probe)")
    if len(requests) < n_edits:
        logger.warning(
            "lifelong: %d edits asked, the stream has %d", n_edits, len(requests)
        )
    position = {r.case_id: i + 1 for i, r in enumerate(requests)}
    kinds = [kind for kind, _, _ in PROBE_MEASURES.values()]
    chosen = every[every["case_id"].isin(position) & every["probe_type"].isin(kinds)]
    entailed = chosen["probe_type"] == "entailed"
    deductive = ENTAILED_SUBSETS["deductive"](chosen).fillna(False).astype(bool)
    chosen = chosen[~entailed | deductive]
    edits = pd.DataFrame(
        {
            "model": "",
            "method": "stream",
            "mode": MODE,
            "case_id": list(position),
            "fingerprint": "",
        }
    )
    drops = joint_drops(edits, chosen, rewritten)
    first_rewriter = {
        row.probe_id: min(position[case] for case in row.rewritten_by.split())
        for row in drops.itertuples()
    }
    chosen = chosen.assign(
        position=chosen["case_id"].map(position),
        rewritten_at=chosen["probe_id"].map(first_rewriter).fillna(0).astype(int),
    )
    return Stream(tuple(requests), chosen.set_index("probe_id", drop=False))


def edit_count(probes: pd.DataFrame) -> int:
    """How many edits a probes table holds: its cases with a direct probe."""
    return probes.loc[probes["probe_type"] == "direct", "case_id"].nunique()


class WeightDrift:
    """How far a stream has moved the weights it changed: the sum of its changes per
    weight (float32, where the weight lives) and each weight's unedited norm, read
    when a delta first touches it."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._model = model
        self._change: dict[str, torch.Tensor] = {}
        self._base_norm: dict[str, float] = {}

    def track(self, delta: Delta) -> None:
        """Add ``delta``, which has just been applied to the model."""
        for name, change in delta.params.items():
            param = self._model.get_parameter(name).detach()
            full = change.full(param).float()
            if name not in self._change:
                self._base_norm[name] = float((param.float() - full).norm())
                self._change[name] = torch.zeros_like(full)
            self._change[name] += full

    def growth(self) -> tuple[float, float]:
        """||W_k - W_0|| / ||W_0|| over every changed weight, and the largest ratio of
        one weight (0 before any change)."""
        if not self._change:
            return 0.0, 0.0
        change = {name: float(c.norm()) for name, c in self._change.items()}
        total = np.sqrt(sum(v**2 for v in change.values()))
        base = np.sqrt(sum(v**2 for v in self._base_norm.values()))
        largest = max(change[name] / self._base_norm[name] for name in change)
        return float(total / base), float(largest)


class CheckpointStore:
    """The measured checkpoints of a method's stream: ``<root>/<METHOD>/checkpoint-
    <k>.json``, each with the key it was measured under."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, method: str, checkpoint: int) -> Path:
        return self.root / method / f"checkpoint-{checkpoint:05d}.json"

    def load(self, method: str, checkpoint: int, key: str) -> dict[str, Any] | None:
        """The stored checkpoint if it was measured under ``key``, else None."""
        path = self._path(method, checkpoint)
        if not path.is_file():
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
        return record if record.get("key") == key else None

    def unedited(self, method: str, key: str) -> dict[str, Any] | None:
        """Checkpoint 0 (the unedited model) measured under ``key``: the method's own,
        else another method's, whose measures are the same model's."""
        own = self.load(method, 0, key)
        if own is not None:
            return own
        for path in sorted(self.root.glob("*/checkpoint-00000.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            if record.get("key") == key:
                return {**record, "method": method}
        return None

    def save(self, record: dict[str, Any]) -> None:
        path = self._path(record["method"], record["checkpoint"])
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")


@dataclass
class _StreamState:
    """What a stream has done so far, for its next checkpoint."""

    drift: WeightDrift
    applied: list[Delta]
    failed: int = 0


def _measure(  # noqa: PLR0913 - one model state and what is measured on it
    lm: LoadedModel,
    done: int,
    state: _StreamState,
    *,
    stream: Stream,
    base: pd.DataFrame,
    sets: GeneralSets,
    settings: LifelongSettings,
) -> dict[str, Any]:
    """The measures of the model as it is after ``done`` edits (0: unedited)."""
    start = time.perf_counter()
    context = prompt_context(state.applied)
    chosen = stream.probes_at(done)
    outcomes: dict[str, list] = {c: [] for c in OUTCOME_COLUMNS[2:]}
    reason = None
    try:
        if not chosen.empty:
            scoring = ScoringSettings(batch_size=settings.batch_size)
            # before any edit, the model is the one the base scores measured
            edited = (
                base.loc[chosen.index]
                if done == 0
                else score_pass(lm, chosen, context, scoring)
            )
            rows = probe_outcomes(
                probe_score_rows(chosen, base, edited, lm.name, "stream")
            )
            column = {kind: out for kind, _, out in PROBE_MEASURES.values()}
            outcomes = {
                "probe_id": list(rows["probe_id"]),
                "case_id": list(rows["case_id"]),
                "probe_type": list(rows["probe_type"]),
                "outcome": [
                    _float(row[column[row["probe_type"]]])
                    for row in rows.to_dict("records")
                ],
            }
        capability = measure_capability(
            lm, sets, context.prefix, Batching(settings.batch_size)
        )
        general = {
            "perplexity": capability.perplexity,
            **{f"accuracy_{k}": v for k, v in sorted(capability.accuracy.items())},
        }
    except ValueError as error:
        if not isinstance(error.__cause__, ContextOverflowError):
            raise
        # an in-context stream outgrows the model's context: recorded, not fatal
        reason, general = f"not measured: {error}", {}
    norm_growth, max_norm_growth = state.drift.growth()
    return {
        "checkpoint": done,
        "failed": state.failed,
        "reason": reason,
        "probes": outcomes,
        "model_measures": general
        | {"norm_growth": norm_growth, "max_norm_growth": max_norm_growth},
        "measure_s": time.perf_counter() - start,
    }


def _float(value: object) -> float | None:
    return None if pd.isna(value) else float(value)


@torch.no_grad()
def unedited_scores(
    lm: LoadedModel, stream: Stream, settings: LifelongSettings
) -> pd.DataFrame:
    """``score_pass`` of every probe of the stream under the model as it is."""
    return score_pass(
        lm, stream.probes, settings=ScoringSettings(batch_size=settings.batch_size)
    )


def chain_fingerprints(
    model: str, job: EditJob, requests: Sequence[EditRequest], seed: int
) -> list[str]:
    """Each edit's fingerprint in a sequential run, as ``run_job`` computes them."""
    chain, previous = [], ""
    for request in requests:
        previous = unit_fingerprint(model, job, [request], seed, previous)
        chain.append(previous)
    return chain


def run_stream(  # noqa: PLR0913 - the stream's inputs
    lm: LoadedModel,
    stream: Stream,
    job: EditJob,
    *,
    store: DeltaStore,
    checkpoints: CheckpointStore,
    context: EditContext,
    sets: GeneralSets,
    settings: LifelongSettings,
    max_relative_norm: float,
    base_scores: Callable[[], pd.DataFrame] | None = None,
) -> list[dict[str, Any]]:
    """Edit the stream with one method and measure it at every checkpoint; the
    checkpoint records, stored or new, in order (checkpoint 0 first).

    Deltas go to ``store`` and records to ``checkpoints`` as they are made; only the
    checkpoints not found under their key are measured, and editing stops after the
    last checkpoint's edit. Checkpoint 0, the unedited model, is any method's: it is
    measured once for every method of the stream. ``base_scores``: the unedited
    model's ``score_pass`` of the stream's probes (``unedited_scores``), shared by
    the methods of a run; default, scored here.
    """
    if job.mode != MODE:
        raise ValueError(f"a lifelong stream edits in sequential mode, not {job.mode}")
    method = job.method.name
    schedule = settings.schedule(len(stream.requests))
    requests = stream.requests[: schedule[-1]]
    measured = fingerprint(
        stream.digest(),
        sets.probes.to_numpy().tolist(),
        sets.texts,
        settings.batch_size,
        lm.name,
    )
    chain = chain_fingerprints(lm.name, job, requests, context.seed)
    keys = {0: fingerprint(measured, "unedited")}
    keys |= {k: fingerprint(measured, chain[k - 1]) for k in schedule}
    records = {k: checkpoints.load(method, k, key) for k, key in keys.items()}
    if records[0] is None and (shared := checkpoints.unedited(method, keys[0])):
        checkpoints.save(shared)
        records[0] = shared
    missing = sorted(k for k, record in records.items() if record is None)
    logger.info(
        "%s: a stream of %d edits, checkpoints %s; %d to measure",
        method,
        len(requests),
        schedule,
        len(missing),
    )
    if not missing:
        return [records[k] for k in sorted(records)]
    state = _StreamState(WeightDrift(lm.model), [])
    base = (base_scores or (lambda: unedited_scores(lm, stream, settings)))()

    def measure(done: int) -> None:
        record = _measure(
            lm, done, state, stream=stream, base=base, sets=sets, settings=settings
        )
        record |= {"method": method, "key": keys[done], "edits": done}
        checkpoints.save(record)
        records[done] = record
        logger.info(
            "%s after %d edits: %s",
            method,
            done,
            {k: round(v, 4) for k, v in record["model_measures"].items()},
        )

    def on_applied(done: int, delta: Delta | None) -> None:
        if delta is None:
            state.failed += 1
        else:
            state.drift.track(delta)
            state.applied.append(delta)
        if done in keys and records[done] is None:
            with torch.no_grad():
                measure(done)

    if records[0] is None:
        measure(0)
    for outcome in run_job(
        lm,
        requests,
        job,
        store=store,
        context=context,
        max_relative_norm=max_relative_norm,
        on_applied=on_applied,
    ):
        store.write(outcome)
    return [records[k] for k in sorted(records)]


def outcome_table(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per (method, checkpoint, measured probe): its 0/1 outcome."""
    parts = [
        pd.DataFrame(r["probes"]).assign(method=r["method"], checkpoint=r["checkpoint"])
        for r in records
    ]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return frame.reindex(columns=OUTCOME_COLUMNS)


def checkpoint_table(
    records: Sequence[dict[str, Any]], wall_s: Mapping[str, Sequence[float]]
) -> pd.DataFrame:
    """One row per (method, checkpoint): edits, failed ones, the model measures,
    seconds spent editing since the previous checkpoint and measuring this one.

    Args:
        wall_s: method -> the seconds of each of its stream's edits, in order.
    """
    rows, previous = [], {}
    for r in records:
        method, done = r["method"], r["checkpoint"]
        times = wall_s.get(method, ())
        edit_s = float(sum(times[previous.get(method, 0) : done]))
        previous[method] = done
        rows.append(
            {
                "method": method,
                "checkpoint": done,
                "failed": r["failed"],
                "reason": r["reason"],
                # sorted: a record read back from its JSON file has sorted keys
                **dict(sorted(r["model_measures"].items())),
                "edit_s": edit_s,
                "measure_s": r["measure_s"],
            }
        )
    return pd.DataFrame(rows)


def curves(
    outcomes: pd.DataFrame, checkpoints: pd.DataFrame, seed: int = 0
) -> pd.DataFrame:
    """One row per (method, checkpoint, measure): value, 95% CI and n.

    Probe measures have a CI over edits (``cluster_bootstrap_ci``: the probes of one
    edit are resampled together); model measures are one value per model state.
    """
    rows = []
    for (method, done), part in outcomes.groupby(["method", "checkpoint"]):
        for measure, (kind, protocol, _) in PROBE_MEASURES.items():
            values = part.loc[part["probe_type"] == kind].dropna(subset=["outcome"])
            if values.empty:
                continue
            low, high = cluster_bootstrap_ci(
                values["outcome"], values["case_id"], seed=seed
            )
            rows.append(
                {
                    "method": method,
                    "checkpoint": done,
                    "measure": measure,
                    "protocol": protocol,
                    "value": float(values["outcome"].mean()),
                    "ci_low": low,
                    "ci_high": high,
                    "n": len(values),
                    "n_edits": values["case_id"].nunique(),
                }
            )
    model_measures = [
        c
        for c in checkpoints.columns
        if c in MODEL_PROTOCOLS or c.startswith(("accuracy_", "max_norm"))
    ]
    for row in checkpoints.to_dict("records"):
        for measure in model_measures:
            if pd.isna(row.get(measure)):
                continue
            protocol = (
                ACCURACY_PROTOCOL
                if measure.startswith("accuracy_")
                else MODEL_PROTOCOLS.get(measure, "weights")
            )
            rows.append(
                {
                    "method": row["method"],
                    "checkpoint": row["checkpoint"],
                    "measure": measure,
                    "protocol": protocol,
                    "value": float(row[measure]),
                    "ci_low": float("nan"),
                    "ci_high": float("nan"),
                    "n": 1,
                    "n_edits": int(row["checkpoint"]),
                }
            )
    columns = [
        "method",
        "checkpoint",
        "measure",
        "protocol",
        "value",
        "ci_low",
        "ci_high",
        "n",
        "n_edits",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["method", "measure", "checkpoint"], ignore_index=True)


def collapse_points(
    curve_table: pd.DataFrame, checkpoints: pd.DataFrame, below: float = 0.5
) -> pd.DataFrame:
    """Per method: the first checkpoint whose retention is below ``below`` (None: it
    never fell), retention there and at the stream's end, edits and failed ones."""
    rows = []
    for method, part in checkpoints.groupby("method"):
        last = part.sort_values("checkpoint").iloc[-1]
        retention = curve_table[
            (curve_table["method"] == method) & (curve_table["measure"] == "retention")
        ].sort_values("checkpoint")
        fallen = retention[retention["value"] < below]
        rows.append(
            {
                "method": method,
                "collapse_at": int(fallen["checkpoint"].iloc[0])
                if len(fallen)
                else None,
                "retention_at_collapse": float(fallen["value"].iloc[0])
                if len(fallen)
                else None,
                "final_retention": float(retention["value"].iloc[-1])
                if len(retention)
                else None,
                "edits": int(last["checkpoint"]),
                "failed": int(last["failed"]),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "method",
            "collapse_at",
            "retention_at_collapse",
            "final_retention",
            "edits",
            "failed",
        ],
    ).astype({"collapse_at": "Int64"})
