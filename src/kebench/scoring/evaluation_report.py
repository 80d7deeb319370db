"""An evaluation run's report and description: the markdown, the headline table and
the plots (the parts are ``kebench.scoring.report``'s; ``comparison`` uses those parts,
so the whole is put together here), and what the run evaluated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from kebench.editing.hparams import describe_resolved
from kebench.qa.probes import edits_measured
from kebench.scoring.comparison import comparison_lines, edit_sets_differ, shared_edits
from kebench.scoring.evaluate import drop_counts
from kebench.scoring.metrics import per_edit_consistency, probe_outcomes, with_roles
from kebench.scoring.report import (
    counterfact_table,
    detail_table,
    echo_shares,
    generation_section,
    headline_table,
    plot_consistency_distribution,
    plot_direct_vs_entailed,
    plot_gap_vs_edit_succ,
    protocol_table,
    reply_summary,
    report_markdown,
    run_name,
)


def consequence_semantics(entailed_facts: pd.DataFrame) -> str:
    """How the entailed probes were derived (``entailed_facts.semantics``)."""
    found = sorted(set(entailed_facts["semantics"]))
    return "+".join(found) if found else "none (no entailed facts)"


def evaluation_report(  # noqa: PLR0913 - what is left out and compared, keyword-only
    metrics: pd.DataFrame,
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    selected_edits: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    *,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    shared_headline: pd.DataFrame,
    method_comparison: pd.DataFrame,
    population: str,
    run: Mapping[str, str],
    edits_parameter: str,
) -> tuple[str, pd.DataFrame, Figure, Figure, Figure]:
    """The markdown report, titled by what the run measured (``run``: dataset, model,
    profile), its headline table (in ``population``), and the plots, which put
    methods evaluated on different edits side by side on the edits they share only.
    ``edits_parameter`` is the parameter that picked the edits, as the report names
    it."""
    headline = headline_table(metrics, population)
    per_edit = per_edit_consistency(with_roles(probe_outcomes(probe_scores), probes))
    evaluated = probes[probes["case_id"].isin(selected_edits["case_id"])]
    differ = edit_sets_differ(probe_scores) and len(shared_headline) > 0
    compared = shared_headline if differ else headline
    note = (
        f"on the {len(shared_edits(probe_scores))} edits every method has"
        if differ
        else ""
    )
    markdown = report_markdown(
        headline,
        failed_edits,
        drop_counts(joint_dropped_probes),
        f"kebench evaluation · {run_name(run)}",
        population,
        semantics=consequence_semantics(entailed_facts),
        edits=edits_measured(selected_edits, probes, edits_parameter),
        details=detail_table(metrics, population),
        echoes=echo_shares(evaluated),
        protocols=protocol_table(metrics, population),
        counterfact=counterfact_table(metrics),
        generations=generation_section(reply_summary(probe_scores), metrics),
        comparison=comparison_lines(probe_scores, shared_headline, method_comparison),
    )
    return (
        markdown,
        headline,
        plot_direct_vs_entailed(compared, note),
        plot_consistency_distribution(per_edit),
        plot_gap_vs_edit_succ(compared, note),
    )


def run_description(
    model_name: str,
    entailed_facts: pd.DataFrame,
    selected_edits: pd.DataFrame,
    edit_hparams: dict[str, dict[str, Any]],
    hparams_provenance: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """What the run evaluated: model, methods, mode, the entailed probes' semantics,
    each method's hparams, and which of them were derived from which reference."""
    methods = sorted(selected_edits["method"].unique())
    return {
        "model": model_name,
        "methods": "+".join(methods),
        "mode": selected_edits["mode"].iloc[0],
        "consequence_semantics": consequence_semantics(entailed_facts),
        **describe_resolved(methods, edit_hparams, hparams_provenance),
    }
