"""The paper's metrics and their companions, each tagged with its protocol (design §5).

Inputs are ``probe_scores`` rows: one per (model, method, case, probe) with teacher-
forced log-probs of the old and new answers under the base model (``lp_base_*``) and
the edited model (``lp_edit_*``), summed over answer tokens, and whether the model's
argmax reproduces each answer token.

Every metric has two populations (``population``): ``ok_edits``, the edits that
succeeded, and ``itt`` (intention to treat), where a failed edit counts as a failure.
Uncertainty is over edits: probes of one edit are resampled together.

Protocols, never mixed in one number:
    prob: probability comparisons (EditSucc, Consistency, CounterFact efficacy).
    token: teacher-forced token accuracy (EasyEdit's "rewrite acc").
    argmax: agreement of the argmax before and after the edit (locality).
    gen: exact match / F1 of greedy generations (SQuAD normalisation).
    wild: a free generation's reply gives the answer or an alias, as a grader reads
        it (``kebench.scoring.answers``); locality: the base model's answer kept;
        ``wild_kg_*``: on controls whose KG answer the base model gives, the edited
        model still gives it.
    wild_strict: exact match of the same reply, cut at its first newline or full
        stop, against the answer or an alias (the paper repository's scoring).
    bke_f1: token F1 of that cut against the answer.
    judge: an LLM judge's verdict on the same generation (``kebench.scoring.judge``).
    token_vs_wild, token_vs_judge: the protocol gaps, token accuracy minus wild (or
        the judge), paired per probe.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from kebench.schemas import UNCHANGED_TYPES

GROUP = ["model", "method", "risk", "probe_type"]
# what the probes table says of each probe beyond its type, which the Consistency
# subsets read (``with_roles`` joins them onto scores)
PROBE_ROLES = ["tier", "kind", "echo"]


def with_roles(scores: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """``scores`` (rows with ``probe_id``) with each probe's ``PROBE_ROLES``."""
    roles = probes.set_index("probe_id")[PROBE_ROLES]
    return scores.drop(columns=PROBE_ROLES, errors="ignore").join(roles, on="probe_id")


def probe_outcomes(scores: pd.DataFrame) -> pd.DataFrame:
    """Per-probe 0/1 outcomes of every probability and token metric.

    ``edit_succ`` is the paper's indicator 1[P_L*(o'|q) > P_L(o|q)] (eq. 1 on direct
    probes; eq. 2's summand on entailed ones); ``efficacy`` is CounterFact's
    1[P_L*(o'|q) > P_L*(o|q)]; ``token_acc`` is the share of new-answer tokens the
    edited model's argmax reproduces; ``argmax_agree`` says whether the edited model
    still predicts every old-answer token as the base model did; ``edit_gain``, for a
    probe without an old answer only, is 1[P_L*(o'|q) > P_L(o'|q)] (protocol
    ``prob_gain``: weaker than EditSucc, never mixed with it).
    """
    outcomes = scores.copy()
    has_old = outcomes["lp_base_old"].notna()
    outcomes["edit_succ"] = (outcomes["lp_edit_new"] > outcomes["lp_base_old"]).where(
        has_old
    )
    outcomes["efficacy"] = (outcomes["lp_edit_new"] > outcomes["lp_edit_old"]).where(
        has_old
    )
    outcomes["token_acc"] = outcomes["edit_new_token_hits"] / outcomes["n_tokens_new"]
    outcomes["argmax_agree"] = (
        outcomes["edit_old_argmax"] == outcomes["base_old_argmax"]
    ).where(has_old)
    # a probe with no old answer (a deductive consequence the old world does not
    # state, "Sydney is the capital of"): did the edit raise the new answer?
    outcomes["edit_gain"] = (outcomes["lp_edit_new"] > outcomes["lp_base_new"]).where(
        ~has_old
    )
    return outcomes


def cluster_bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    clusters: Sequence[object] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``values``, resampling whole clusters.

    The probes of one edit share the edit and are not independent, so the unit of
    resampling is the cluster (the edit, ``case_id``): each replicate draws as many
    clusters as there are, with replacement, and takes the mean over **all values of
    the drawn clusters**. That is the same statistic as the point estimate (the mean
    over probes), so the interval is about the number reported; a mean of per-cluster
    means would weigh an edit with one probe like one with ten, a different number.
    With one value per cluster this is the ordinary bootstrap (``bootstrap_ci``).
    NaN for no values.
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return float("nan"), float("nan")
    codes, _ = pd.factorize(np.asarray(clusters, dtype=object))
    sums = np.bincount(codes, weights=data)
    counts = np.bincount(codes)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, sums.size, size=(n_boot, sums.size))
    means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of independent values (NaN for none)."""
    return cluster_bootstrap_ci(values, np.arange(len(values)), n_boot, seed, level)


def _metric_rows(
    frame: pd.DataFrame, column: str, metric: str, protocol: str, seed: int
) -> list[dict]:
    """One row per (model, method, risk, probe_type) group of ``column``'s mean, its
    CI over the group's edits (``cluster_bootstrap_ci``), and its n of probes and
    edits."""
    rows = []
    for group, part in frame.dropna(subset=[column]).groupby(GROUP, sort=True):
        values = part[column].astype(float).to_numpy()
        low, high = cluster_bootstrap_ci(values, part["case_id"], seed=seed)
        rows.append(
            dict(zip(GROUP, group, strict=True))
            | {
                "metric": metric,
                "protocol": protocol,
                "value": float(values.mean()),
                "ci_low": low,
                "ci_high": high,
                "n": int(values.size),
                "n_edits": part["case_id"].nunique(),
            }
        )
    return rows


# The entailed probes a Consistency counts, by name. ``deductive`` is the headline's:
# compositions (each walks the edit and at least one unchanged KG fact) that are no
# echo of the edit. Each tier is never mixed with the other; the other subsets are
# its parts and controls, each in a number of its own.
ENTAILED_SUBSETS: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "deductive": lambda o: (
        (o["tier"] == "deductive") & (o["kind"] == "composition") & ~o["echo"]
    ),
    "deductive_tier": lambda o: o["tier"] == "deductive",
    "deductive_tier_no_echo": lambda o: (o["tier"] == "deductive") & ~o["echo"],
    "inductive": lambda o: o["tier"] == "inductive",
    "inductive_no_echo": lambda o: (o["tier"] == "inductive") & ~o["echo"],
    "alias": lambda o: o["kind"] == "subject_alias",
    "inverse": lambda o: o["kind"].isin(["inverse", "symmetric"]),
    "axiom": lambda o: o["kind"] == "axiom",
    "echo": lambda o: (o["tier"] != "dataset") & o["echo"],
    "dataset": lambda o: o["tier"] == "dataset",
}
# the subsets that get every form (wild, known premises) besides prob
MAIN_SUBSETS = ("deductive", "inductive")
# the free-generation verdicts a Consistency and gap are also computed on: the
# probe_scores column, its metrics' name prefix and protocol
GENERATED_FORMS = (
    ("wild_em", "wild", "wild"),
    ("wild_strict", "wild_strict", "wild_strict"),
)


def entailed_subset(outcomes: pd.DataFrame, subset: str) -> pd.DataFrame:
    """The entailed probes of ``outcomes`` in ``subset`` (``ENTAILED_SUBSETS``)."""
    entailed = outcomes[outcomes["probe_type"] == "entailed"]
    if entailed.empty:
        return entailed
    return entailed[ENTAILED_SUBSETS[subset](entailed).fillna(False).astype(bool)]


def per_edit_consistency(
    outcomes: pd.DataFrame, subset: str = "deductive", column: str = "edit_succ"
) -> pd.DataFrame:
    """Consistency (eq. 2) of each edit over its entailed probes of ``subset``: the
    mean of ``column`` (``edit_succ``; ``wild_em`` for the generated form), next to
    the same of the edit's direct probes (EditSucc, eq. 1)."""
    keys = ["model", "method", "risk", "case_id"]
    direct = outcomes[outcomes["probe_type"] == "direct"].groupby(keys)[column].mean()
    entailed = entailed_subset(outcomes, subset).dropna(subset=[column])
    grouped = entailed.groupby(keys)[column]
    table = pd.DataFrame(
        {
            "edit_succ": direct,
            "consistency": grouped.mean(),
            "n_entailed": grouped.size(),
        }
    )
    return table.dropna(subset=["edit_succ"]).reset_index()


def gap_rows(  # noqa: PLR0913 - the gap's form, keyword-only
    outcomes: pd.DataFrame,
    seed: int = 0,
    n_boot: int = 2000,
    *,
    subset: str = "deductive",
    column: str = "edit_succ",
    tags: tuple[str, str] = ("gap_deductive", "prob"),
) -> list[dict]:
    """EditSucc − Consistency of ``subset`` per (model, method, risk), paired over the
    edits that have such probes, with a bootstrap CI over edits and the number of
    probes; ``column`` and ``tags`` (metric name, protocol) choose the form."""
    per_edit = per_edit_consistency(outcomes, subset, column).dropna(
        subset=["consistency"]
    )
    rows = []
    for (model, method, risk), part in per_edit.groupby(["model", "method", "risk"]):
        gaps = (part["edit_succ"] - part["consistency"]).to_numpy(dtype=float)
        low, high = bootstrap_ci(gaps, n_boot=n_boot, seed=seed)
        rows.append(
            {
                "model": model,
                "method": method,
                "risk": risk,
                "probe_type": "direct-entailed",
                "metric": tags[0],
                "protocol": tags[1],
                "value": float(gaps.mean()),
                "ci_low": low,
                "ci_high": high,
                "n": int(part["n_entailed"].sum()),
                "n_edits": len(part),
            }
        )
    return rows


def paired_edit_succ_rows(
    outcomes: pd.DataFrame, seed: int, subset: str, column: str, tags: tuple[str, str]
) -> list[dict]:
    """EditSucc (the mean of ``column`` over direct probes) of the very edits a
    subset's gap pairs over, so that the two numbers of the gap stand side by side;
    ``tags``: the metric's name prefix (``edit_succ``, ``wild_em``) and protocol."""
    per_edit = per_edit_consistency(outcomes, subset, column).dropna(
        subset=["consistency"]
    )
    per_edit = per_edit.assign(probe_type="direct")
    metric = f"{tags[0]}_paired_{subset}"
    return _metric_rows(per_edit, "edit_succ", metric, tags[1], seed)


def consistency_rows(
    outcomes: pd.DataFrame, seed: int, known: pd.Series | None = None
) -> list[dict]:
    """Every Consistency of ``ENTAILED_SUBSETS`` with its gap (protocol ``prob``),
    the main subsets' generated forms (``wild``: ``wild_consistency_*``,
    ``wild_gap_*``, paired EditSucc) and, with ``known``, their known-premise
    forms; and the deductive probes that have no old answer, under their own
    protocol (``prob_gain``)."""
    rows = []
    for subset in ENTAILED_SUBSETS:
        per_edit = per_edit_consistency(outcomes, subset).assign(probe_type="entailed")
        rows += _metric_rows(
            per_edit, "consistency", f"consistency_{subset}", "prob", seed
        )
        rows += gap_rows(outcomes, seed, subset=subset, tags=(f"gap_{subset}", "prob"))
    for subset in MAIN_SUBSETS:
        rows += paired_edit_succ_rows(
            outcomes, seed, subset, "edit_succ", ("edit_succ", "prob")
        )
        for column, prefix, protocol in GENERATED_FORMS:
            if column not in outcomes:
                continue
            per_edit = per_edit_consistency(outcomes, subset, column).assign(
                probe_type="entailed"
            )
            rows += _metric_rows(
                per_edit,
                "consistency",
                f"{prefix}_consistency_{subset}",
                protocol,
                seed,
            )
            rows += gap_rows(
                outcomes,
                seed,
                subset=subset,
                column=column,
                tags=(f"{prefix}_gap_{subset}", protocol),
            )
            rows += paired_edit_succ_rows(
                outcomes, seed, subset, column, (f"{prefix}_em", protocol)
            )
        if known is not None:
            rows += known_premise_rows(outcomes, known, seed, subset)
    no_old = entailed_subset(outcomes, "deductive_tier")
    no_old = no_old[no_old["edit_gain"].notna()]
    rows += _metric_rows(
        no_old, "edit_gain", "consistency_deductive_no_old_answer", "prob_gain", seed
    )
    return rows


def protocol_gap_rows(
    outcomes: pd.DataFrame,
    seed: int = 0,
    generated: str = "wild_em",
    tags: tuple[str, str] = ("protocol_gap", "token_vs_wild"),
) -> list[dict]:
    """The protocol gap per (model, method, risk, probe_type): teacher-forced token
    accuracy minus a generated answer's score (``generated``: ``wild_em``, or the
    judge's), paired on the probes that have both, with a bootstrap CI over edits
    (``cluster_bootstrap_ci``); ``tags`` are its metric name and protocol."""
    both = outcomes.dropna(subset=["token_acc", generated])
    gaps = both.assign(
        gap=both["token_acc"].astype(float) - both[generated].astype(float)
    )
    return _metric_rows(gaps, "gap", *tags, seed)


def failed_outcomes(
    probes: pd.DataFrame,
    failed_edits: pd.DataFrame,
    generate_types: Sequence[str] = (),
    wild_types: Sequence[str] = (),
    judged: bool = False,
) -> pd.DataFrame:
    """``probe_outcomes`` rows that count each failed edit's probes as failures.

    The intention-to-treat form: an edit was asked for and did not happen, so every
    success indicator of its probes is 0 (EditSucc and efficacy where the probe has an
    old answer, as for a stored edit; EM/F1 for the generated ``generate_types``; the
    free-generation scores for ``wild_types``, and the judge's when ``judged``).
    Locality probes are left out: a failed edit leaves the model as it was, so its
    locality says nothing about the method and would only flatter it.

    Args:
        probes: the ``probes`` table.
        failed_edits: ``model, method, case_id`` of each failed edit.
    """
    columns = [
        "case_id",
        "probe_id",
        "probe_type",
        "risk",
        "source",
        "answer_old",
        *PROBE_ROLES,
    ]
    rows = failed_edits[["model", "method", "case_id"]].merge(
        probes.loc[~probes["probe_type"].isin(list(UNCHANGED_TYPES)), columns],
        on="case_id",
    )
    has_old = rows.pop("answer_old").notna()
    zero = pd.Series(0.0, index=rows.index)
    generated = rows["probe_type"].isin(list(generate_types))
    free = rows["probe_type"].isin(list(wild_types))
    return rows.assign(
        edit_succ=zero.where(has_old),
        efficacy=zero.where(has_old),
        edit_gain=zero.where(~has_old & (rows["probe_type"] == "entailed")),
        token_acc=zero,
        gen_em=zero.where(generated),
        gen_f1=zero.where(generated),
        wild_em=zero.where(free),
        wild_strict=zero.where(free),
        bke_f1=zero.where(free),
        **({"judge": zero.where(free)} if judged else {}),
    )


@dataclass(frozen=True)
class OutcomeSettings:
    """Which probe types a run generated for (``gen``, ``wild``) and whether an LLM
    judge read the generations: what a failed edit's probes count as failed in."""

    generate_types: tuple[str, ...] = ()
    wild_types: tuple[str, ...] = ()
    judged: bool = False

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> OutcomeSettings:
        """The settings of the ``evaluation`` parameters."""
        return cls(
            generate_types=tuple(params["generation"]["probe_types"]),
            wild_types=tuple(params["wild"]["probe_types"]),
            judged=bool(params["judge"]["enabled"]),
        )


def outcome_tables(  # noqa: PLR0913 - the run's scores and what is left out of them
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    settings: OutcomeSettings,
    *,
    judgements: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The outcomes of a run's scored probes (``probe_outcomes`` with each probe's
    roles and, when judged, the judge's verdict) and the failed edits' outcomes
    (``failed_outcomes``) without the probes joint scoring dropped: ``metrics_table``'s
    two inputs."""
    failed = failed_outcomes(
        probes,
        failed_edits,
        settings.generate_types,
        settings.wild_types,
        judged=settings.judged,
    )
    keys = ["method", "probe_id"]
    dropped = pd.MultiIndex.from_frame(joint_dropped_probes[keys])
    failed = failed[~pd.MultiIndex.from_frame(failed[keys]).isin(dropped)]
    outcomes = with_roles(probe_outcomes(probe_scores), probes)
    if settings.judged and judgements is not None:
        verdicts = judgements[["model", "method", "probe_id", "judge"]]
        outcomes = outcomes.merge(
            verdicts, on=["model", "method", "probe_id"], how="left"
        )
    return outcomes, failed


def known_premise_rows(
    outcomes: pd.DataFrame, known: pd.Series, seed: int, subset: str = "deductive"
) -> list[dict]:
    """EditSucc over the edits whose original fact the base model knows
    (``edit_succ_known_gen``), and Consistency over the entailed probes of
    ``subset`` whose premises it knows (``consistency_<subset>_known_gen``);
    ``known``: probe id -> bool (``kebench.scoring.premises.known_probes``: the base
    model generates each premise's answer, hence ``_gen``)."""
    # a probe that is not judged (NA) is not known
    flag = outcomes["probe_id"].map(known).fillna(False).astype(bool)
    is_direct = outcomes["probe_type"] == "direct"
    rows = []
    if subset == MAIN_SUBSETS[0]:
        rows += _metric_rows(
            outcomes[is_direct & flag], "edit_succ", "edit_succ_known_gen", "prob", seed
        )
    # the edit's EditSucc pairs with its known entailed probes, as in eq. 2's table
    kept = outcomes[is_direct | ((outcomes["probe_type"] == "entailed") & flag)]
    per_edit = per_edit_consistency(kept, subset).assign(probe_type="entailed")
    rows += _metric_rows(
        per_edit, "consistency", f"consistency_{subset}_known_gen", "prob", seed
    )
    return rows


def by_tier(outcomes: pd.DataFrame) -> pd.DataFrame:
    """``outcomes`` with each entailed probe's type named by its tier
    (``entailed_deductive``, ``entailed_inductive``, ``entailed_dataset``), so that no
    per-type number mixes the tiers."""
    entailed = outcomes["probe_type"] == "entailed"
    named = "entailed_" + outcomes["tier"].fillna("dataset").astype(str)
    return outcomes.assign(probe_type=outcomes["probe_type"].where(~entailed, named))


def _population_rows(
    outcomes: pd.DataFrame,
    seed: int,
    locality: bool,
    known: pd.Series | None = None,
) -> list[dict]:
    """Every metric of one population of edits, per (model, method, risk, probe_type)."""
    rows = []
    by_type = {
        "edit_succ": ("edit_succ", "prob"),
        "efficacy": ("counterfact_efficacy", "prob"),
        "token_acc": ("token_accuracy", "token"),
    }
    tiered = by_tier(outcomes)
    scored = tiered[~tiered["probe_type"].isin(list(UNCHANGED_TYPES))]
    unchanged = tiered[tiered["probe_type"].isin(list(UNCHANGED_TYPES))]
    for column, (metric, protocol) in by_type.items():
        rows += _metric_rows(scored, column, metric, protocol, seed)
    # an unchanged probe's measure is named after its type: locality (other
    # subjects) and relation_specificity (the edited subject, another relation)
    forms = [("argmax_agree", "", "argmax")]
    if "mello_em" in outcomes:
        rows += _metric_rows(scored, "mello_em", "mello_em", "mello", seed)
        # MQuAKE's multi-hop accuracy: an edit counts once, right when any of its
        # questions of the type is (its three paraphrased multi-hop questions)
        answered = scored.dropna(subset=["mello_em"])
        per_case = answered.groupby([*GROUP, "case_id"], as_index=False)["mello_em"]
        rows += _metric_rows(per_case.max(), "mello_em", "mello_case_em", "mello", seed)
        forms.append(("mello_em", "mello_", "mello"))
    if "gen_em" in outcomes:
        rows += _metric_rows(scored, "gen_em", "exact_match", "gen", seed)
        rows += _metric_rows(scored, "gen_f1", "f1", "gen", seed)
    if "wild_em" in outcomes:
        # names of their own: a metric's MLflow key has no protocol in it
        rows += _metric_rows(scored, "wild_em", "wild_em", "wild", seed)
        rows += _metric_rows(scored, "bke_f1", "bke_f1", "bke_f1", seed)
        rows += protocol_gap_rows(scored, seed)
        forms.append(("wild_em", "wild_", "wild"))
    if "wild_strict" in outcomes:
        rows += _metric_rows(
            scored, "wild_strict", "wild_strict_em", "wild_strict", seed
        )
        forms.append(("wild_strict", "wild_strict_", "wild_strict"))
    if "wild_kg" in outcomes:
        # controls only: on the facts whose KG answer the base model gives
        forms.append(("wild_kg", "wild_kg_", "wild"))
    if "judge" in outcomes:
        rows += _metric_rows(scored, "judge", "judge_correct", "judge", seed)
        rows += protocol_gap_rows(
            scored, seed, "judge", ("judge_gap", "token_vs_judge")
        )
        forms.append(("judge", "judge_", "judge"))
    if locality:
        for probe_type, part in unchanged.groupby("probe_type"):
            for column, prefix, protocol in forms:
                rows += _metric_rows(
                    part, column, f"{prefix}{probe_type}", protocol, seed
                )
    rows += consistency_rows(outcomes, seed, known)
    return rows


def metrics_table(
    outcomes: pd.DataFrame,
    seed: int = 0,
    failed: pd.DataFrame | None = None,
    known: pd.Series | None = None,
) -> pd.DataFrame:
    """Every metric per (model, method, risk, probe_type), with its protocol,
    population, CI and n.

    Two populations, never merged: ``ok_edits``, over the edits that succeeded (the
    stored, scored ones: every number as before), and ``itt`` (intention to treat),
    where each failed edit also counts, as a failure (``failed``: ``failed_outcomes``
    rows). Locality and relation specificity are ``ok_edits`` metrics only. With
    ``known`` (probe id -> whether the base model knows its premises), both
    populations also get ``edit_succ_known_gen`` and the main subsets'
    ``consistency_<subset>_known_gen``.
    """
    ok = _population_rows(outcomes, seed, locality=True, known=known)
    treated = outcomes if failed is None else pd.concat([outcomes, failed])
    itt = _population_rows(treated, seed, locality=False, known=known)
    return pd.concat(
        [
            pd.DataFrame(ok).assign(population="ok_edits"),
            pd.DataFrame(itt).assign(population="itt"),
        ],
        ignore_index=True,
    )


# SQuAD's answer normalisation and token F1, as the paper's repository scores
# generations; written out because it is a few lines and the metric must not drift.
def squad_normalise(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, answer: str) -> float:
    return float(squad_normalise(prediction) == squad_normalise(answer))


def token_f1(prediction: str, answer: str) -> float:
    predicted, gold = (
        squad_normalise(prediction).split(),
        squad_normalise(answer).split(),
    )
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)
