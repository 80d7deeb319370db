"""The evaluation report: the paper's headline table and its plots."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure


# The headline: per (model, method, risk) and protocol, each column a
# (probe_type, metric) of ``metrics``. ``prob`` rows compare probabilities
# (locality and relation specificity: the argmax before and after the edit); ``wild``
# rows read free generations as a grader does, ``wild_strict`` rows by exact match.
# The deductive columns count only compositions that are no echo of the edit
# (kebench.scoring.metrics.ENTAILED_SUBSETS).
def _generated_columns(prefix: str, protocol: str) -> dict[str, tuple[str, str, str]]:
    """The headline's columns of a free-generation protocol whose metrics are named
    with ``prefix`` (``kebench.scoring.metrics.GENERATED_FORMS``)."""
    return {
        "EditSucc": ("direct", f"{prefix}_em", protocol),
        "Paraphrase": ("paraphrase", f"{prefix}_em", protocol),
        "EditSucc (paired)": ("direct", f"{prefix}_em_paired_deductive", protocol),
        "Deductive Consistency": (
            "entailed",
            f"{prefix}_consistency_deductive",
            protocol,
        ),
        "Deductive gap": ("direct-entailed", f"{prefix}_gap_deductive", protocol),
        "Inductive Consistency (paper)": (
            "entailed",
            f"{prefix}_consistency_inductive",
            protocol,
        ),
        "Inductive gap": ("direct-entailed", f"{prefix}_gap_inductive", protocol),
        "Relation specificity": (
            "relation_specificity",
            f"{prefix}_relation_specificity",
            protocol,
        ),
        "Locality": ("locality", f"{prefix}_locality", protocol),
    }


HEADLINE_FORMS: dict[str, dict[str, tuple[str, str, str]]] = {
    "prob": {
        "EditSucc": ("direct", "edit_succ", "prob"),
        "Paraphrase": ("paraphrase", "edit_succ", "prob"),
        "EditSucc (paired)": ("direct", "edit_succ_paired_deductive", "prob"),
        "Deductive Consistency": ("entailed", "consistency_deductive", "prob"),
        "Deductive gap": ("direct-entailed", "gap_deductive", "prob"),
        "Inductive Consistency (paper)": ("entailed", "consistency_inductive", "prob"),
        "Inductive gap": ("direct-entailed", "gap_inductive", "prob"),
        "Relation specificity": (
            "relation_specificity",
            "relation_specificity",
            "argmax",
        ),
        "Locality": ("locality", "locality", "argmax"),
    },
    "wild": _generated_columns("wild", "wild"),
    "wild_strict": _generated_columns("wild_strict", "wild_strict"),
}
HEADLINE_LABELS = list(HEADLINE_FORMS["prob"])
# measured on the edits that succeeded only (a failed edit leaves the model as it was)
UNCHANGED_LABELS = ("Relation specificity", "Locality")
# Beside the headline: the deductive tier's other kinds, the echoes, the tiers with
# and without them, the known-premise forms, and the probes with no old answer.
DETAIL_COLUMNS = {
    "Alias": ("entailed", "consistency_alias", "prob"),
    "Inverse/symmetric": ("entailed", "consistency_inverse", "prob"),
    "Axiom rules": ("entailed", "consistency_axiom", "prob"),
    "Echoes": ("entailed", "consistency_echo", "prob"),
    "Deductive tier": ("entailed", "consistency_deductive_tier", "prob"),
    "Deductive tier, no echo": (
        "entailed",
        "consistency_deductive_tier_no_echo",
        "prob",
    ),
    "Inductive, no echo": ("entailed", "consistency_inductive_no_echo", "prob"),
    "EditSucc (known fact)": ("direct", "edit_succ_known_gen", "prob"),
    "Deductive (known premises)": (
        "entailed",
        "consistency_deductive_known_gen",
        "prob",
    ),
    "Inductive (known premises)": (
        "entailed",
        "consistency_inductive_known_gen",
        "prob",
    ),
    "Deductive, no old answer": (
        "entailed",
        "consistency_deductive_no_old_answer",
        "prob_gain",
    ),
}

# What the floor's numbers mean, for a reader who takes its EditSucc for a success.
UNEDITED_TEXT = (
    "`unedited` is the floor, the base model scored as if it were edited: its "
    "EditSucc (protocol `prob`) is the share of direct probes whose new answer the "
    "base model already prefers to the old one, and its Consistency and gaps are the "
    "same base rates for the entailed probes, not edits that worked; its locality "
    "and relation specificity are 100, and its `prob_gain` on probes with no old "
    "answer 0, by construction (the model is its own reference). An edit whose consequences all follow has a gap of 0 whatever the "
    "floor: read a method's EditSucc and Consistency against the floor's, and its "
    "gap against 0."
)

TIER_TEXT = (
    "Deductive Consistency counts the consequences a perfect reasoner must draw from "
    "the edit, the unchanged KG facts and the vocabulary's axioms: compositions that "
    "walk the edit and at least one unchanged KG fact, and that are no echo (an echo "
    "names the edited subject and expects the edit's own new object). Inductive "
    "Consistency is the paper's measure: consequences of mined rules the axioms do "
    'not entail (correlations such as "spouses share a citizenship"), never a '
    "measure of logical consistency. EditSucc (paired) is EditSucc on the edits the "
    "deductive gap pairs over."
)

POPULATION_TEXT = {
    "itt": "intention to treat: every requested edit, a failed edit counting as a "
    "failure of each of its probes",
    "ok_edits": "the edits that succeeded: failed edits are left out",
}


def _select(
    metrics: pd.DataFrame, spec: tuple[str, str, str], population: str
) -> pd.DataFrame:
    probe_type, metric, protocol = spec
    return metrics[
        (metrics["probe_type"] == probe_type)
        & (metrics["metric"] == metric)
        & (metrics["protocol"] == protocol)
        & (metrics["population"] == population)
    ]


def headline_table(metrics: pd.DataFrame, population: str) -> pd.DataFrame:
    """One row per (model, method, risk, protocol: ``prob`` and ``wild``):
    EditSucc, paraphrase, EditSucc on the paired edits, the deductive Consistency
    and gap, the inductive (the paper's) Consistency and gap, relation specificity
    and locality, each with its CI, n of probes and n of edits, in one population
    (``itt`` or ``ok_edits``; relation specificity and locality are always
    ``ok_edits``)."""
    if population not in POPULATION_TEXT:
        raise ValueError(
            f"unknown headline population {population!r}; use one of "
            f"{sorted(POPULATION_TEXT)}"
        )
    tables = []
    for protocol, columns in HEADLINE_FORMS.items():
        parts = [
            (
                _select(
                    metrics,
                    spec,
                    "ok_edits" if label in UNCHANGED_LABELS else population,
                ),
                label,
            )
            for label, spec in columns.items()
        ]
        tables.append(_side_by_side(parts).assign(protocol=protocol))
    table = pd.concat(tables, ignore_index=True)
    # rows present in one form only (a run without free generation) keep their cells
    table = table.dropna(subset=HEADLINE_LABELS, how="all")
    return table.sort_values(
        ["model", "method", "risk", "protocol"], ignore_index=True
    ).assign(population=population)


def detail_table(metrics: pd.DataFrame, population: str) -> pd.DataFrame:
    """Per (model, method, risk): the columns of ``DETAIL_COLUMNS``."""
    parts = [
        (_select(metrics, spec, population), label)
        for label, spec in DETAIL_COLUMNS.items()
    ]
    return _side_by_side(parts)


def echo_shares(probes: pd.DataFrame) -> str:
    """One sentence: the share of each tier's entailed probes that are echoes."""
    entailed = probes[probes["probe_type"] == "entailed"]
    parts = []
    for tier, rows in entailed.groupby("tier"):
        echoes = int(rows["echo"].sum())
        parts.append(
            f"{tier} {echoes} of {len(rows)} ({100 * echoes / len(rows):.1f} %)"
        )
    return (
        "Echoes among the evaluated edits' entailed probes (the prompt names the "
        "edited subject or another name of it, the answer is the edit's new object): "
        + ("; ".join(parts) or "none")
        + "."
    )


def sign_disagreements(headline: pd.DataFrame) -> list[str]:
    """One sentence per (model, method, risk) and gap whose sign differs between the
    ``prob`` and ``wild`` forms (each named, with both values). A gap that rounds to
    0.0 points has no sign."""
    sentences = []
    keys = ["model", "method", "risk"]
    forms = {p: rows.set_index(keys) for p, rows in headline.groupby("protocol")}
    if not {"prob", "wild"} <= set(forms):
        return sentences
    both = forms["prob"].join(forms["wild"], rsuffix=" wild", how="inner")
    for key, row in both.iterrows():
        for gap in ("Deductive gap", "Inductive gap"):
            prob, wild = row.get(gap), row.get(f"{gap} wild")
            if pd.isna(prob) or pd.isna(wild):
                continue
            if round(100 * prob, 1) * round(100 * wild, 1) < 0:
                sentences.append(
                    f"{' / '.join(map(str, key))}: the {gap.lower()} is "
                    f"{100 * prob:+.1f} under `prob` but {100 * wild:+.1f} under "
                    "`wild`: the two protocols disagree in sign, so neither alone "
                    "says whether the consequences lag the edit."
                )
    return sentences


def _side_by_side(parts: list[tuple[pd.DataFrame, str]]) -> pd.DataFrame:
    """One row per (model, method, risk): each part's value, CI, n of probes and n
    of edits under its label."""
    keys = ["model", "method", "risk"]
    frames = []
    for rows, label in parts:
        part = rows.set_index(keys).reindex(
            columns=["value", "ci_low", "ci_high", "n", "n_edits"]
        )
        part.columns = [label if c == "value" else f"{label} {c}" for c in part.columns]
        frames.append(part)
    return pd.concat(frames, axis=1).reset_index()


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
    ("wild_em", "wild", "WILD (generated)"),
    ("wild_strict_em", "wild_strict", "WILD strict (generated)"),
    ("bke_f1", "bke_f1", "BKE F1 (generated)"),
    ("protocol_gap", "token_vs_wild", "Gap (token − WILD)"),
    ("judge_correct", "judge", "Judge (generated)"),
    ("judge_gap", "token_vs_judge", "Gap (token − judge)"),
    ("mello_em", "mello", "MeLLo EM (generated)"),
]
LOCALITY_FORMS = {
    "locality",
    "wild_locality",
    "wild_strict_locality",
    "judge_locality",
    "mello_locality",
}
# the generated protocols, one of which a protocol table needs
GENERATED = ("wild", "wild_strict", "mello")
PROTOCOL_ORDER = ["direct", "paraphrase", "entailed", "multihop", "locality"]


def protocol_table(metrics: pd.DataFrame, population: str) -> pd.DataFrame:
    """Per (model, method, risk, probe_type): token accuracy, WILD exact match, BKE F1,
    the judge's verdict, the gaps and MeLLo's exact match, with CIs and n, in one
    population (locality: its ``argmax``, ``wild``, ``judge`` and ``mello`` forms,
    always ``ok_edits``). Empty when no free generation was scored."""
    keys = ["model", "method", "risk", "probe_type"]
    wanted = PROTOCOLS + [
        ("locality", "argmax", "Token acc. (teacher-forced)"),
        ("wild_locality", "wild", "WILD (generated)"),
        ("wild_strict_locality", "wild_strict", "WILD strict (generated)"),
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
    edits = row.get(f"{label} n_edits")
    count = f"n={int(row[f'{label} n'])}"
    if edits is not None and pd.notna(edits):
        count += f", {int(edits)} edits"
    return (
        f"{100 * value:.1f} [{100 * row[f'{label} ci_low']:.1f}, "
        f"{100 * row[f'{label} ci_high']:.1f}] ({count})"
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
    """The headline table as markdown: each measure in %, its 95% CI, n of probes
    and of edits."""
    keys = ["model", "method", "risk", "protocol"]
    return "\n".join(_table(headline, keys, HEADLINE_LABELS))


def run_summary(headline: pd.DataFrame, paths: list[str]) -> str:
    """What a run prints at its end: the headline table and where its reports and
    plots are."""
    population = ", ".join(sorted(set(headline.get("population", []))))
    lines = [
        "",
        f"Headline (population {population or '?'}; %, 95% CI, n of probes and edits):",
        "",
        headline_markdown(headline),
        "",
        TIER_TEXT,
        "",
        UNEDITED_TEXT,
        *(f"\n{sentence}" for sentence in sign_disagreements(headline)),
    ]
    if paths:
        lines += ["", "Reports and plots:", *(f"  {path}" for path in paths)]
    return "\n".join(lines) + "\n"


def run_name(what: Mapping[str, str]) -> str:
    """What a run measured, as report titles and MLflow run names say it: dataset
    source, model and hparams profile (``demo · smollm2-135m · fast``)."""
    return " · ".join(str(what[k]) for k in ("dataset", "model", "hparams_profile"))


def report_markdown(  # noqa: PLR0913 - the report's parts and its tags
    headline: pd.DataFrame,
    failures: pd.DataFrame,
    drops: pd.DataFrame,
    title: str,
    population: str,
    *,
    semantics: str,
    edits: str,
    details: pd.DataFrame | None = None,
    echoes: str = "",
    protocols: pd.DataFrame | None = None,
    counterfact: pd.DataFrame | None = None,
    generations: list[str] | None = None,
    comparison: list[str] | None = None,
) -> str:
    """The report as markdown: the headline table (of ``population``) in %, with 95%
    bootstrap CIs, the failed edits, and the probes joint scoring dropped
    (``drops``: ``kebench.scoring.evaluate.drop_counts``). ``semantics``: how the
    entailed probes were derived (``paper`` or ``consistent``, docs/qa_generation.md);
    ``edits``: which edits were evaluated (``kebench.qa.probes.edits_measured``);
    ``details`` (``detail_table``), the deductive tier's other kinds, the echoes and
    the known-premise forms, after ``echoes`` (``echo_shares``).
    ``protocols`` (``protocol_table``) adds the protocol gap: teacher-forced vs
    generated answers; ``counterfact`` (``counterfact_table``), CounterFact's standard
    metrics; ``generations`` (``generation_section``), the free replies and how they
    were read; ``comparison`` (``kebench.scoring.comparison.comparison_lines``), the
    methods on the edits they share."""
    lines = [
        f"# {title}",
        "",
        TIER_TEXT,
        f"The inductive tier's rules were applied under `{semantics}` semantics "
        "(docs/qa_generation.md).",
        "",
        edits,
        "",
        f"Population of EditSucc, Consistency and the gaps: `{population}` "
        f"({POPULATION_TEXT[population]}); relation specificity and locality: "
        "`ok_edits`. `metrics.csv` has both populations (column `population`).",
        "",
        "Percentages with 95% bootstrap confidence intervals, which resample edits "
        "(the probes of one edit together), the number of probes and of edits (a "
        "Consistency is a mean over edits, each the mean over its probes; a gap is "
        "paired over the edits that have such probes). Rows `prob` compare "
        "probabilities (relation specificity and locality: the argmax tokens before "
        "and after the edit, `argmax`); rows `wild` read a free greedy reply as a "
        "grader does (the answer or an alias leads it; relation specificity and "
        "locality: the base model's answer kept), rows `wild_strict` by exact match "
        "of its first line cut at a full stop, as the paper's repository scores "
        f"generations. {UNEDITED_TEXT}",
        "",
        headline_markdown(headline),
    ]
    disagreements = sign_disagreements(headline)
    lines += ["", *disagreements] if disagreements else []
    lines += comparison or []
    if details is not None and len(details):
        lines += [
            "",
            "## The deductive tier's other kinds, echoes and known premises",
            "",
            "Consistency (protocol `prob`) on: the edited question asked with "
            "another name of the subject (alias; every one an echo); the edit read "
            "backward through a symmetric or inverse relation (inverse/symmetric); "
            "mined rules the axioms entail (axiom rules); every echo of either tier; "
            "each tier with and without its echoes. The *known* columns keep the "
            "edits whose original fact, and the probes whose premises, the base "
            "model knows: asked the premise's cloze, it generates the KG's answer "
            "(or another name of it) greedily (docs/evaluation.md). *No old "
            "answer*: deductive probes "
            'the old world gives no single answer ("Sydney is the capital of"), '
            "scored by `prob_gain`, 1[P_edited(new) > P_base(new)], a weaker test "
            "never mixed with EditSucc.",
            "",
            echoes,
            "",
            *_table(details, ["model", "method", "risk"], list(DETAIL_COLUMNS)),
        ]
    if protocols is not None and len(protocols):
        labels = [label for *_, label in PROTOCOLS]
        lines += [
            "",
            "## Teacher-forced vs generated (the protocol gap)",
            "",
            "The same probes, answered two ways: teacher-forced token accuracy "
            "(protocol `token`; locality: `argmax`) and a free greedy reply, read "
            "as a grader does (`wild`; locality: the base model's answer kept), by "
            "exact match of its cut (`wild_strict`), by token F1 (`bke_f1`) and, "
            "when it is on, by an LLM judge (`judge`); MeLLo's final answer after "
            "its retrieval steps, read as `wild` reads (`mello`; locality: the old "
            "answer kept). Each gap is paired per probe "
            "(`token_vs_wild`, `token_vs_judge`), with a 95% CI over edits; "
            "`generations.parquet` holds every answer, `judgements.parquet` every "
            "verdict.",
            "",
            *_table(protocols, ["model", "method", "risk", "probe_type"], labels),
        ]
    lines += generations or []
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


def reply_summary(probe_scores: pd.DataFrame) -> pd.DataFrame:
    """Per (model, method, risk, probe_type, context) of the free generations: how
    many replies, how many empty, how many the cap cut, the mean ``wild`` and
    ``wild_strict`` verdicts, how many replies the two read differently, and how
    many controls were not judged (the base model gave no answer)."""
    replied = probe_scores.dropna(subset=["edit_wild_text"])
    keys = ["model", "method", "risk", "probe_type", "context"]
    if replied.empty:
        return pd.DataFrame(columns=keys)
    both = replied[["wild_em", "wild_strict"]].notna().all(axis=1)
    frame = replied.assign(
        empty=replied["edit_wild_text"].str.strip() == "",
        capped=replied["edit_wild_stop"] == "cap",
        disagree=both & (replied["wild_em"] != replied["wild_strict"]),
        unjudged=replied["wild_em"].isna(),
    )
    return (
        frame.groupby(keys)
        .agg(
            replies=("probe_id", "size"),
            empty=("empty", "sum"),
            capped=("capped", "sum"),
            wild=("wild_em", "mean"),
            wild_strict=("wild_strict", "mean"),
            disagree=("disagree", "sum"),
            unjudged=("unjudged", "sum"),
        )
        .reset_index()
    )


# the controls' wild forms, against the base model's reply and against the KG's answer
CONTROL_FORMS = {
    "Locality (base reply kept)": ("locality", "wild_locality"),
    "Locality (KG answer kept, known facts)": ("locality", "wild_kg_locality"),
    "Relation specificity (base reply kept)": (
        "relation_specificity",
        "wild_relation_specificity",
    ),
    "Relation specificity (KG answer kept, known facts)": (
        "relation_specificity",
        "wild_kg_relation_specificity",
    ),
}


def generation_section(replies: pd.DataFrame, metrics: pd.DataFrame) -> list[str]:
    """The report's section on free generation: the replies per context (empty,
    capped, the two readings and where they disagree), the controls under ``wild``,
    and the known premises per direction."""
    if replies.empty:
        return []
    lines = [
        "",
        "## Free generation: what the models said, and how it was read",
        "",
        "Each probe is asked as a person would ask it (column *context*): a cloze as "
        "a plain continuation, a question through the model's chat template where it "
        "has one (else its plain QA prompt); teacher forcing (`prob`) scores the same "
        "text. A reply runs from its first non-space character to the end of its "
        "first sentence or line. `wild` reads it as a grader does: the answer, or "
        "another name of it, leading the reply, after a frame that restates the "
        "question, possibly followed by a qualifier; never a hedge, a negation, a "
        "longer name or a late mention (docs/evaluation.md). `wild_strict` is "
        "exact match of the reply cut at its first newline or full stop. An empty "
        "reply is counted here and scores 0; a control whose base reply is empty or "
        "gives no answer is not judged.",
        "",
        "| model | method | risk | probe type | context | replies | empty | cut by "
        "the cap | wild | wild_strict | read differently | controls not judged |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in replies.to_dict("records"):
        lines.append(
            f"| {row['model']} | {row['method']} | {row['risk']} | "
            f"{row['probe_type']} | {row['context']} | {row['replies']} | "
            f"{row['empty']} | {row['capped']} | {_share(row['wild'])} | "
            f"{_share(row['wild_strict'])} | {row['disagree']} | {row['unjudged']} |"
        )
    controls = _side_by_side(
        [
            (_select(metrics, (probe_type, metric, "wild"), "ok_edits"), label)
            for label, (probe_type, metric) in CONTROL_FORMS.items()
        ]
    ).dropna(subset=list(CONTROL_FORMS), how="all")
    if len(controls):
        lines += [
            "",
            "Controls under `wild` (edits that succeeded): the edited reply gives the "
            "base model's answer (its leading span), or, on the facts whose KG "
            "answer the base model gives, still gives the KG's answer.",
            "",
            *_table(controls, ["model", "method", "risk"], list(CONTROL_FORMS)),
        ]
    known = metrics[metrics["metric"].str.startswith("premises_known_")]
    if len(known):
        lines += [
            "",
            "Known premises of the evaluated probes (the base model's reply to each "
            "distinct premise question gives the KG's answer, `wild`), asked in the "
            "direction the probe walks the fact: *forward* from its subject, "
            "*backward* from its object, where any of the KG's answers counts.",
            "",
            "| model | kind | direction | known | of | share (95% CI) |",
            "|---|---|---|---|---|---|",
        ]
        for row in known.sort_values(["model", "probe_type", "metric"]).to_dict(
            "records"
        ):
            direction = row["metric"].removeprefix("premises_known_")
            lines.append(
                f"| {row['model']} | {row['probe_type']} | {direction} | "
                f"{round(row['value'] * row['n'])} | {row['n']} | "
                f"{100 * row['value']:.1f} [{100 * row['ci_low']:.1f}, "
                f"{100 * row['ci_high']:.1f}] |"
            )
    return lines


def _share(value: float) -> str:
    return "–" if pd.isna(value) else f"{100 * value:.1f}"


PLOTTED = ("EditSucc", "Deductive Consistency", "Inductive Consistency (paper)")


def plot_direct_vs_entailed(headline: pd.DataFrame, note: str = "") -> Figure:
    """Bars of EditSucc, deductive and inductive Consistency per method (``prob``
    rows), with 95% CIs, each group labelled with its number of edits; ``note`` (the
    edits the methods share, where they differ) goes under the title."""
    rows = headline[headline["protocol"] == "prob"].reset_index(drop=True)
    figure, axes = plt.subplots(figsize=(max(6.0, 2.0 * len(rows)), 4.0))
    x = np.arange(len(rows))
    width = 0.8 / len(PLOTTED)
    for index, label in enumerate(PLOTTED):
        values = rows[label].astype(float).fillna(0).to_numpy() * 100
        low = rows[f"{label} ci_low"].astype(float).fillna(0).to_numpy() * 100
        high = rows[f"{label} ci_high"].astype(float).fillna(0).to_numpy() * 100
        axes.bar(
            x + (index - 1) * width,
            values,
            width=width,
            label=label,
            yerr=np.vstack([values - low, high - values]),
            capsize=3,
        )
    edits = rows["EditSucc n_edits"].astype("Int64").astype(str)
    axes.set_xticks(
        x,
        [
            f"{m}\n{r}\nn={n} edits"
            for m, r, n in zip(rows["method"], rows["risk"], edits, strict=True)
        ],
    )
    axes.set_ylabel("% of probes (95% CI)")
    axes.set_ylim(0, 105)
    title = "Edits, their deductive consequences and the rules' correlations"
    axes.set_title(f"{title}\n{note}" if note else title, fontsize="medium")
    axes.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    return figure


def plot_gap_vs_edit_succ(headline: pd.DataFrame, note: str = "") -> Figure:
    """Each method's deductive gap against its EditSucc, under ``prob`` and
    ``wild`` side by side, with their 95 % CIs as error bars and the number of edits
    beside each point; ``note`` goes under the title."""
    protocols = [p for p in ("prob", "wild") if p in set(headline["protocol"])]
    figure, panels = plt.subplots(
        1, max(1, len(protocols)), figsize=(5.5 * max(1, len(protocols)), 4.5)
    )
    panels = np.atleast_1d(panels)
    methods = sorted(set(headline["method"]))
    colours = {m: plt.get_cmap("tab20")(i % 20) for i, m in enumerate(methods)}
    for axes, protocol in zip(panels, protocols, strict=False):
        rows = headline[headline["protocol"] == protocol].dropna(
            subset=["EditSucc", "Deductive gap"]
        )
        for index, row in enumerate(rows.to_dict("records")):
            x, y = 100 * row["EditSucc"], 100 * row["Deductive gap"]
            axes.errorbar(
                x,
                y,
                xerr=[
                    [x - 100 * row["EditSucc ci_low"]],
                    [100 * row["EditSucc ci_high"] - x],
                ],
                yerr=[
                    [y - 100 * row["Deductive gap ci_low"]],
                    [100 * row["Deductive gap ci_high"] - y],
                ],
                fmt="o",
                capsize=3,
                color=colours[row["method"]],
            )
            # labels of points that coincide are staggered
            axes.annotate(
                f"{row['method']} (n={int(row['Deductive gap n_edits'])})",
                (x, y),
                textcoords="offset points",
                xytext=(4, 4 + 9 * (index % 4)),
                fontsize="x-small",
                color=colours[row["method"]],
            )
        axes.axhline(0, color="grey", linewidth=0.8)
        axes.set_xlim(-5, 105)
        axes.set_xlabel(f"EditSucc, % (`{protocol}`, 95% CI)")
        axes.set_ylabel(f"Deductive gap, points (`{protocol}`, 95% CI)")
        axes.set_title(f"{protocol}", fontsize="medium")
    title = "Does the edit's logic follow it? Deductive gap against EditSucc"
    figure.suptitle(f"{title}\n{note}" if note else title, fontsize="medium")
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
    axes.set_ylabel("Deductive Consistency per edit (%)")
    axes.set_title("Distribution of per-edit deductive consistency")
    figure.tight_layout()
    return figure
