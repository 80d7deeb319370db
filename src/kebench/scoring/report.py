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


# the headline's numbers are teacher-forced (the generated ones: ``protocol_table``)
HEADLINE_PROTOCOLS = ("prob", "argmax")

# What the floor's numbers mean, for a reader who takes its EditSucc for a success.
UNEDITED_TEXT = (
    "`unedited` is the floor, the base model scored as if it were edited: its "
    "EditSucc (protocol `prob`) is the share of direct probes whose new answer the "
    "base model already prefers to the old one, and its Consistency and gap are the "
    "same base rates for the entailed probes, not edits that worked. An edit whose "
    "consequences all follow has a gap of 0 whatever the floor: read a method's "
    "EditSucc and Consistency against the floor's, and its gap against 0."
)

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
    parts = []
    for probe_type, metric, label in HEADLINE:
        form = "ok_edits" if metric == "locality" else population
        part = metrics[
            (metrics["probe_type"] == probe_type)
            & (metrics["metric"] == metric)
            & (metrics["population"] == form)
            & metrics["protocol"].isin(HEADLINE_PROTOCOLS)
        ]
        parts.append((part, label))
    return _side_by_side(parts).assign(population=population)


def _side_by_side(parts: list[tuple[pd.DataFrame, str]]) -> pd.DataFrame:
    """One row per (model, method, risk): each part's value, CI and n under its
    label."""
    keys = ["model", "method", "risk"]
    table = None
    for rows, label in parts:
        part = rows.set_index(keys)[["value", "ci_low", "ci_high", "n"]]
        part.columns = [f"{label} {c}" if c != "value" else label for c in part.columns]
        table = part if table is None else table.join(part, how="outer")
    return table.reset_index()


# CounterFact's standard metrics under the names of ROME's tables
# (kebench.scoring.counterfact)
COUNTERFACT_COLUMNS = [
    ("cf_score", "S"),
    ("cf_efficacy_score", "ES"),
    ("cf_paraphrase_score", "PS"),
    ("cf_neighborhood_score", "NS"),
    ("cf_efficacy_magnitude", "EM"),
    ("cf_paraphrase_magnitude", "PM"),
    ("cf_neighborhood_magnitude", "NM"),
    ("cf_ngram_entropy", "GE"),
    ("cf_reference_score", "RS"),
]


def counterfact_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """CounterFact's standard metrics per (model, method, risk), with CIs and n (the
    edits); empty without them."""
    chosen = metrics[metrics["protocol"] == "counterfact"]
    if chosen.empty:
        return pd.DataFrame(columns=["model", "method", "risk"])
    return _side_by_side(
        [
            (chosen[chosen["metric"] == metric], label)
            for metric, label in COUNTERFACT_COLUMNS
        ]
    )


# The protocol table: one probe type's answer, teacher-forced and generated.
PROTOCOLS = [
    ("token_accuracy", "token", "Token acc. (teacher-forced)"),
    ("wild_em", "wild", "WILD EM (generated)"),
    ("bke_f1", "bke_f1", "BKE F1 (generated)"),
    ("protocol_gap", "token_vs_wild", "Gap (token − WILD)"),
    ("judge_correct", "judge", "Judge (generated)"),
    ("judge_gap", "token_vs_judge", "Gap (token − judge)"),
    ("mello_em", "mello", "MeLLo EM (generated)"),
]
LOCALITY_FORMS = {"locality", "wild_locality", "judge_locality", "mello_locality"}
# the generated protocols, one of which a protocol table needs
GENERATED = ("wild", "mello")
PROTOCOL_ORDER = ["direct", "paraphrase", "entailed", "multihop", "locality"]


def protocol_table(metrics: pd.DataFrame, population: str) -> pd.DataFrame:
    """Per (model, method, risk, probe_type): token accuracy, WILD exact match, BKE F1,
    the judge's verdict, the gaps and MeLLo's exact match, with CIs and n, in one
    population (locality: its ``argmax``, ``wild``, ``judge`` and ``mello`` forms,
    always ``ok_edits``). Empty when no free generation was scored."""
    keys = ["model", "method", "risk", "probe_type"]
    wanted = PROTOCOLS + [
        ("locality", "argmax", "Token acc. (teacher-forced)"),
        ("wild_locality", "wild", "WILD EM (generated)"),
        ("judge_locality", "judge", "Judge (generated)"),
        ("mello_locality", "mello", "MeLLo EM (generated)"),
    ]
    parts = []
    for metric, protocol, label in wanted:
        form = "ok_edits" if metric in LOCALITY_FORMS else population
        part = metrics[
            (metrics["metric"] == metric)
            & (metrics["protocol"] == protocol)
            & (metrics["population"] == form)
        ].assign(label=label)
        parts.append(part)
    chosen = pd.concat(parts)
    if chosen.empty or not chosen["protocol"].isin(GENERATED).any():
        return pd.DataFrame(columns=keys)
    wide = chosen.pivot_table(
        index=keys,
        columns="label",
        values=["value", "ci_low", "ci_high", "n"],
        aggfunc="first",
    )
    table = pd.DataFrame(index=wide.index)
    for *_, label in PROTOCOLS:
        for column in ("value", "ci_low", "ci_high", "n"):
            if (column, label) in wide:
                name = label if column == "value" else f"{label} {column}"
                table[name] = wide[(column, label)]
    table = table.reset_index()
    order = {t: i for i, t in enumerate(PROTOCOL_ORDER)}
    return table.sort_values(
        ["model", "method", "risk", "probe_type"],
        key=lambda c: c.map(order).fillna(len(order)) if c.name == "probe_type" else c,
        ignore_index=True,
    )


def _cell(row: pd.Series, label: str) -> str:
    value = row.get(label)
    if value is None or pd.isna(value):
        return "–"
    return (
        f"{100 * value:.1f} [{100 * row[f'{label} ci_low']:.1f}, "
        f"{100 * row[f'{label} ci_high']:.1f}] (n={int(row[f'{label} n'])})"
    )


def _table(frame: pd.DataFrame, keys: list[str], labels: list[str]) -> list[str]:
    """A markdown table: the ``keys`` columns as they are, then each label's cell."""
    header = [key.replace("_", " ") for key in keys] + labels
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in frame.iterrows():
        cells = [str(row[key]) for key in keys] + [
            _cell(row, label) for label in labels
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def headline_markdown(headline: pd.DataFrame) -> str:
    """The headline table as markdown: each measure in %, its 95% CI and n."""
    labels = [label for *_, label in HEADLINE]
    return "\n".join(_table(headline, ["model", "method", "risk"], labels))


def run_summary(headline: pd.DataFrame, paths: list[str]) -> str:
    """What a run prints at its end: the headline table and where its reports and
    plots are."""
    population = ", ".join(sorted(set(headline.get("population", []))))
    lines = [
        "",
        f"Headline (population {population or '?'}; %, 95% CI, n):",
        "",
        headline_markdown(headline),
        "",
        UNEDITED_TEXT,
    ]
    if paths:
        lines += ["", "Reports and plots:", *(f"  {path}" for path in paths)]
    return "\n".join(lines) + "\n"


def report_markdown(  # noqa: PLR0913 - the report's parts and its tags
    headline: pd.DataFrame,
    failures: pd.DataFrame,
    drops: pd.DataFrame,
    title: str,
    population: str,
    *,
    semantics: str,
    edits: str,
    protocols: pd.DataFrame | None = None,
    counterfact: pd.DataFrame | None = None,
) -> str:
    """The report as markdown: the headline table (of ``population``) in %, with 95%
    bootstrap CIs, the failed edits, and the probes joint scoring dropped
    (``drops``: ``kebench.scoring.evaluate.drop_counts``). ``semantics``: how the
    entailed probes were derived (``paper`` or ``consistent``, docs/qa_generation.md);
    ``edits``: which edits were evaluated (``kebench.qa.probes.edits_measured``).
    ``protocols`` (``protocol_table``) adds the protocol gap: teacher-forced vs
    generated answers; ``counterfact`` (``counterfact_table``), CounterFact's standard
    metrics."""
    lines = [
        f"# {title}",
        "",
        f"Entailed probes: `{semantics}` semantics (docs/qa_generation.md). The "
        "*known* columns keep only the edits whose original fact, and the entailed "
        "probes whose premises, the base model knows (it prefers the KG's answer over "
        "the relation's other answers).",
        "",
        edits,
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
        f"before and after the edit (`argmax`). {UNEDITED_TEXT}",
        "",
        headline_markdown(headline),
    ]
    if protocols is not None and len(protocols):
        labels = [label for *_, label in PROTOCOLS]
        lines += [
            "",
            "## Teacher-forced vs generated (the protocol gap)",
            "",
            "The same probes, answered two ways: teacher-forced token accuracy "
            "(protocol `token`; locality: `argmax`) and a free greedy generation, "
            "scored by exact match against the answer or an alias (`wild`; locality: "
            "the base model's answer kept), by token F1 (`bke_f1`) and, when it is "
            "on, by an LLM judge (`judge`); MeLLo's final answer after its "
            "retrieval steps, by exact match (`mello`; locality: the old answer "
            "kept). Each gap is paired per probe "
            "(`token_vs_wild`, `token_vs_judge`), with a 95% CI over edits; "
            "`generations.parquet` holds every answer, `judgements.parquet` every "
            "verdict.",
            "",
            *_table(protocols, ["model", "method", "risk", "probe_type"], labels),
        ]
    if counterfact is not None and len(counterfact):
        lines += [
            "",
            "## CounterFact's standard metrics",
            "",
            "As ROME's evaluation computes them (protocol `counterfact`, "
            "docs/evaluation.md), ×100 as ROME's tables print them, n-gram entropy "
            "(GE) included: S, the harmonic mean of the efficacy, paraphrase and "
            "neighbourhood scores (ES, PS, NS, per-token probability comparisons); "
            "their magnitudes (EM, PM, NM); GE; and the reference score (RS), with 95% "
            "CIs over edits and n edits, on the edits that succeeded.",
            "",
            *_table(
                counterfact,
                ["model", "method", "risk"],
                [label for _, label in COUNTERFACT_COLUMNS],
            ),
        ]
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
