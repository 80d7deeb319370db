"""Mitigation summaries: the edits left out of gap closure, the table per method and
held-out set, the markdown report, and the MLflow metrics."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kebench.scoring.mitigation import HELD_OUT, gap_closure_rows


def excluded_edits(
    edits: pd.DataFrame,
    mitigated_manifest: pd.DataFrame,
    plan_exclusions: pd.DataFrame,
    requests: pd.DataFrame,
) -> pd.DataFrame:
    """``method, case_id, reason`` of every selected edit left out of gap closure: its
    own edit failed, the plan excluded it, or one of its mitigated edits failed.

    Args:
        edits: the selected stored edits (manifest rows of every method).
        mitigated_manifest: the mitigated store's rows.
        plan_exclusions: ``case_id, reason`` from ``plan_propagation``.
        requests: the extra edits (``PROPAGATION_REQUESTS``).
    """
    member_of = dict(zip(requests["fact_id"], requests["case_id"], strict=True))
    parts = []
    for method, rows in edits.groupby("method"):
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
        planned = plan_exclusions[plan_exclusions["case_id"].isin(ok)]
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


def mitigation_table(
    edit_scores: pd.DataFrame, excluded: pd.DataFrame, seed: int = 0
) -> pd.DataFrame:
    """``gap_closure_rows`` per (model, method, held-out set), with the number of the
    method's edits excluded.

    Raises:
        ValueError: no edit could be mitigated and tested.
    """
    table = pd.DataFrame(gap_closure_rows(edit_scores, seed=seed))
    if table.empty:
        raise ValueError(
            "no edit can be mitigated and tested: every selected edit was excluded "
            f"({excluded['reason'].value_counts().to_dict()}); edit cases whose "
            "consequences come from two rules or more (n_edits=all)"
        )
    counts = excluded["method"].value_counts()
    table["n_excluded"] = table["method"].map(counts).fillna(0).astype(int)
    return table


def _closure_cell(row: Any) -> str:
    if pd.isna(row.gap_closure):
        return "no gap to close"
    return (
        f"{row.gap_closure:.2f} [{row.gap_closure_ci_low:.2f}, "
        f"{row.gap_closure_ci_high:.2f}]"
    )


def _dropped_lines(roles: pd.DataFrame) -> list[str]:
    held_rows = roles[roles["role"] == "held_out"]
    held = (held_rows["tier"] + "_" + held_rows["overlap"]).value_counts()
    dropped = roles["role"].value_counts()
    counts = ", ".join(f"{held.get(h, 0)} {h}" for h in HELD_OUT)
    return [
        "",
        f"Held-out probes: {counts} (shared: a relation or a new answer of an extra "
        f"edit of the case); dropped: {dropped.get('leak', 0)} held-out probes whose "
        f"consequence an extra edit states (leak), {dropped.get('rewritten', 0)} "
        "locality probes whose fact an extra edit rewrites.",
    ]


def mitigation_markdown(
    metrics: pd.DataFrame,
    tamper_auroc: pd.DataFrame,
    excluded: pd.DataFrame,
    roles: pd.DataFrame,
    edits: str,
) -> str:
    """The markdown report of both results; the headline is the ``disjoint`` rows.
    ``edits`` says which edits were mitigated and audited
    (``kebench.qa.probes.edits_measured``)."""
    lines = ["# kebench mitigation", "", edits, "", "## Rule-guided propagation", ""]
    lines += [
        f"Gap closure per tier and held-out set; the headline is `{HELD_OUT[0]}` "
        "(deductive consequences held out of the propagation that share neither the "
        "relation nor the new answer of an extra edit). The extra edits come from the "
        "tiers `mitigation.propagation.tiers` names (deductive by default: what logic "
        "forces); a tier not propagated has every probe held out, and its rows say "
        "what the other tier's extra edits did to it.",
        "",
        "| method | held-out set | edits | held-out probes | EditSucc | "
        "Consistency (original) | Consistency (mitigated) | gap closure [95% CI] | "
        "locality cost [95% CI] | excluded |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in metrics.itertuples():
        lines.append(
            f"| {row.method} | {row.held_out} | {row.n_edits} | "
            f"{row.n_held_out_probes} | {100 * row.edit_succ:.1f} | "
            f"{100 * row.consistency:.1f} | {100 * row.consistency_mitigated:.1f} | "
            f"{_closure_cell(row)} | {100 * row.locality_cost:.1f} "
            f"[{100 * row.locality_cost_ci_low:.1f}, "
            f"{100 * row.locality_cost_ci_high:.1f}] | {row.n_excluded} |"
        )
    if HELD_OUT[0] not in set(metrics["held_out"]):
        lines += [
            "",
            f"No mitigated edit has `{HELD_OUT[0]}` held-out probes: the headline is "
            "not computed on this run.",
        ]
    lines += _dropped_lines(roles)
    reasons = excluded.groupby(["method", "reason"]).size()
    if len(reasons):
        lines += ["", "Excluded edits:", ""]
        lines += [f"- {m}: {n} × {reason}" for (m, reason), n in reasons.items()]
    lines += ["", "## Tamper audit", ""]
    lines += [
        "| method | detector | AUROC [95% CI] | edited | unedited | "
        "seen in the prefix, left out |",
        "|---|---|---|---|---|---|",
    ]
    for row in tamper_auroc.itertuples():
        lines.append(
            f"| {row.method} | {row.detector} | {row.auroc:.2f} "
            f"[{row.auroc_ci_low:.2f}, {row.auroc_ci_high:.2f}] | {row.n_edited} | "
            f"{row.n_unedited} | {row.n_seen_excluded} |"
        )
    return "\n".join(lines) + "\n"


TRACKED = (
    "gap_closure",
    "consistency",
    "consistency_mitigated",
    "edit_succ",
    "locality_cost",
    "n_edits",
    "n_excluded",
    "n_held_out_probes",
    "n_locality_dropped",
)


def tracked_metrics(
    metrics: pd.DataFrame, tamper_auroc: pd.DataFrame
) -> dict[str, dict[str, float]]:
    """MLflow metrics per method: ``<held-out set>.<measure>`` (gap closure with
    ``_ci_*``) and ``tamper_<negatives>.<detector>.auroc``; NaN values are not
    logged."""
    tracked: dict[str, dict[str, float]] = {}
    for row in metrics.to_dict("records"):
        values = tracked.setdefault(row["method"], {})
        for column in TRACKED:
            for key in (column, f"{column}_ci_low", f"{column}_ci_high"):
                if pd.notna(row.get(key)):
                    values[f"{row['held_out']}.{key}"] = float(row[key])
    for row in tamper_auroc.to_dict("records"):
        values = tracked.setdefault(row["method"], {})
        for key in ("auroc", "auroc_ci_low", "auroc_ci_high"):
            values[f"tamper_{row['negatives']}.{row['detector']}.{key}"] = float(
                row[key]
            )
    return tracked
