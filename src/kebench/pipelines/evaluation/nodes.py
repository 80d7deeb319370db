"""Nodes of evaluation up to the probe scores: the edits it evaluates, the unedited
model's scores and known premises, the probe score shards and ``probe_scores``; thin
glue over ``kebench.scoring`` (the nodes after them are in ``metric_nodes``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

from kebench.compute.engine import ComputeSettings, run_shards
from kebench.editing.runner import select_stored_edits
from kebench.editing.store import DeltaStore
from kebench.models.loading import LoadedModel
from kebench.pipelines.editing.nodes import EDITS_PARAMETER, first_edits_per_risk
from kebench.scoring import probe_shards
from kebench.scoring.evaluate import (
    ScoringSettings,
    run_joint_drops,
    score_shard,
    unedited_scores,
)
from kebench.scoring.premises import base_premise_knowledge, premise_generation


def select_edits(
    edit_manifest: pd.DataFrame,
    probes: pd.DataFrame,
    params: dict[str, Any],
    n_edits: int | str | dict[str, int | str],
) -> pd.DataFrame:
    """The stored edits to evaluate: those of the cases the editing pipeline edits
    with the same ``editing.n_edits`` (the first of each risk)."""
    cases = first_edits_per_risk(probes, n_edits)["case_id"]
    stored = select_stored_edits(edit_manifest, params)
    return probe_shards.evaluated_edits(stored, cases, EDITS_PARAMETER)


def score_base_probes(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    probes: pd.DataFrame,
    selected_edits: pd.DataFrame,
    earlier_shard_plan: pd.DataFrame,
    base_probe_store_stored: dict[str, Any],
    params: dict[str, Any],
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The probes of the selected and the earlier edits' cases under the unedited
    model, and the new rows of the base-score store."""
    cases = {*selected_edits["case_id"], *earlier_shard_plan["case_id"]}
    settings = ScoringSettings.from_params(params)
    return unedited_scores(model, probes, cases, base_probe_store_stored, settings)


def score_premise_knowledge(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    premise_probes: pd.DataFrame,
    selected_edits: pd.DataFrame,
    premise_store_stored: dict[str, Any],
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    params: dict[str, Any],
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Whether the base model knows each premise of the edited cases' probes, and the
    new rows of the premise store."""
    cases = selected_edits["case_id"]
    return base_premise_knowledge(
        model,
        premise_probes,
        cases,
        probes,
        base_probe_scores,
        generation=premise_generation(params),
        stored=premise_store_stored,
    )


def find_joint_drops(
    selected_edits: pd.DataFrame, probes: pd.DataFrame, entailed_facts: pd.DataFrame
) -> pd.DataFrame:
    """The probes left out of joint scoring (batch, sequential), with the reason."""
    return run_joint_drops(selected_edits, probes, entailed_facts)


def plan_score_shards(
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    params: dict[str, Any],
    compute: dict[str, Any],
) -> pd.DataFrame:
    """The successful edits to score, in shards of ``compute.shard_size`` cases."""
    return probe_shards.planned_shards(
        selected_edits,
        probes,
        joint_dropped_probes,
        ScoringSettings.from_params(params),
        ComputeSettings.from_params(compute).shard_size,
    )


def plan_earlier_shards(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    edit_manifest: pd.DataFrame,
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    probe_score_shards_stored: dict[str, Any],
    params: dict[str, Any],
) -> pd.DataFrame:
    """Every other stored edit of this mode whose current scores an earlier run
    stored, with its stored shard: kept in ``probe_scores`` beside this run's."""
    return probe_shards.earlier_shards(
        edit_manifest,
        selected_edits,
        probes,
        entailed_facts,
        probe_score_shards_stored,
        settings=ScoringSettings.from_params(params),
        mode=params["mode"],
    )


def score_probe_shards(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    score_shard_plan: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    probe_score_shards_stored: dict[str, Any],
    edit_deltas_stored: DeltaStore,
    params: dict[str, Any],
    compute: dict[str, Any],
) -> Iterator[dict[str, pd.DataFrame]]:
    """Each shard's kept probes under its edited model, here or on a Dask cluster;
    yields each shard as it finishes. Stored shards are not scored again."""
    shards = probe_shards.pending_score_shards(
        probes,
        base_probe_scores,
        score_shard_plan,
        joint_dropped_probes,
        probe_score_shards_stored,
        store_root=str(edit_deltas_stored.root),
        settings=ScoringSettings.from_params(params),
    )
    settings = ComputeSettings.from_params(compute)
    for key, scores in run_shards(model, score_shard, shards, settings, "scoring"):
        yield {key: scores}


def collect_probe_scores(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    probe_score_shards: dict[str, Any],
    score_shard_plan: pd.DataFrame,
    earlier_shard_plan: pd.DataFrame,
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    selected_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """``probe_scores``: the unedited floor, the planned shards and the earlier
    edits' stored scores."""
    return probe_shards.collected_scores(
        probe_score_shards,
        score_shard_plan,
        earlier_shard_plan,
        probes,
        base_probe_scores,
        selected_edits=selected_edits,
        drops=joint_dropped_probes,
        strict_cut=ScoringSettings.from_params(params).strict_cut,
    )


def select_run_scores(
    probe_scores: pd.DataFrame, selected_edits: pd.DataFrame
) -> pd.DataFrame:
    """The scores of the edits this run evaluated, and the floor."""
    return probe_shards.run_scores(probe_scores, selected_edits)


def list_failed_edits(selected_edits: pd.DataFrame) -> pd.DataFrame:
    """The failed edits, with their reasons."""
    return probe_shards.failed_edits(selected_edits)
