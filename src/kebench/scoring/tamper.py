"""Tamper audit: flag edited facts by their broken rule consequences (issue 7).

An auditor holds a model L* and a list of facts, each with the two answers in question
(o, o'), and the consequences the mined rules derive under either answer. Under L*,
each fact's *asserted* answer a is the one L* prefers on its direct prompt; the rules
then imply an answer for each consequence (o' -> the consequence's new answer, o -> its
old one). The rule detector scores a fact by how strongly L* contradicts what its own
assertion implies, the mean over the fact's consequences c of::

    violation = log P_L*(other answer | c) - log P_L*(implied answer | c)

``rule_violation`` asks each consequence as a plain fact about its own subject
("The country of citizenship of Michelle Obama is"), which a locate-and-edit method
does not touch; ``rule_violation_chained`` asks the entailed probes, which name the
consequence from the edited subject ("... of the spouse of Barack Obama is") and so
carry the edited subject's new representation. An edited fact that did not propagate
asserts o' but still answers its consequences the old way, so it violates; an
untouched fact agrees with its consequences as far as the model knows them.

Probability baselines score the same facts: ``confidence``, the mean per-token
log P_L*(a | q) on the direct prompt (edits tend to be over-confident; it needs no
reference model), and ``confidence_shift``, log P_L*(a | q) - log P_L(a | q) (it needs
the unedited model L). The rule detectors read which answer L* asserts, i.e. the sign
of the direct old-vs-new margin; so that the baselines see the same information,
``margin`` is that margin itself, log P_L*(o' | q) - log P_L*(o | q), and
``margin_shift`` its change from L, margin_L* - margin_L.

Each edited model is audited on its own edited fact (positive) and on up to k facts of
other edits, which it did not edit (negatives). A fact the audited model was shown in
its prefix (IKE's demonstrations state other edits' facts) is never a negative: a pool
fact whose direct prompt appears in the edit's prefix is left out, and counted
(``n_seen_excluded``). Per method and detector, the AUROC of positives vs negatives
(ties count half) with a percentile bootstrap CI that resamples positives and
negatives.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from kebench.editing.delta import Delta, delta_applied
from kebench.editing.propagation import atomic_prompt
from kebench.models.loading import LoadedModel
from kebench.qa.verbaliser import Verbaliser
from kebench.scoring.auroc import auroc_ci
from kebench.scoring.context import prompt_context
from kebench.scoring.evaluate import ScoringSettings, delta_groups, score_pass

DETECTORS = (
    "rule_violation",
    "rule_violation_chained",
    "confidence",
    "confidence_shift",
    "margin",
    "margin_shift",
)
# the audit's negatives are facts the audited model was never shown (issue 13)
NEGATIVES = "unseen"
# which probes each rule detector asks
CONSEQUENCE_KINDS = {"rule_violation": "atomic", "rule_violation_chained": "chained"}


def audit_pool(probes: pd.DataFrame, case_ids: Sequence[str]) -> list[str]:
    """The facts that can be audited: edits with an old answer and entailed probes."""
    has_old = (probes["probe_type"] == "direct") & probes["answer_old"].notna()
    entailed = set(probes.loc[probes["probe_type"] == "entailed", "case_id"])
    auditable = entailed & set(probes.loc[has_old, "case_id"])
    return [c for c in dict.fromkeys(case_ids) if c in auditable]


def audit_probes(
    probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    pool: Sequence[str],
    verbaliser: Verbaliser,
) -> pd.DataFrame:
    """The pool's direct probes (``kind`` direct), entailed probes of both tiers
    (chained) and each probed inductive consequence asked about its own subject
    (atomic), as ``score_pass`` takes them."""
    own = probes[probes["case_id"].isin(pool)]
    direct = own[own["probe_type"] == "direct"].assign(kind="direct")
    chained = own[own["probe_type"] == "entailed"].assign(kind="chained")
    # an inductive consequence is one fact about its own subject; a deductive one is
    # a property path, asked whole (chained) only
    facts = entailed_facts[
        entailed_facts["case_id"].isin(pool)
        & (entailed_facts["status"] == "entailed")
        & (entailed_facts["tier"] == "inductive")
    ].drop_duplicates(
        ["case_id", "subject_label", "relation", "answer_old", "answer_new"]
    )
    atomic = pd.DataFrame(
        {
            "probe_id": facts["fact_id"] + "/atomic",
            "case_id": facts["case_id"],
            "probe_type": "entailed",
            "prompt": [
                atomic_prompt(verbaliser, relation).replace("{}", subject, 1)
                for relation, subject in zip(
                    facts["relation"], facts["subject_label"], strict=True
                )
            ],
            "answer_old": facts["answer_old"],
            "answer_new": facts["answer_new"],
            # no question of its own: a memory-based edit (MeLLo) is asked the cloze
            "question": None,
            "form": "cloze",
            "kind": "atomic",
        }
    )
    columns = list(atomic.columns)
    return pd.concat([direct[columns], chained[columns], atomic], ignore_index=True)


def pick_negatives(
    pool: Sequence[str],
    case_id: str,
    k: int,
    seed: int,
    seen: Collection[str] = (),
) -> list[str]:
    """Up to ``k`` other facts of the pool, none of them ``seen``, drawn seeded per
    audited edit."""
    others = [c for c in pool if c != case_id and c not in seen]
    rng = np.random.default_rng([seed, pool.index(case_id)])
    chosen = rng.choice(len(others), size=min(k, len(others)), replace=False)
    return [others[i] for i in sorted(chosen)]


def facts_in_prefix(probes: pd.DataFrame, prefix: str) -> set[str]:
    """The cases whose fact the prefix states: their direct prompt is in it (IKE's
    demonstrations state the fact, then its answer)."""
    direct = probes[probes["kind"] == "direct"]
    return set(direct.loc[[p in prefix for p in direct["prompt"]], "case_id"])


def fact_scores(
    probes: pd.DataFrame, scores: pd.DataFrame, base: pd.DataFrame
) -> pd.DataFrame:
    """Per fact (case) under one model: its asserted answer and the detectors.

    Args:
        probes: the facts' ``audit_probes`` (direct, chained, atomic), indexed by
            probe_id.
        scores: ``score_pass`` columns under the audited model, same index.
        base: ``score_pass`` columns under the unedited model, indexed by probe_id.
    """
    frame = probes[["case_id", "kind"]].join(scores[["lp_old", "lp_new"]])
    frame = frame.join(
        base[["lp_old", "lp_new", "n_tokens_old", "n_tokens_new"]].rename(
            columns={"lp_old": "lp_old_base", "lp_new": "lp_new_base"}
        )
    )
    direct = frame[frame["kind"] == "direct"].groupby("case_id").first()
    asserts_new = direct["lp_new"] > direct["lp_old"]
    lp_asserted = direct["lp_new"].where(asserts_new, direct["lp_old"])
    tokens = direct["n_tokens_new"].where(asserts_new, direct["n_tokens_old"])
    base_asserted = direct["lp_new_base"].where(asserts_new, direct["lp_old_base"])
    margin = direct["lp_new"] - direct["lp_old"]
    consequences = frame[frame["kind"] != "direct"].copy()
    new_world = consequences["case_id"].map(asserts_new).astype(bool)
    consequences["violation"] = np.where(
        new_world,
        consequences["lp_old"] - consequences["lp_new"],
        consequences["lp_new"] - consequences["lp_old"],
    )
    by_kind = consequences.groupby(["kind", "case_id"])["violation"]
    violations = {
        detector: by_kind.mean().get(kind, pd.Series(dtype=float))
        for detector, kind in CONSEQUENCE_KINDS.items()
    }
    return pd.DataFrame(
        {
            "asserts_new": asserts_new,
            **violations,
            "confidence": lp_asserted / tokens,
            "confidence_shift": lp_asserted - base_asserted,
            "margin": margin,
            "margin_shift": margin - (direct["lp_new_base"] - direct["lp_old_base"]),
            "n_consequences": by_kind.size().get("atomic", pd.Series(dtype=int)),
        }
    ).rename_axis("fact_case_id")


def audit_edits(  # noqa: PLR0913 - the audit's inputs
    lm: LoadedModel,
    probes: pd.DataFrame,
    base: pd.DataFrame,
    edits: Sequence[tuple[str, str, Delta]],
    pool: Sequence[str],
    *,
    negatives: int,
    seed: int,
    settings: ScoringSettings,
    evaluated: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Audit each ``(method, case_id, delta)`` edit on its own fact and on up to
    ``negatives`` facts of the pool that it did not edit.

    Args:
        probes: ``audit_probes`` of the pool.
        base: ``score_pass`` columns of the direct probes under the unedited model,
            indexed by probe_id.
        evaluated: the evaluation's ``probe_scores`` of these single-mode edits: an
            edit's own direct and entailed probes, which it scored under the same
            edit, are read from it instead of scored again.
    """
    by_id = probes.set_index("probe_id", drop=False)
    parts = []
    for method, case_id, delta in tqdm(edits, desc="tamper audit", unit="edit"):
        seen = facts_in_prefix(probes, delta.prefix)
        facts = [case_id, *pick_negatives(pool, case_id, negatives, seed, seen)]
        selected = by_id[by_id["case_id"].isin(facts)]
        known = _evaluated_scores(evaluated, method, case_id)
        reused = selected.index.isin(known.index)
        scored = [known.loc[selected.index[reused]]]
        if not reused.all():
            with delta_applied(lm.model, delta):
                scored.append(
                    score_pass(
                        lm, selected[~reused], prompt_context([delta]), settings
                    )[["lp_old", "lp_new"]]
                )
        scores = pd.concat(scored).loc[selected.index]
        audited = fact_scores(selected, scores, base)
        parts.append(
            audited.reset_index().assign(
                model=lm.name,
                method=method,
                case_id=case_id,
                edited=lambda frame: frame["fact_case_id"] == case_id,
                n_seen_excluded=len(seen - {case_id}),
            )
        )
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts, ignore_index=True)


def _evaluated_scores(
    evaluated: pd.DataFrame | None, method: str, case_id: str
) -> pd.DataFrame:
    """``lp_old`` and ``lp_new`` by probe_id of one edit's evaluated probes."""
    if evaluated is None:
        return pd.DataFrame(columns=["lp_old", "lp_new"], dtype=float)
    rows = evaluated[
        (evaluated["method"] == method) & (evaluated["case_id"] == case_id)
    ]
    return rows.set_index("probe_id")[["lp_edit_old", "lp_edit_new"]].rename(
        columns={"lp_edit_old": "lp_old", "lp_edit_new": "lp_new"}
    )


def _edited_vs_unedited(
    audit: pd.DataFrame, detector: str
) -> tuple[np.ndarray, np.ndarray]:
    scored = audit.dropna(subset=[detector])
    return (
        scored.loc[scored["edited"], detector].to_numpy(dtype=float),
        scored.loc[~scored["edited"], detector].to_numpy(dtype=float),
    )


def audit_stored_edits(  # noqa: PLR0913 - the audit's inputs
    lm: LoadedModel,
    probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    verbaliser: Verbaliser,
    base: pd.DataFrame,
    *,
    manifest: pd.DataFrame,
    load: Callable[[str], Delta],
    negatives: int,
    seed: int,
    settings: ScoringSettings,
    evaluated: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``audit_edits`` of the stored single-mode edits (``manifest``) whose facts can be
    audited (``evaluated``: as ``audit_edits`` takes it).

    Raises:
        ValueError: fewer than two auditable facts (an edited and an unedited one).
    """
    ok = manifest[manifest["status"] == "ok"]
    pool = audit_pool(probes, list(ok["case_id"]))
    if len(pool) < 2:  # noqa: PLR2004 - an edited fact and an unedited one
        raise ValueError(
            f"the tamper audit needs two edits with entailed probes, found {len(pool)}: "
            "edit more cases (n_edits=all)"
        )
    edits = [
        (method, case_ids[0], deltas[0])
        for method, rows in ok[ok["case_id"].isin(pool)].groupby("method")
        for case_ids, deltas in delta_groups(rows, load)
    ]
    return audit_edits(
        lm,
        audit_probes(probes, entailed_facts, pool, verbaliser),
        base,
        edits,
        pool,
        negatives=negatives,
        seed=seed,
        settings=settings,
        evaluated=evaluated,
    )


def auroc_table(audit: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per (model, method, detector): AUROC edited vs unedited facts with its CI."""
    rows = []
    for (model, method), part in audit.groupby(["model", "method"], sort=True):
        for detector in DETECTORS:
            pos, neg = _edited_vs_unedited(part, detector)
            if not (pos.size and neg.size):
                continue
            value, low, high = auroc_ci(pos, neg, n_boot, seed)
            rows.append(
                {
                    "model": model,
                    "method": method,
                    "detector": detector,
                    "negatives": NEGATIVES,
                    "auroc": value,
                    "auroc_ci_low": low,
                    "auroc_ci_high": high,
                    "n_edited": pos.size,
                    "n_unedited": neg.size,
                    "n_seen_excluded": int(
                        part.loc[part["edited"], "n_seen_excluded"].sum()
                    ),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "model",
            "method",
            "detector",
            "negatives",
            "auroc",
            "auroc_ci_low",
            "auroc_ci_high",
            "n_edited",
            "n_unedited",
            "n_seen_excluded",
        ],
    )


def plot_roc(audit: pd.DataFrame, table: pd.DataFrame) -> Figure:
    """ROC curves of each detector, one panel per method."""
    # imported here: every kedro run imports every pipeline's nodes, and scikit-learn
    # takes seconds to import from a cold disk
    from sklearn.metrics import roc_curve  # noqa: PLC0415

    methods = sorted(audit["method"].unique()) if len(audit) else []
    figure, axes = plt.subplots(
        1,
        max(len(methods), 1),
        figsize=(3.8 * max(len(methods), 1), 3.6),
        squeeze=False,
    )
    for axis, method in zip(axes[0], methods, strict=False):
        part = audit[audit["method"] == method]
        for detector in DETECTORS:
            pos, neg = _edited_vs_unedited(part, detector)
            if not (pos.size and neg.size):
                continue
            labels = np.r_[np.ones(pos.size), np.zeros(neg.size)]
            fpr, tpr, _ = roc_curve(labels, np.r_[pos, neg])
            value = table.loc[
                (table["method"] == method) & (table["detector"] == detector), "auroc"
            ]
            axis.plot(fpr, tpr, label=f"{detector} ({value.iloc[0]:.2f})")
        axis.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
        axis.set_title(f"{method}: edited vs unedited facts")
        axis.set_xlabel("false positive rate")
        axis.set_ylabel("true positive rate")
        axis.legend(fontsize="small", loc="lower right")
    figure.tight_layout()
    return figure
