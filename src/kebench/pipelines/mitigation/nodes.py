"""Nodes of mitigation: thin glue over ``kebench.editing.propagation``,
``kebench.scoring.mitigation`` and ``kebench.scoring.tamper``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from kebench.editing.interface import EditContext
from kebench.editing.propagation import joint_requests, plan_propagation
from kebench.editing.requests import requests_from_probes
from kebench.editing.runner import run_job, select_stored_edits
from kebench.editing.store import DeltaStore, EditOutcome
from kebench.models.loading import LoadedModel
from kebench.pipelines.editing.nodes import method_job
from kebench.qa.probes import case_paraphrases, edits_measured, first_stored_edits
from kebench.qa.verbaliser import Verbaliser
from kebench.scoring.evaluate import ScoringSettings, require_scored
from kebench.scoring.mitigation import (
    compare_edits,
    edit_measures,
    plot_gap_closure,
    score_mitigated,
)
from kebench.scoring.mitigation_report import (
    excluded_edits,
    mitigation_markdown,
    mitigation_table,
    tracked_metrics,
)
from kebench.scoring.tamper import audit_stored_edits, auroc_table, plot_roc

logger = logging.getLogger(__name__)


# the parameter that picks the mitigated and audited edits, as reports name it
SUBSET_PARAMETER = "mitigation.n_edits"


def select_mitigation_edits(
    edit_manifest: pd.DataFrame,
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """The stored edits to mitigate and audit: the chosen methods, and of those the
    first ``n_edits`` of each risk; their methods must have been evaluated (the
    original edits' scores come from the evaluation)."""
    edits = select_stored_edits(edit_manifest, params)
    missing = sorted(set(edits["method"]) - set(probe_scores["method"]))
    if missing:
        raise ValueError(
            f"no evaluation scores for {missing}: run the evaluation pipeline of the "
            f"same methods first (kedro run --pipelines=evaluation "
            f"--params=method={'+'.join(missing)})"
        )
    edits = first_stored_edits(edits, probes, params["n_edits"], SUBSET_PARAMETER)
    require_scored(edits, probe_scores, SUBSET_PARAMETER)
    return edits.reset_index(drop=True)


def _ok_cases(mitigation_edits: pd.DataFrame) -> list[str]:
    ok = mitigation_edits[mitigation_edits["status"] == "ok"]
    return list(dict.fromkeys(ok["case_id"]))


def plan_mitigation(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    mitigation_edits: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    entailed_questions: pd.DataFrame,
    probes: pd.DataFrame,
    relation_templates: dict[str, dict[str, str]],
    params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Split each edit's derivations of the propagated tiers into propagated and
    held-out ones: the extra edits, the entailed probes' roles, and the edits left
    out (with the reason)."""
    settings = params["propagation"]
    requests, roles, excluded = plan_propagation(
        _ok_cases(mitigation_edits),
        entailed_facts,
        entailed_questions,
        probes,
        verbaliser=Verbaliser(templates=relation_templates),
        form=settings["form"],
        tiers=list(settings["tiers"]),
        held_out_share=float(settings["held_out_share"]),
        max_extra_edits=int(settings["max_extra_edits"]),
        seed=int(settings["seed"]),
    )
    logger.info(
        "mitigation plan: %d edits get %d extra edits (by tier %s); held-out probes "
        "%s, dropped %s; %d edits excluded %s",
        requests["case_id"].nunique(),
        len(requests),
        requests["tier"].value_counts().to_dict(),
        (roles["tier"] + "_" + roles["overlap"]).value_counts().to_dict(),
        roles.loc[roles["role"].isin(["leak", "rewritten"]), "role"]
        .value_counts()
        .to_dict(),
        len(excluded),
        excluded["reason"].value_counts().to_dict(),
    )
    return requests, roles, excluded


def propagate_edits(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    propagation_requests: pd.DataFrame,
    probes: pd.DataFrame,
    mitigation_edits: pd.DataFrame,
    edit_hparams: dict[str, dict[str, Any]],
    mitigated_deltas_stored: DeltaStore,
    covariance_stats: Path,
    editing_params: dict[str, Any],
) -> Iterator[EditOutcome]:
    """Each planned edit again, with its extra edits: one MEMIT batch, or in sequence
    for the other methods; yields every delta as it is made (a rerun resumes)."""
    every_request = requests_from_probes(probes)
    direct = {r.case_id: r for r in every_request}
    context = EditContext(
        stats_dir=covariance_stats,
        pool=every_request,
        seed=int(editing_params["seed"]),
        paraphrases=case_paraphrases(probes),
        value_batch=int(editing_params["value_batch"]),
    )
    for method in sorted(mitigation_edits["method"].unique()):
        ok = set(_ok_cases(mitigation_edits[mitigation_edits["method"] == method]))
        job = method_job(method, edit_hparams, "sequential", model.name)
        if job.method.batchable:
            job = replace(job, mode="batch")
        planned = joint_requests(direct, propagation_requests, ok)
        logger.info(
            "%s: %d edits again, with %d extra edits",
            method,
            len(planned),
            sum(len(requests) - 1 for requests in planned),
        )
        # The case's own edit is made again, first in its run, rather than read
        # from the single-mode store: in that run it is not the same computation in
        # general. A MEMIT batch solves it together with its extra edits; in sequential
        # mode LoRA and UltraEdit start the state the run carries, and IKE picks its
        # demonstrations without the case facts (this context has none).
        for requests in planned:
            yield from run_job(
                model,
                requests,
                replace(job, batch_size=len(requests)),
                store=mitigated_deltas_stored,
                context=context,
                max_relative_norm=float(editing_params["max_relative_norm"]),
            )


def _settings(params: dict[str, Any]) -> ScoringSettings:
    return ScoringSettings(batch_size=int(params["batch_size"]))


def score_mitigated_probes(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    mitigation_edits: pd.DataFrame,
    mitigated_manifest: pd.DataFrame,
    propagation_requests: pd.DataFrame,
    mitigated_deltas_stored: DeltaStore,
    params: dict[str, Any],
) -> pd.DataFrame:
    """``probe_scores`` rows of each mitigated edit (its own edit and extra edits
    applied); an edit whose own or extra edits failed is left out (and reported)."""
    selected = mitigated_manifest["method"].isin(mitigation_edits["method"])
    return score_mitigated(
        model,
        probes.set_index("probe_id", drop=False),
        base_probe_scores.set_index("probe_id"),
        mitigated_manifest[selected],
        propagation_requests,
        load=mitigated_deltas_stored.load,
        settings=ScoringSettings(batch_size=int(params["batch_size"])),
    )


def compare_mitigation(
    probe_scores: pd.DataFrame,
    mitigated_probe_scores: pd.DataFrame,
    mitigation_probes: pd.DataFrame,
) -> pd.DataFrame:
    """Per mitigated edit: EditSucc, held-out (disjoint and shared) and propagated
    Consistency, locality, under the original edit and the mitigated one."""
    methods = mitigated_probe_scores["method"].unique()
    original = probe_scores[probe_scores["method"].isin(methods)]
    return compare_edits(
        edit_measures(original, mitigation_probes),
        edit_measures(mitigated_probe_scores, mitigation_probes),
    )


def summarise_mitigation(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    mitigation_edit_scores: pd.DataFrame,
    mitigation_edits: pd.DataFrame,
    mitigated_manifest: pd.DataFrame,
    mitigation_exclusions: pd.DataFrame,
    propagation_requests: pd.DataFrame,
    params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, Figure]:
    """``mitigation_metrics`` (gap closure and locality cost per method and held-out
    set, with CIs and the edits excluded), the excluded edits, and the plot."""
    excluded = excluded_edits(
        mitigation_edits,
        mitigated_manifest,
        mitigation_exclusions,
        propagation_requests,
    )
    table = mitigation_table(
        mitigation_edit_scores, excluded, seed=int(params["bootstrap_seed"])
    )
    return table, excluded, plot_gap_closure(table)


def audit_tampering(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    relation_templates: dict[str, dict[str, str]],
    base_probe_scores: pd.DataFrame,
    probe_scores: pd.DataFrame,
    mitigation_edits: pd.DataFrame,
    edit_deltas_stored: DeltaStore,
    params: dict[str, Any],
) -> pd.DataFrame:
    """``tamper_audit``: each edited model's detector scores on its own edited fact and
    on facts of other edits that it left alone and was not shown. What the evaluation
    scored under the same edit is read from ``probe_scores``."""
    audit = params["audit"]
    return audit_stored_edits(
        model,
        probes,
        entailed_facts,
        Verbaliser(templates=relation_templates),
        base_probe_scores.set_index("probe_id"),
        manifest=mitigation_edits,
        load=edit_deltas_stored.load,
        negatives=int(audit["negatives_per_edit"]),
        seed=int(audit["seed"]),
        settings=ScoringSettings(batch_size=int(params["batch_size"])),
        evaluated=probe_scores,
    )


def summarise_tamper_audit(
    tamper_audit: pd.DataFrame, params: dict[str, Any]
) -> tuple[pd.DataFrame, Figure]:
    """AUROC of each detector, edited vs unedited facts, with its CI; ROC curves."""
    table = auroc_table(tamper_audit, seed=int(params["bootstrap_seed"]))
    return table, plot_roc(tamper_audit, table)


def build_mitigation_report(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    mitigation_metrics: pd.DataFrame,
    tamper_auroc: pd.DataFrame,
    mitigation_excluded: pd.DataFrame,
    mitigation_probes: pd.DataFrame,
    mitigation_edits: pd.DataFrame,
    probes: pd.DataFrame,
) -> str:
    """The markdown report of both results, with the edits they were measured on."""
    return mitigation_markdown(
        mitigation_metrics,
        tamper_auroc,
        mitigation_excluded,
        mitigation_probes,
        edits_measured(mitigation_edits, probes, SUBSET_PARAMETER),
    )


def track_mitigation_metrics(
    mitigation_metrics: pd.DataFrame, tamper_auroc: pd.DataFrame
) -> dict[str, dict[str, float]]:
    """MLflow metrics per method (``tracked_metrics``); logged with the prefix
    ``mitigation``."""
    return tracked_metrics(mitigation_metrics, tamper_auroc)
