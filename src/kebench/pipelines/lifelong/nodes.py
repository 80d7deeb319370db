"""Nodes of lifelong: thin glue over ``kebench.scoring.lifelong``."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from kebench.editing.interface import EditContext
from kebench.editing.requests import requests_from_probes
from kebench.editing.runner import select_methods
from kebench.editing.store import DeltaStore
from kebench.kg.edit_cases import RelationCatalog, parse_edit_cases, read_source
from kebench.models.loading import LoadedModel
from kebench.pipelines.editing.nodes import method_job
from kebench.qa.probes import edit_probes, rewritten_facts, unify_probes
from kebench.schemas import (
    LIFELONG_COLLAPSE,
    LIFELONG_CURVES,
    LIFELONG_OUTCOMES,
    LIFELONG_STREAM,
)
from kebench.scoring.drift import GeneralSets
from kebench.scoring.lifelong import (
    MODE,
    CheckpointStore,
    LifelongSettings,
    Stream,
    build_stream,
    checkpoint_table,
    collapse_points,
    curves,
    edit_count,
    outcome_table,
    run_stream,
    unedited_scores,
)
from kebench.scoring.lifelong_report import lifelong_markdown, plot_curves

logger = logging.getLogger(__name__)

NO_TOP_UP = "none"


def _top_up_probes(
    params: dict[str, Any], relations: RelationCatalog, qa_format: str
) -> pd.DataFrame | None:
    """The direct probes of the top-up source's edits (None: no top-up)."""
    name = params["top_up"]
    if name == NO_TOP_UP:
        return None
    if name not in params["sources"]:
        raise ValueError(
            f"lifelong.top_up: unknown source {name!r}; configured: "
            f"{sorted(params['sources'])} or {NO_TOP_UP!r}"
        )
    raw = read_source(name, params["sources"][name])
    requests = parse_edit_cases(raw, relations)
    probes = edit_probes(requests, qa_format, {})
    return unify_probes([probes[probes["probe_type"] == "direct"]])


def plan_lifelong_stream(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    relations: dict[str, Any],
    rippleedits_relations: dict[str, Any],
    risk_params: dict[str, Any],
    params: dict[str, Any],
) -> pd.DataFrame:
    """The stream's edits and the probes measured on them: the dataset's edits in
    table order, topped up from ``lifelong.top_up`` when it holds fewer than asked."""
    n_edits = int(params["edits"])
    direct = edit_count(probes)
    top_up = (
        _top_up_probes(
            params,
            RelationCatalog.from_config(relations, rippleedits_relations),
            risk_params["qa_format"],
        )
        if direct < n_edits
        else None
    )
    stream = build_stream(
        probes, rewritten_facts(probes, entailed_facts), n_edits, top_up
    )
    logger.info(
        "lifelong stream: %d edits (%d from the dataset), %s probes",
        len(stream.requests),
        min(direct, len(stream.requests)),
        stream.probes["probe_type"].value_counts().to_dict(),
    )
    return LIFELONG_STREAM.validate(stream.probes.reset_index(drop=True))


def run_lifelong_stream(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    lifelong_stream: pd.DataFrame,
    model: LoadedModel,
    edit_hparams: dict[str, dict[str, Any]],
    general_sets: GeneralSets,
    lifelong_deltas_stored: DeltaStore,
    lifelong_checkpoints_stored: Path,
    covariance_stats: Path,
    params: dict[str, Any],
    editing: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stream every selected method's edits and measure each checkpoint; deltas and
    checkpoints are stored as they are made. Per-probe outcomes and per-checkpoint
    model measures, with the seconds spent."""
    stream = Stream.of(lifelong_stream)
    settings = LifelongSettings.from_params(params)
    context = EditContext(
        stats_dir=covariance_stats,
        pool=requests_from_probes(lifelong_stream),
        seed=int(editing["seed"]),
        value_batch=int(editing["value_batch"]),
    )
    checkpoints = CheckpointStore(lifelong_checkpoints_stored)
    # the unedited model's scores of the stream, once for every method
    base_scores = functools.cache(lambda: unedited_scores(model, stream, settings))
    records, wall_s = [], {}
    for name in select_methods(params["methods"], list(edit_hparams)):
        job = method_job(name, edit_hparams, MODE, model.name)
        records += run_stream(
            model,
            stream,
            job,
            store=lifelong_deltas_stored,
            checkpoints=checkpoints,
            context=context,
            sets=general_sets,
            settings=settings,
            max_relative_norm=float(editing["max_relative_norm"]),
            base_scores=base_scores,
        )
        rows = lifelong_deltas_stored.rows(job.method.name, MODE)
        wall_s[job.method.name] = [
            rows[r.case_id]["wall_s"] if r.case_id in rows else 0.0
            for r in stream.requests
        ]
    return (
        LIFELONG_OUTCOMES.validate(outcome_table(records)),
        checkpoint_table(records, wall_s),
    )


def build_lifelong_report(
    lifelong_outcomes: pd.DataFrame,
    lifelong_checkpoints: pd.DataFrame,
    params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, str, Figure]:
    """The curves (95% CI over edits), the collapse table, their markdown and plot."""
    table = LIFELONG_CURVES.validate(
        curves(
            lifelong_outcomes, lifelong_checkpoints, seed=int(params["bootstrap_seed"])
        )
    )
    below = float(params["collapse_below"])
    collapse = LIFELONG_COLLAPSE.validate(
        collapse_points(table, lifelong_checkpoints, below)
    )
    return (
        table,
        collapse,
        lifelong_markdown(table, collapse, lifelong_checkpoints, below),
        plot_curves(table),
    )


def track_lifelong_metrics(
    lifelong_curves: pd.DataFrame, lifelong_collapse: pd.DataFrame
) -> dict[str, dict[str, Any]]:
    """MLflow metrics per method: each measure (and its ``_ci_*``) with the checkpoint
    as its step, and ``collapse_at`` where retention fell."""
    tracked: dict[str, dict[str, Any]] = {}
    for row in lifelong_curves.to_dict("records"):
        values = tracked.setdefault(row["method"], {})
        for suffix, column in (
            ("", "value"),
            ("_ci_low", "ci_low"),
            ("_ci_high", "ci_high"),
        ):
            if pd.notna(row[column]):
                steps = values.setdefault(f"{row['measure']}{suffix}", {})
                steps[int(row["checkpoint"])] = float(row[column])
    for row in lifelong_collapse.to_dict("records"):
        if pd.notna(row["collapse_at"]):
            tracked.setdefault(row["method"], {})["collapse_at"] = float(
                row["collapse_at"]
            )
    return tracked
