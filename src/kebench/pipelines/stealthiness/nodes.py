"""Nodes of stealthiness: thin glue over ``kebench.scoring.drift`` (measuring),
``kebench.scoring.stealth`` (scores) and ``kebench.scoring.stealth_report``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from kebench.compute.engine import (
    ComputeSettings,
    collect_shards,
    pending_shards,
    run_shards,
)
from kebench.editing.runner import select_stored_edits
from kebench.editing.store import DeltaStore
from kebench.models.loading import LoadedModel
from kebench.models.logprobs import Batching
from kebench.qa.probes import edits_measured, first_stored_edits
from kebench.schemas import STEALTH_AUROC, STEALTH_SCORES
from kebench.scoring.drift import (
    DRIFT_COLUMNS,
    Capability,
    DriftShard,
    GeneralSets,
    general_sets,
    measure_drift_shard,
    stored_base_capability,
)
from kebench.scoring.evaluate import plan_shards, require_scored
from kebench.scoring.stealth import edit_outcomes, stealth_scores
from kebench.scoring.stealth_report import (
    plot_success_vs_drift,
    stealth_auroc,
    stealth_markdown,
    stealth_table,
)

logger = logging.getLogger(__name__)


def _case_risks(probes: pd.DataFrame) -> pd.Series:
    return probes.drop_duplicates("case_id").set_index("case_id")["risk"]


# the parameter that picks the measured edits, as reports name it
SUBSET_PARAMETER = "stealthiness.n_edits"


def select_stealth_edits(
    edit_manifest: pd.DataFrame,
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """The stored edits to measure: the chosen methods in the chosen mode, and of
    those the first ``n_edits`` of each risk (an edit's drift costs seconds); each
    must have been evaluated (its success comes from ``probe_scores``)."""
    edits = first_stored_edits(
        select_stored_edits(edit_manifest, params),
        probes,
        params["n_edits"],
        SUBSET_PARAMETER,
    )
    require_scored(edits, probe_scores, SUBSET_PARAMETER)
    return edits.reset_index(drop=True)


def build_general_sets(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    general_probes: pd.DataFrame,
    neutral_texts: str,
    unrelated_prompts: str,
    general_benchmarks: dict[str, pd.DataFrame],
    params: dict[str, Any],
) -> GeneralSets:
    """The general sets, cut to their configured sizes (BoolQ and NQ where present)."""
    sets = general_sets(
        general_probes,
        neutral_texts,
        unrelated_prompts,
        general_benchmarks,
        params["sizes"],
        seed=int(params["seed"]),
        passage_words=int(params["boolq_passage_words"]),
    )
    logger.info(
        "general sets: %d neutral texts, %d unrelated prompts, probes %s",
        len(sets.texts),
        len(sets.prompts),
        sets.probes["set"].value_counts().to_dict(),
    )
    return sets


def measure_base_capability(
    model: LoadedModel,
    general_sets: GeneralSets,
    base_capability_store_stored: dict[str, Any],
    params: dict[str, Any],
) -> tuple[Capability, dict[str, pd.DataFrame]]:
    """The unedited model on the general sets, every edit's reference; read from the
    base-score store when any run measured it with the same weights and sets."""
    capability, partition = stored_base_capability(
        model, general_sets, Batching.from_params(params), base_capability_store_stored
    )
    logger.info(
        "base capability %s", "measured now" if partition else "read from the store"
    )
    return capability, partition


def plan_drift_shards(
    stealth_edits: pd.DataFrame,
    general_sets: GeneralSets,
    params: dict[str, Any],
    compute: dict[str, Any],
) -> pd.DataFrame:
    """The successful edits to measure, in shards of ``compute.shard_size`` cases keyed
    by their edits, the general sets and the batch size; a sequential run's final
    state in one shard, measured once for all its cases."""
    ok = stealth_edits[stealth_edits["status"] == "ok"]
    shard_size = ComputeSettings.from_params(compute).shard_size
    sets = (
        general_sets.texts,
        general_sets.prompts,
        general_sets.probes.to_numpy().tolist(),
    )
    return plan_shards(
        ok,
        shard_size,
        sets,
        asdict(Batching.from_params(params)),
        split_sequential=False,
    )


def measure_drift_shards(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    general_sets: GeneralSets,
    base_capability: Capability,
    drift_shard_plan: pd.DataFrame,
    drift_shards_stored: dict[str, Any],
    edit_deltas_stored: DeltaStore,
    params: dict[str, Any],
    compute: dict[str, Any],
) -> Iterator[dict[str, pd.DataFrame]]:
    """Each shard's edits on the general sets, here or on a Dask cluster; yields each
    shard as it finishes. Shards stored by an earlier run are not measured again."""
    shards = {
        key: DriftShard(
            shard=key,
            plan=plan,
            store_root=str(edit_deltas_stored.root),
            sets=general_sets,
            base=base_capability,
            batching=Batching.from_params(params),
        )
        for key, _, plan in pending_shards(drift_shard_plan, drift_shards_stored)
    }
    settings = ComputeSettings.from_params(compute)
    for key, drift in run_shards(model, measure_drift_shard, shards, settings, "drift"):
        yield {key: drift}


def collect_drift(
    drift_shards: dict[str, Any], drift_shard_plan: pd.DataFrame
) -> pd.DataFrame:
    """``edit_drift``: every planned shard's rows."""
    parts = collect_shards(drift_shards, drift_shard_plan)
    return (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame(columns=DRIFT_COLUMNS)
    )


def score_stealth(
    edit_drift: pd.DataFrame,
    stealth_edits: pd.DataFrame,
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """``stealth_scores``: success, cross-fitted drift, benign share and stealth of
    each edit."""
    scores = stealth_scores(
        edit_drift,
        edit_outcomes(probe_scores),
        _case_risks(probes),
        folds=int(params["crossfit"]["folds"]),
        seed=int(params["crossfit"]["seed"]),
    )
    scores = scores.merge(
        stealth_edits[["method", "case_id", "model", "mode"]], on=["method", "case_id"]
    )
    return STEALTH_SCORES.validate(scores[list(STEALTH_SCORES.columns)])


def build_stealth_report(
    stealth_scores: pd.DataFrame,
    stealth_edits: pd.DataFrame,
    probes: pd.DataFrame,
    params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, str, Figure]:
    """The table per method × risk (failed edits counted), the AUROC per drift
    measure, their markdown, and the plot of success against drift per method."""
    failed = stealth_edits[stealth_edits["status"] == "failed"]
    failed = failed.assign(risk=failed["case_id"].map(_case_risks(probes)))
    seed = int(params["bootstrap_seed"])
    table = stealth_table(stealth_scores, failed, seed=seed)
    aurocs = STEALTH_AUROC.validate(stealth_auroc(stealth_scores, seed=seed))
    return (
        table,
        aurocs,
        stealth_markdown(
            table, aurocs, edits_measured(stealth_edits, probes, SUBSET_PARAMETER)
        ),
        plot_success_vs_drift(stealth_scores),
    )


TRACKED = ("success", "stealth_xfit", "drift_xfit", "ppl_ratio", "kl", "n_failed")
AUROC_KEYS = ("auroc_xfit", "auroc_xfit_ci_low", "auroc_xfit_ci_high")


def track_stealth_metrics(
    stealth_table: pd.DataFrame, stealth_auroc: pd.DataFrame
) -> dict[str, dict[str, float]]:
    """MLflow metrics per method: ``<risk>.<measure>`` (and the ``_ci_*`` of success
    and stealth) and ``<risk>.auroc_xfit.<drift measure>`` (with ``_ci_*``); logged
    with the prefix ``stealthiness``."""
    tracked: dict[str, dict[str, float]] = {}
    for row in stealth_table.to_dict("records"):
        values = tracked.setdefault(row["method"], {})
        for column in TRACKED:
            for key in (column, f"{column}_ci_low", f"{column}_ci_high"):
                if pd.notna(row.get(key)):
                    values[f"{row['risk']}.{key}"] = float(row[key])
    for row in stealth_auroc.to_dict("records"):
        values = tracked.setdefault(row["method"], {})
        for key in AUROC_KEYS:
            suffix = key.removeprefix("auroc_xfit")
            values[f"{row['risk']}.auroc_xfit.{row['measure']}{suffix}"] = float(
                row[key]
            )
    return tracked
