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

from kebench.editing.propagation import plan_propagation, requests_from_plan
from kebench.editing.registry import EditContext
from kebench.editing.requests import requests_from_probes
from kebench.editing.runner import run_job
from kebench.editing.store import DeltaStore, EditOutcome
from kebench.models.loading import LoadedModel
from kebench.pipelines.editing.nodes import method_job
from kebench.pipelines.evaluation.nodes import select_edits
from kebench.qa.verbaliser import Verbaliser
from kebench.schemas import PROBE_SCORES
from kebench.scoring.evaluate import (
    ScoringSettings,
    delta_groups,
    edited_scores,
    probe_score_rows,
)
from kebench.scoring.mitigation import (
    compare_edits,
    edit_measures,
    gap_closure_rows,
    mitigated_groups,
    plot_gap_closure,
)
from kebench.scoring.tamper import (
    audit_edits,
    audit_pool,
    audit_probes,
    auroc_table,
    plot_roc,
)

logger = logging.getLogger(__name__)


def select_mitigation_edits(
    edit_manifest: pd.DataFrame, probe_scores: pd.DataFrame, params: dict[str, Any]
) -> pd.DataFrame:
    """The stored edits to mitigate and audit; their methods must have been evaluated
    (the original edits' scores come from the evaluation)."""
    edits = select_edits(edit_manifest, params)
    missing = sorted(set(edits["method"]) - set(probe_scores["method"]))
    if missing:
        raise ValueError(
            f"no evaluation scores for {missing}: run the evaluation pipeline of the "
            f"same methods first (kedro run --pipelines=evaluation "
            f"--params=method={'+'.join(missing)})"
        )
    return edits


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
    """Split each edit's rules into propagated and held-out ones: the extra edits, the
    entailed probes' roles, and the edits left out (with the reason)."""
    settings = params["propagation"]
    requests, roles, excluded = plan_propagation(
        _ok_cases(mitigation_edits),
        entailed_facts,
        entailed_questions,
        probes,
        verbaliser=Verbaliser(templates=relation_templates),
        form=settings["form"],
        held_out_share=float(settings["held_out_share"]),
        max_extra_edits=int(settings["max_extra_edits"]),
        seed=int(settings["seed"]),
    )
    logger.info(
        "mitigation plan: %d edits get %d extra edits; %d held-out probes, %d dropped "
        "as leaks; %d edits excluded %s",
        requests["case_id"].nunique(),
        len(requests),
        int((roles["role"] == "held_out").sum()),
        int((roles["role"] == "leak").sum()),
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
    )
    extra = propagation_requests.groupby("case_id", sort=False)
    for method in sorted(mitigation_edits["method"].unique()):
        ok = set(_ok_cases(mitigation_edits[mitigation_edits["method"] == method]))
        job = method_job(method, edit_hparams, "sequential", model.name)
        if job.method.batchable:
            job = replace(job, mode="batch")
        planned = [(c, part) for c, part in extra if c in ok]
        logger.info(
            "%s: %d edits again, with %d extra edits",
            method,
            len(planned),
            sum(len(part) for _, part in planned),
        )
        for case_id, part in planned:
            requests = [direct[case_id], *requests_from_plan(part)]
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
    applied): its direct, entailed and locality probes. An edit whose own or extra
    edits failed is left out (and reported)."""
    by_id = probes.set_index("probe_id", drop=False)
    base = base_probe_scores.set_index("probe_id")
    selected = mitigated_manifest["method"].isin(mitigation_edits["method"])
    parts = []
    for method, rows in mitigated_manifest[selected].groupby("method"):
        # a case with a failed edit of its own or an extra one has a row missing
        # among the ok rows: mitigated_groups leaves it out
        groups = mitigated_groups(
            rows[rows["status"] == "ok"],
            propagation_requests,
            mitigated_deltas_stored.load,
        )
        scores = edited_scores(
            model,
            by_id[by_id["probe_type"].isin(["direct", "entailed", "locality"])],
            groups,
            _settings(params),
            description=f"scoring mitigated {method}",
        )
        parts.append(probe_score_rows(by_id, base, scores, model.name, method))
    if not parts:
        return PROBE_SCORES.validate(pd.DataFrame(columns=list(PROBE_SCORES.columns)))
    return PROBE_SCORES.validate(pd.concat(parts, ignore_index=True))


def compare_mitigation(
    probe_scores: pd.DataFrame,
    mitigated_probe_scores: pd.DataFrame,
    mitigation_probes: pd.DataFrame,
) -> pd.DataFrame:
    """Per mitigated edit: EditSucc, held-out and propagated Consistency, locality,
    under the original edit and the mitigated one."""
    methods = mitigated_probe_scores["method"].unique()
    original = probe_scores[probe_scores["method"].isin(methods)]
    return compare_edits(
        edit_measures(original, mitigation_probes),
        edit_measures(mitigated_probe_scores, mitigation_probes),
    )


def _exclusions(
    mitigation_edits: pd.DataFrame,
    mitigated_manifest: pd.DataFrame,
    mitigation_exclusions: pd.DataFrame,
    propagation_requests: pd.DataFrame,
) -> pd.DataFrame:
    """``method, case_id, reason`` of every selected edit left out of gap closure."""
    member_of = dict(
        zip(
            propagation_requests["fact_id"],
            propagation_requests["case_id"],
            strict=True,
        )
    )
    parts = []
    for method, rows in mitigation_edits.groupby("method"):
        failed = rows[rows["status"] == "failed"]
        parts.append(
            pd.DataFrame(
                {
                    "method": method,
                    "case_id": failed["case_id"],
                    "reason": "the edit failed: " + failed["reason"],
                }
            )
        )
        ok = set(rows.loc[rows["status"] == "ok", "case_id"])
        planned = mitigation_exclusions[mitigation_exclusions["case_id"].isin(ok)]
        parts.append(planned.assign(method=method))
        broken = mitigated_manifest[
            (mitigated_manifest["method"] == method)
            & (mitigated_manifest["status"] == "failed")
            & mitigated_manifest["case_id"].isin([*member_of, *member_of.values()])
        ]
        parts.append(
            pd.DataFrame(
                {
                    "method": method,
                    "case_id": broken["case_id"].map(lambda c: member_of.get(c, c)),
                    "reason": "a propagation edit failed: " + broken["reason"],
                }
            ).drop_duplicates("case_id")
        )
    return pd.concat(parts, ignore_index=True)[["method", "case_id", "reason"]]


def summarise_mitigation(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    mitigation_edit_scores: pd.DataFrame,
    mitigation_edits: pd.DataFrame,
    mitigated_manifest: pd.DataFrame,
    mitigation_exclusions: pd.DataFrame,
    propagation_requests: pd.DataFrame,
    params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, Figure]:
    """``mitigation_metrics`` (gap closure and locality cost per method, with CIs and
    the number of edits excluded), the excluded edits, and the plot."""
    excluded = _exclusions(
        mitigation_edits,
        mitigated_manifest,
        mitigation_exclusions,
        propagation_requests,
    )
    table = pd.DataFrame(
        gap_closure_rows(mitigation_edit_scores, seed=int(params["bootstrap_seed"]))
    )
    if table.empty:
        raise ValueError(
            "no edit can be mitigated and tested: every selected edit was excluded "
            f"({excluded['reason'].value_counts().to_dict()}); edit cases whose "
            "consequences come from two rules or more (n_edits=all)"
        )
    table["n_excluded"] = table["method"].map(excluded["method"].value_counts())
    table["n_excluded"] = table["n_excluded"].fillna(0).astype(int)
    return table, excluded, plot_gap_closure(table)


def audit_tampering(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    relation_templates: dict[str, dict[str, str]],
    base_probe_scores: pd.DataFrame,
    mitigation_edits: pd.DataFrame,
    edit_deltas_stored: DeltaStore,
    params: dict[str, Any],
) -> pd.DataFrame:
    """``tamper_audit``: each edited model's detector scores on its own edited fact and
    on facts of other edits that it left alone."""
    ok = mitigation_edits[mitigation_edits["status"] == "ok"]
    pool = audit_pool(probes, list(ok["case_id"]))
    edits = []
    for method, rows in ok[ok["case_id"].isin(pool)].groupby("method"):
        for case_ids, deltas in delta_groups(rows, edit_deltas_stored.load):
            edits.append((method, case_ids[0], deltas[0]))
    if len(pool) < 2:  # noqa: PLR2004 - an edited fact and an unedited one
        raise ValueError(
            f"the tamper audit needs two edits with entailed probes, found {len(pool)}: "
            "edit more cases (n_edits=all)"
        )
    audit = params["audit"]
    return audit_edits(
        model,
        audit_probes(
            probes, entailed_facts, pool, Verbaliser(templates=relation_templates)
        ),
        base_probe_scores.set_index("probe_id"),
        edits,
        pool,
        negatives=int(audit["negatives_per_edit"]),
        seed=int(audit["seed"]),
        settings=_settings(params),
    )


def summarise_tamper_audit(
    tamper_audit: pd.DataFrame, params: dict[str, Any]
) -> tuple[pd.DataFrame, Figure]:
    """AUROC of each detector, edited vs unedited facts, with its CI; ROC curves."""
    table = auroc_table(tamper_audit, seed=int(params["bootstrap_seed"]))
    return table, plot_roc(tamper_audit, table)


def _closure_cell(row: Any) -> str:
    if pd.isna(row.gap_closure):
        return "no gap to close"
    return (
        f"{row.gap_closure:.2f} [{row.gap_closure_ci_low:.2f}, "
        f"{row.gap_closure_ci_high:.2f}]"
    )


def build_mitigation_report(
    mitigation_metrics: pd.DataFrame,
    tamper_auroc: pd.DataFrame,
    mitigation_excluded: pd.DataFrame,
) -> str:
    """The markdown report of both results."""
    lines = ["# kebench mitigation", "", "## Rule-guided propagation", ""]
    lines += [
        "| method | edits | held-out probes | EditSucc | Consistency (original) | "
        "Consistency (mitigated) | gap closure [95% CI] | locality cost [95% CI] | "
        "excluded |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in mitigation_metrics.itertuples():
        lines.append(
            f"| {row.method} | {row.n_edits} | {row.n_held_out_probes} | "
            f"{100 * row.edit_succ:.1f} | {100 * row.consistency:.1f} | "
            f"{100 * row.consistency_mitigated:.1f} | {_closure_cell(row)} | "
            f"{100 * row.locality_cost:.1f} [{100 * row.locality_cost_ci_low:.1f}, "
            f"{100 * row.locality_cost_ci_high:.1f}] | {row.n_excluded} |"
        )
    reasons = mitigation_excluded.groupby(["method", "reason"]).size()
    if len(reasons):
        lines += ["", "Excluded edits:", ""]
        lines += [f"- {m}: {n} × {reason}" for (m, reason), n in reasons.items()]
    lines += ["", "## Tamper audit", ""]
    lines += [
        "| method | detector | AUROC [95% CI] | edited | unedited |",
        "|---|---|---|---|---|",
    ]
    for row in tamper_auroc.itertuples():
        lines.append(
            f"| {row.method} | {row.detector} | {row.auroc:.2f} "
            f"[{row.auroc_ci_low:.2f}, {row.auroc_ci_high:.2f}] | {row.n_edited} | "
            f"{row.n_unedited} |"
        )
    return "\n".join(lines) + "\n"


MITIGATION_TRACKED = (
    "gap_closure",
    "consistency",
    "consistency_mitigated",
    "edit_succ",
    "locality_cost",
    "n_edits",
    "n_excluded",
)


def track_mitigation_metrics(
    mitigation_metrics: pd.DataFrame, tamper_auroc: pd.DataFrame
) -> dict[str, dict[str, float]]:
    """MLflow metrics per method: ``<measure>`` (gap closure with ``_ci_*``) and
    ``tamper.<detector>.auroc``; logged with the prefix ``mitigation``."""
    tracked: dict[str, dict[str, float]] = {}
    for row in mitigation_metrics.to_dict("records"):
        values = tracked.setdefault(row["method"], {})
        for column in MITIGATION_TRACKED:
            for key in (column, f"{column}_ci_low", f"{column}_ci_high"):
                if pd.notna(row.get(key)):
                    values[key] = float(row[key])
    for row in tamper_auroc.to_dict("records"):
        values = tracked.setdefault(row["method"], {})
        for key in ("auroc", "auroc_ci_low", "auroc_ci_high"):
            values[f"tamper.{row['detector']}.{key}"] = float(row[key])
    return tracked
