"""An evaluation run's metrics: every metric of its scores in one table, its methods
compared on the edits they share, and the metrics it logs to MLflow."""

from __future__ import annotations

import pandas as pd

from kebench.schemas import METRICS, UNEDITED
from kebench.scoring import counterfact
from kebench.scoring.comparison import method_comparison
from kebench.scoring.metrics import OutcomeSettings, metrics_table, outcome_tables
from kebench.scoring.premises import known_probes, known_share


def run_metrics(  # noqa: PLR0913 - the further tables and settings are keyword-only
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    premise_knowledge: pd.DataFrame,
    *,
    judgements: pd.DataFrame,
    counterfact_scores: pd.DataFrame,
    settings: OutcomeSettings,
    seed: int,
) -> pd.DataFrame:
    """Every metric per (model, method, risk, probe_type), with protocol, population
    (``ok_edits``; ``itt``, where the failed edits count as failures, on the probes
    joint scoring kept), 95% CI over edits, and n; also over the probes whose premises
    the base model knows (``*_known``), the share of known premises, and CounterFact's
    standard metrics (protocol ``counterfact``, its successful edits)."""
    outcomes, failed = outcome_tables(
        probe_scores,
        probes,
        failed_edits,
        joint_dropped_probes,
        settings,
        judgements=judgements,
    )
    table = metrics_table(
        outcomes,
        seed=seed,
        failed=failed,
        known=known_probes(premise_knowledge, probes),
    )
    shares = known_share(premise_knowledge, seed)
    shares = shares.assign(
        method=UNEDITED,
        risk="all",
        metric="premises_known_" + shares["direction"],
        protocol="wild",
        population="ok_edits",
    )
    parts = [
        table,
        shares.rename(columns={"kind": "probe_type", "known_share": "value"}),
    ]
    if standard := counterfact.metric_rows(counterfact_scores, seed):
        parts.append(pd.DataFrame(standard).assign(population="ok_edits"))
    table = pd.concat(parts, ignore_index=True)
    return METRICS.validate(table.reindex(columns=list(METRICS.columns)))


def run_comparison(  # noqa: PLR0913 - the population and reference are keyword-only
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    settings: OutcomeSettings,
    *,
    population: str,
    reference: str | None,
    seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's methods on the edits they all have: their headline there (in
    ``population``), and each method's paired differences from ``reference``."""
    outcomes, failed = outcome_tables(
        probe_scores, probes, failed_edits, joint_dropped_probes, settings
    )
    return method_comparison(outcomes, failed, population, reference, seed)


def tracked_metrics(
    metrics: pd.DataFrame, failed_edits: pd.DataFrame
) -> dict[str, dict[str, float]]:
    """MLflow metrics per method: ``<risk>.<probe_type>.<metric>`` (and ``.ci_*``)
    over the successful edits, ``<risk>.<probe_type>.<metric>_itt`` intention to
    treat, plus ``failed_edits``."""
    tracked: dict[str, dict[str, float]] = {}
    for row in metrics.to_dict("records"):
        values = tracked.setdefault(row["method"], {})
        suffix = "" if row["population"] == "ok_edits" else f"_{row['population']}"
        key = f"{row['risk']}.{row['probe_type']}.{row['metric']}{suffix}"
        values[key] = float(row["value"])
        for bound in ("ci_low", "ci_high"):
            if pd.notna(row[bound]):
                values[f"{key}.{bound}"] = float(row[bound])
    for method, values in tracked.items():
        values["failed_edits"] = float((failed_edits["method"] == method).sum())
    return tracked
