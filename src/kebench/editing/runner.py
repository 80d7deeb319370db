"""Run editing methods over edit requests: modes, failures, resume, progress.

Modes:
    single: every edit starts from the base weights (each delta stands alone);
    batch: ``batch_size`` edits share one delta (batchable methods: MEMIT);
    sequential: edits accumulate; each delta applies on top of the previous ones.

Each edit has a fingerprint: model, method and its version, mode, hparams, request
and seed (and, in sequential mode, the previous edit's fingerprint). An edit whose
stored row has the same fingerprint is skipped, so a killed run resumes where it
stopped and produces the same deltas as an uninterrupted one. Single and batch runs
are cut into shards that run anywhere (``kebench.compute``); a sequential run is one
shard. A delta with NaN or inf values, a change larger than ``max_relative_norm``
times its weight's norm, or an edited model whose logits are not finite, is recorded
as failed with the reason, and the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from kebench.compute.engine import chunks
from kebench.editing.delta import (
    Applied,
    Delta,
    apply_delta,
    delta_applied,
    revert_delta,
)
from kebench.editing.easyedit import PREFIX
from kebench.editing.interface import EditContext, EditMethod, HyperParams
from kebench.editing.registry import get_method, hparams_name, method_names
from kebench.editing.requests import EditRequest
from kebench.editing.store import MODES, DeltaStore, EditOutcome, file_stem
from kebench.models.loading import LoadedModel
from kebench.models.logprobs import forward_padded

logger = logging.getLogger(__name__)

# Errors a diverging or degenerate edit raises (torch's numerical errors are
# RuntimeErrors); anything else is a bug or an interrupt and stops the run.
EDIT_ERRORS = (RuntimeError, ValueError, FloatingPointError, ZeroDivisionError)


@dataclass(frozen=True)
class EditJob:
    """One method, its hparams, and the mode to run it in."""

    method: EditMethod
    hparams: HyperParams
    raw_hparams: dict[str, Any]
    mode: str
    batch_size: int = 1


def select_methods(spec: str | Sequence[str], available: Sequence[str]) -> list[str]:
    """Method names from ``ROME``, ``ROME+MEMIT`` (``+`` because Kedro's ``--params``
    splits on commas), a list, or ``all`` (every method with hparams for the model).
    ``easyedit:ROME`` is EasyEdit's ROME, with ROME's hparams."""
    names = spec.split("+") if isinstance(spec, str) else list(spec)
    names = [name.strip() for name in names if name.strip()]
    if names == ["all"]:
        return sorted(available)
    known = method_names()
    unknown = [n for n in names if not n.startswith(PREFIX) and n not in known]
    if unknown:
        raise ValueError(
            f"unknown editing method {unknown} (--params method=...); the methods: "
            f"{known}, each with an easyedit: form (docs/editing.md)"
        )
    missing = [name for name in names if hparams_name(name) not in available]
    if missing:
        raise ValueError(
            f"no hparams for {missing} on this model: no conf/base/hparams/<METHOD>/"
            "<model>.yaml, and none derivable from its architecture (docs/models.md); "
            f"methods with hparams: {sorted(available)}"
        )
    return names


def select_stored_edits(
    edit_manifest: pd.DataFrame, params: Mapping[str, Any]
) -> pd.DataFrame:
    """The manifest rows of the chosen methods (``params["methods"]``), in the chosen
    mode."""
    rows = edit_manifest[edit_manifest["mode"] == params["mode"]]
    available = sorted(rows["method"].unique())
    if not available:
        raise ValueError(
            f"no stored edits in mode {params['mode']!r}: run the editing pipeline first "
            "(kedro run --pipelines=editing --params=method=ROME)"
        )
    methods = select_methods(params["methods"], available)
    missing = sorted(set(methods) - set(available))
    if missing:
        raise ValueError(f"no stored edits for {missing}; stored: {available}")
    return rows[rows["method"].isin(methods)].reset_index(drop=True)


def make_job(name: str, raw_hparams: dict[str, Any], mode: str, where: str) -> EditJob:
    """Check that ``name`` can run in ``mode`` and parse its hparams."""
    if mode not in MODES:
        raise ValueError(f"unknown editing mode {mode!r}; use one of {MODES}")
    method = get_method(name)
    if mode == "batch" and not method.batchable:
        raise ValueError(
            f"{name} edits one fact at a time; batch mode needs e.g. MEMIT"
        )
    hparams = method.hparams.from_dict(raw_hparams, where)
    batch_size = int(getattr(hparams, "batch_size", 1)) if mode == "batch" else 1
    return EditJob(method, hparams, dict(raw_hparams), mode, max(batch_size, 1))


def fingerprint(*parts: object) -> str:
    """A stable hash of JSON-serialisable ``parts``."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def delta_problem(
    lm: LoadedModel, delta: Delta, request: EditRequest, max_relative_norm: float
) -> tuple[str | None, dict[str, list]]:
    """Why the delta diverged (None if it did not), and its description."""
    if not delta.is_finite():
        return "diverged: the delta has NaN or inf values", {}
    description = delta.describe(lm.model)
    for name, norm in zip(
        description["param_names"], description["norms"], strict=True
    ):
        ratio = norm / float(lm.model.get_parameter(name).double().norm())
        if ratio > max_relative_norm:
            return (
                f"diverged: norm explosion, |ΔW|/|W| = {ratio:.3g} > {max_relative_norm} "
                f"for {name}",
                description,
            )
    if not delta.params and not delta.codebooks and not delta.side_memories:
        return None, description  # a prefix only (IKE): nothing can diverge
    ids = lm.tokenizer(delta.prefix + request.text)["input_ids"]
    with delta_applied(lm.model, delta), torch.no_grad():
        logits, _ = forward_padded(lm.model, [ids], lm.tokenizer.pad_token_id)
    if not torch.isfinite(logits).all():
        return "diverged: the edited model's logits are not finite", description
    return None, description


def _units(requests: Sequence[EditRequest], job: EditJob) -> list[list[EditRequest]]:
    size = job.batch_size if job.mode == "batch" else 1
    return [list(requests[i : i + size]) for i in range(0, len(requests), size)]


def unit_fingerprint(
    model: str, job: EditJob, unit: list[EditRequest], seed: int, previous: str
) -> str:
    """The fingerprint of one edit (or batch); ``previous`` only in sequential mode."""
    keys = [asdict(r) for r in unit]
    method = [job.method.name, job.method.version]
    return fingerprint(model, method, job.mode, job.raw_hparams, keys, seed, previous)


def _unit_stored(
    stored: dict[str, dict[str, Any]], unit: list[EditRequest], unit_fp: str
) -> bool:
    """Every edit of ``unit`` stored with the fingerprint ``unit_fp``."""
    rows = [stored.get(r.case_id) for r in unit]
    return all(row is not None and row["fingerprint"] == unit_fp for row in rows)


def _delta_file(job: EditJob, unit: list[EditRequest], unit_fp: str) -> str:
    name = file_stem(unit[0].case_id) if len(unit) == 1 else f"batch-{unit_fp[:16]}"
    return f"{job.method.name}/{job.mode}/{name}.safetensors"


# a unit's delta, the reason it failed (None: it did not), its description, seconds
Computed = tuple[Delta | None, str | None, dict[str, list], float]


def _compute(
    lm: LoadedModel,
    unit: list[EditRequest],
    job: EditJob,
    context: EditContext,
    max_relative_norm: float,
) -> Computed:
    start = time.perf_counter()
    try:
        delta = job.method.compute(lm, unit, job.hparams, context)
        reason, description = delta_problem(lm, delta, unit[0], max_relative_norm)
    except EDIT_ERRORS as err:
        delta, reason, description = None, f"{type(err).__name__}: {err}", {}
    return delta, reason, description, time.perf_counter() - start


def _compute_units(
    lm: LoadedModel,
    units: list[list[EditRequest]],
    job: EditJob,
    context: EditContext,
    max_relative_norm: float,
) -> list[Computed]:
    """Each unit's delta, failure reason, description and wall time. Single-mode
    edits of a method with ``compute_each`` are computed together (each as alone);
    if that raises, each is computed alone, so that the failure names its edit."""
    each = job.method.compute_each
    if each is None or job.mode != "single" or len(units) < 2:  # noqa: PLR2004
        return [_compute(lm, unit, job, context, max_relative_norm) for unit in units]
    start = time.perf_counter()
    requests = [request for (request,) in units]
    try:
        deltas = each(lm, requests, job.hparams, context)
    except EDIT_ERRORS as err:
        logger.info(
            "%s: %d edits together failed (%s); each alone instead",
            job.method.name,
            len(units),
            err,
        )
        return [_compute(lm, unit, job, context, max_relative_norm) for unit in units]
    wall_s = (time.perf_counter() - start) / len(units)
    computed = []
    for request, delta in zip(requests, deltas, strict=True):
        checked = time.perf_counter()
        reason, description = delta_problem(lm, delta, request, max_relative_norm)
        computed.append(
            (delta, reason, description, wall_s + time.perf_counter() - checked)
        )
    return computed


def _groups(
    units: list[list[EditRequest]], job: EditJob, context: EditContext
) -> list[list[list[EditRequest]]]:
    """Consecutive units computed in one go: up to ``context.value_batch`` single-mode
    edits of a method with ``compute_each``, else one unit each. The groups depend on
    the units' positions only, never on which are stored."""
    size = (
        context.value_batch if job.method.compute_each and job.mode == "single" else 1
    )
    return chunks(units, max(size, 1))


# Told after each unit of a sequential run, while the model holds every delta so far:
# how many requests are done, and the unit's delta (None: it failed).
OnApplied = Callable[[int, Delta | None], None]


def run_job(  # noqa: PLR0913 - the run's inputs
    lm: LoadedModel,
    requests: Sequence[EditRequest],
    job: EditJob,
    *,
    store: DeltaStore,
    context: EditContext,
    max_relative_norm: float,
    first_order: int = 0,
    on_applied: OnApplied | None = None,
) -> Iterator[EditOutcome]:
    """Yield one outcome per request; skip those already stored with the same
    fingerprint. ``first_order``: the run's position of the first request (a shard's).
    ``on_applied`` (sequential mode): called after each unit, stored or new, with the
    model in its state after that unit (a lifelong stream measures it there)."""
    name, mode = job.method.name, job.mode
    stored = store.rows(name, mode)
    applied: list[Applied] = []
    # the states of the deltas the model holds (sequential mode): EditContext.earlier,
    # only the newest where the method reads no other (EditMethod.carry)
    earlier: deque[dict[str, torch.Tensor]] = deque(
        maxlen=1 if job.method.carry == "last" else None
    )
    previous = ""
    order = first_order
    progress = tqdm(total=len(requests), desc=f"{name} ({mode})", unit="edit")
    try:
        for group in _groups(_units(requests, job), job, context):
            pending = []
            for unit in group:
                unit_fp = unit_fingerprint(lm.name, job, unit, context.seed, previous)
                if _unit_stored(stored, unit, unit_fp):
                    first = stored[unit[0].case_id]
                    replayed = None
                    if mode == "sequential" and first["status"] == "ok":
                        replayed = store.load(first["delta_file"])
                        applied.append(apply_delta(lm.model, replayed))
                        earlier.append(replayed.state)
                    previous = unit_fp if mode == "sequential" else ""
                    progress.update(len(unit))
                    if on_applied is not None and mode == "sequential":
                        on_applied(order + len(unit) - first_order, replayed)
                else:
                    pending.append((unit, unit_fp, order))
                order += len(unit)
            if not pending:
                continue
            # the whole group, even where some of it is stored (a run killed between
            # two of its saves): an edit's floats depend on the batch it was in, and
            # a resumed run must make the deltas an uninterrupted one makes
            now = replace(context, earlier=tuple(earlier)) if earlier else context
            computed = dict(
                zip(
                    map(id, group),
                    _compute_units(lm, group, job, now, max_relative_norm),
                    strict=True,
                )
            )
            for unit, unit_fp, first_position in pending:
                result = computed[id(unit)]
                yield from _outcomes(
                    lm,
                    job,
                    unit=unit,
                    unit_fp=unit_fp,
                    first_position=first_position,
                    computed=result,
                )
                delta, reason = result[0], result[1]
                if mode == "sequential" and reason is None:
                    applied.append(apply_delta(lm.model, delta))
                    earlier.append(delta.state)
                previous = unit_fp if mode == "sequential" else ""
                progress.update(len(unit))
                if on_applied is not None and mode == "sequential":
                    done = first_position + len(unit) - first_order
                    on_applied(done, None if reason else delta)
    finally:
        progress.close()
        for done in reversed(applied):
            revert_delta(lm.model, done)


def _outcomes(  # noqa: PLR0913 - one computed unit and where it goes
    lm: LoadedModel,
    job: EditJob,
    *,
    unit: list[EditRequest],
    unit_fp: str,
    first_position: int,
    computed: Computed,
) -> Iterator[EditOutcome]:
    """One outcome per edit of ``unit``: its manifest row, and the delta with the
    first (a batch's edits share one delta and one file)."""
    delta, reason, description, wall_s = computed
    if reason is not None:
        logger.warning(
            "%s (%s) failed on %s: %s",
            job.method.name,
            job.mode,
            unit[0].case_id,
            reason,
        )
    delta_file = None if reason else _delta_file(job, unit, unit_fp)
    for position, request in enumerate(unit):
        row = {
            "model": lm.name,
            "method": job.method.name,
            "mode": job.mode,
            "case_id": request.case_id,
            "order": first_position + position,
            "status": "failed" if reason else "ok",
            "reason": reason,
            "delta_file": delta_file,
            "param_names": description.get("param_names", []),
            "shapes": description.get("shapes", []),
            "norms": description.get("norms", []),
            "tensor_bytes": delta.nbytes() if delta is not None and not reason else 0,
            "wall_s": wall_s / len(unit),
            "fingerprint": unit_fp,
            "hparams": json.dumps(job.raw_hparams, sort_keys=True),
        }
        yield EditOutcome(
            row=row, delta=delta if position == 0 and not reason else None
        )


@dataclass(frozen=True)
class EditShard:
    """Consecutive requests of one job, with what a worker needs to edit them."""

    requests: tuple[EditRequest, ...]
    job: EditJob
    store_root: Path
    context: EditContext
    max_relative_norm: float
    first_order: int


def run_edit_shard(lm: LoadedModel, shard: EditShard) -> Iterator[EditOutcome]:
    """Edit one shard (a ``kebench.compute`` task): its outcomes, stored or new, one
    by one as each edit finishes."""
    return run_job(
        lm,
        shard.requests,
        shard.job,
        store=DeltaStore(shard.store_root),
        context=shard.context,
        max_relative_norm=shard.max_relative_norm,
        first_order=shard.first_order,
    )


def _shard_requests(
    requests: list[EditRequest], job: EditJob, shard_size: int
) -> list[list[EditRequest]]:
    if job.mode == "sequential":
        return [requests]  # each edit builds on the previous ones
    # whole batches: about shard_size edits, at least one batch
    batches = max(1, round(shard_size / job.batch_size))
    return chunks(requests, batches * job.batch_size)


def _shard_done(
    shard: list[EditRequest],
    job: EditJob,
    stored: dict[str, dict],
    model: str,
    seed: int,
) -> bool:
    """Every edit of a single or batch shard stored with its current fingerprint."""
    if job.mode == "sequential":
        return False  # run_job replays the stored deltas and resumes after them
    return all(
        _unit_stored(stored, unit, unit_fingerprint(model, job, unit, seed, ""))
        for unit in _units(shard, job)
    )


def edit_shards(  # noqa: PLR0913 - the run's inputs
    model: str,
    requests: Sequence[EditRequest],
    jobs: Sequence[EditJob],
    *,
    store: DeltaStore,
    context: EditContext,
    max_relative_norm: float,
    shard_size: int,
) -> dict[str, EditShard]:
    """The shards of every job still to edit, keyed ``<METHOD>/<mode>/<index>``."""
    shards = {}
    for job in jobs:
        stored = store.rows(job.method.name, job.mode)
        order = 0
        parts = _shard_requests(list(requests), job, shard_size)
        for index, part in enumerate(parts):
            if not _shard_done(part, job, stored, model, context.seed):
                key = f"{job.method.name}/{job.mode}/{index:04d}"
                shards[key] = EditShard(
                    tuple(part), job, store.root, context, max_relative_norm, order
                )
            order += len(part)
        logger.info(
            "Editing %s with %s (%s mode): %d requests, %d of %d shards to run",
            model,
            job.method.name,
            job.mode,
            len(requests),
            sum(key.startswith(f"{job.method.name}/{job.mode}/") for key in shards),
            len(parts),
        )
    return shards
