"""Nodes of evaluation after the probe scores: CounterFact's standard metrics, the
generations and their judge, the metrics, the methods compared, the report and MLflow's
metrics; thin glue over ``kebench.scoring``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pandas as pd
from matplotlib.figure import Figure

from kebench.compute.engine import ComputeSettings, run_shards
from kebench.editing.store import DeltaStore
from kebench.models.loading import LoadedModel
from kebench.pipelines.editing.nodes import EDITS_PARAMETER
from kebench.scoring import counterfact
from kebench.scoring.evaluation_report import evaluation_report, run_description
from kebench.scoring.generation import generation_table
from kebench.scoring.judge import judged_generations
from kebench.scoring.metrics import OutcomeSettings
from kebench.scoring.run_metrics import run_comparison, run_metrics, tracked_metrics


def score_counterfact_base(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    counterfact_prompts: pd.DataFrame,
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """CounterFact's standard metrics of the edited cases under the unedited model;
    empty for other datasets."""
    cases = selected_edits["case_id"]
    return counterfact.unedited_scores(
        model,
        counterfact_prompts,
        cases,
        probes,
        base_probe_scores,
        settings=counterfact.CounterfactSettings.from_params(params),
        reference_files=params["counterfact"],
    )


def score_counterfact_shards(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    counterfact_prompts: pd.DataFrame,
    score_shard_plan: pd.DataFrame,
    counterfact_score_shards_stored: dict[str, Any],
    edit_deltas_stored: DeltaStore,
    probes: pd.DataFrame,
    run_probe_scores: pd.DataFrame,
    params: dict[str, Any],
    compute: dict[str, Any],
) -> Iterator[dict[str, pd.DataFrame]]:
    """CounterFact's standard metrics of each scoring shard's cases under its edited
    model, shard by shard; stored shards are not scored again."""
    shards = counterfact.edited_shards(
        counterfact_prompts,
        score_shard_plan,
        probes,
        run_probe_scores,
        counterfact_score_shards_stored,
        store_root=str(edit_deltas_stored.root),
        settings=counterfact.CounterfactSettings.from_params(params),
        reference_files=params["counterfact"],
    )
    if not shards:  # nothing to score: no Dask client, no empty progress bar
        return
    settings = ComputeSettings.from_params(compute)
    for key, scores in run_shards(
        model, counterfact.score_shard, shards, settings, "CounterFact"
    ):
        yield {key: scores}


def collect_counterfact_scores(
    counterfact_score_shards: dict[str, Any],
    counterfact_base_scores: pd.DataFrame,
    score_shard_plan: pd.DataFrame,
    counterfact_prompts: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """``counterfact_scores``: the unedited model's, then every planned shard's."""
    return counterfact.collected_scores(
        counterfact_score_shards,
        counterfact_base_scores,
        score_shard_plan,
        counterfact_prompts,
        counterfact.CounterfactSettings.from_params(params),
    )


def tabulate_generations(
    probe_scores: pd.DataFrame, probes: pd.DataFrame
) -> pd.DataFrame:
    """The free generations behind ``wild`` and ``bke_f1``, one row per probe and
    model."""
    return generation_table(probe_scores, probes)


def judge_generations(
    generations: pd.DataFrame,
    probes: pd.DataFrame,
    judge_llm: openai.OpenAI,
    params: dict[str, Any],
) -> pd.DataFrame:
    """The LLM judge's verdict on each free generation (none unless
    ``judge.enabled``)."""
    return judged_generations(generations, probes, judge_llm, params["judge"])


def compute_metrics(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    premise_knowledge: pd.DataFrame,
    judgements: pd.DataFrame,
    counterfact_scores: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """Every metric per (model, method, risk, probe_type), with protocol, population,
    95% CI over edits, and n."""
    return run_metrics(
        probe_scores,
        probes,
        failed_edits,
        joint_dropped_probes,
        premise_knowledge,
        judgements=judgements,
        counterfact_scores=counterfact_scores,
        settings=OutcomeSettings.from_params(params),
        seed=int(params["bootstrap_seed"]),
    )


def compare_methods(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's methods on the edits they all have: their headline there, and each
    method's paired differences from ``comparison.reference``."""
    return run_comparison(
        probe_scores,
        probes,
        failed_edits,
        joint_dropped_probes,
        OutcomeSettings.from_params(params),
        population=params["headline_population"],
        reference=params["comparison"]["reference"],
        seed=int(params["bootstrap_seed"]),
    )


def build_report(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    metrics: pd.DataFrame,
    probe_scores: pd.DataFrame,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    shared_headline: pd.DataFrame,
    method_comparison: pd.DataFrame,
    params: dict[str, Any],
    run: dict[str, str],
) -> tuple[str, pd.DataFrame, Figure, Figure, Figure]:
    """The markdown report, its headline table (in ``headline_population``), and the
    plots."""
    return evaluation_report(
        metrics,
        probe_scores,
        probes,
        selected_edits,
        entailed_facts,
        failed_edits=failed_edits,
        joint_dropped_probes=joint_dropped_probes,
        shared_headline=shared_headline,
        method_comparison=method_comparison,
        population=params["headline_population"],
        run=run,
        edits_parameter=EDITS_PARAMETER,
    )


def describe_run(
    model: LoadedModel,
    entailed_facts: pd.DataFrame,
    selected_edits: pd.DataFrame,
    edit_hparams: dict[str, dict[str, Any]],
    hparams_provenance: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """What the run evaluated: model, methods, mode, semantics and hparams."""
    return run_description(
        model.name, entailed_facts, selected_edits, edit_hparams, hparams_provenance
    )


def track_metrics(
    metrics: pd.DataFrame, failed_edits: pd.DataFrame
) -> dict[str, dict[str, float]]:
    """MLflow metrics per method, logged with the prefix ``evaluation``."""
    return tracked_metrics(metrics, failed_edits)
