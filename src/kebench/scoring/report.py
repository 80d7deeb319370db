"""The evaluation report: the paper's headline table and its plots."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

HEADLINE = [
    ("direct", "edit_succ", "EditSucc (direct)"),
    ("entailed", "consistency", "Consistency (entailed)"),
    ("direct-entailed", "gap", "Gap"),
    ("locality", "locality", "Locality"),
    # the same over what the base model knows (docs/evaluation.md, known premises)
    ("direct", "edit_succ_known", "EditSucc (known fact)"),
    ("entailed", "consistency_known", "Consistency (known premises)"),
]


POPULATION_TEXT = {
    "itt": "intention to treat: every requested edit, a failed edit counting as a "
    "failure of each of its probes",
    "ok_edits": "the edits that succeeded: failed edits are left out",
}


def headline_table(metrics: pd.DataFrame, population: str) -> pd.DataFrame:
    """Direct vs entailed per (model, method, risk), as in the paper, with CIs and n,
    in one population (``itt`` or ``ok_edits``; locality is always ``ok_edits``)."""
    if population not in POPULATION_TEXT:
        raise ValueError(
            f"unknown headline population {population!r}; use one of "
            f"{sorted(POPULATION_TEXT)}"
        )
    keys = ["model", "method", "risk"]
    table = None
    for probe_type, metric, label in HEADLINE:
        form = "ok_edits" if metric == "locality" else population
        part = metrics[
            (metrics["probe_type"] == probe_type)
            & (metrics["metric"] == metric)
            & (metrics["population"] == form)
        ]
        part = part.set_index(keys)[["value", "ci_low", "ci_high", "n"]]
        part.columns = [f"{label} {c}" if c != "value" else label for c in part.columns]
        table = part if table is None else table.join(part, how="outer")
    return table.reset_index().assign(population=population)


def _cell(row: pd.Series, label: str) -> str:
    value = row.get(label)
    if value is None or pd.isna(value):
        return "–"
    return (
        f"{100 * value:.1f} [{100 * row[f'{label} ci_low']:.1f}, "
        f"{100 * row[f'{label} ci_high']:.1f}] (n={int(row[f'{label} n'])})"
    )


def report_markdown(  # noqa: PLR0913 - the report's parts and its tags
    headline: pd.DataFrame,
    failures: pd.DataFrame,
    drops: pd.DataFrame,
    title: str,
    population: str,
    *,
    semantics: str,
) -> str:
    """The report as markdown: the headline table (of ``population``) in %, with 95%
    bootstrap CIs, the failed edits, and the probes joint scoring dropped
    (``drops``: ``kebench.scoring.evaluate.drop_counts``). ``semantics``: how the
    entailed probes were derived (``paper`` or ``consistent``, docs/qa_generation.md)."""
    labels = [label for *_, label in HEADLINE]
    lines = [
        f"# {title}",
        "",
        f"Entailed probes: `{semantics}` semantics (docs/qa_generation.md). The "
        "*known* columns keep only the edits whose original fact, and the entailed "
        "probes whose premises, the base model knows (it prefers the KG's answer over "
        "the relation's other answers).",
        "",
        f"Population of EditSucc, Consistency and the gap: `{population}` "
        f"({POPULATION_TEXT[population]}); locality: `ok_edits`. `metrics.csv` has "
        "both populations (column `population`).",
        "",
        "Percentages with 95% bootstrap confidence intervals, which resample edits "
        "(the probes of one edit together), and the number of probes "
        "(edits for Consistency's mean over edits; the gap is paired over edits that "
        "have entailed probes, n counts those probes). EditSucc, Consistency and the "
        "gap compare probabilities (protocol `prob`); locality compares argmax tokens "
        "before and after the edit (`argmax`). `unedited` is the floor: the base model "
        "scored as if it were edited.",
        "",
        "| model | method | risk | " + " | ".join(labels) + " |",
        "|" + "---|" * (3 + len(labels)),
    ]
    for _, row in headline.iterrows():
        cells = [_cell(row, label) for label in labels]
        lines.append(
            f"| {row['model']} | {row['method']} | {row['risk']} | "
            + " | ".join(cells)
            + " |"
        )
    if len(failures):
        lines += [
            "",
            "## Failed edits (failures in `itt`, left out of `ok_edits`)",
            "",
            "| method | failed | reasons |",
            "|---|---|---|",
        ]
        for method, part in failures.groupby("method"):
            reasons = "; ".join(sorted(set(part["reason"].astype(str))))[:300]
            lines.append(f"| {method} | {len(part)} | {reasons} |")
    if len(drops):
        lines += [
            "",
            "## Probes dropped in joint scoring",
            "",
            "Edits that act together (a batch, a sequential run) change each other's "
            "facts: a probe whose fact another edit of its batch or run rewrites "
            "(`other_edit_fact`: that edit's own fact; `other_edit_consequence`: one "
            "of its consequences) is not scored.",
            "",
            "| method | mode | probe type | reason | probes |",
            "|---|---|---|---|---|",
        ]
        for row in drops.to_dict("records"):
            lines.append(
                f"| {row['method']} | {row['mode']} | {row['probe_type']} | "
                f"{row['reason']} | {row['probes']} |"
            )
    return "\n".join(lines) + "\n"


def plot_direct_vs_entailed(headline: pd.DataFrame) -> Figure:
    """Bars of EditSucc (direct) and Consistency (entailed) per method, with 95% CIs."""
    figure, axes = plt.subplots(figsize=(max(6.0, 1.4 * len(headline)), 4.0))
    x = np.arange(len(headline))
    for offset, label in ((-0.2, "EditSucc (direct)"), (0.2, "Consistency (entailed)")):
        values = headline[label].fillna(0).to_numpy() * 100
        low = headline[f"{label} ci_low"].fillna(0).to_numpy() * 100
        high = headline[f"{label} ci_high"].fillna(0).to_numpy() * 100
        axes.bar(
            x + offset,
            values,
            width=0.4,
            label=label,
            yerr=np.vstack([values - low, high - values]),
            capsize=3,
        )
    axes.set_xticks(
        x,
        [
            f"{m}\n{r}"
            for m, r in zip(headline["method"], headline["risk"], strict=True)
        ],
    )
    axes.set_ylabel("% of probes (95% CI)")
    axes.set_ylim(0, 105)
    axes.set_title("Direct edits vs their entailed consequences")
    axes.legend(loc="upper right")
    figure.tight_layout()
    return figure


def plot_consistency_distribution(per_edit: pd.DataFrame) -> Figure:
    """Per-edit Consistency (eq. 2), one box per method, with the edits as points."""
    scored = per_edit.dropna(subset=["consistency"])
    methods = sorted(scored["method"].unique())
    figure, axes = plt.subplots(figsize=(max(6.0, 1.2 * len(methods)), 4.0))
    data = [
        scored.loc[scored["method"] == m, "consistency"].to_numpy() * 100
        for m in methods
    ]
    if methods:
        axes.boxplot(data, tick_labels=methods)
        rng = np.random.default_rng(0)
        for i, values in enumerate(data, start=1):
            axes.scatter(
                i + rng.uniform(-0.12, 0.12, len(values)), values, s=10, alpha=0.5
            )
    axes.set_ylabel("Consistency per edit (%)")
    axes.set_title("Distribution of per-edit consistency")
    figure.tight_layout()
    return figure
