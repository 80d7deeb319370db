"""Rule-guided propagation: an edit's rule-entailed consequences as extra edits
(issues 7 and 13).

For each edited case, the rules that entail its consequences are split, seeded, into
*propagated* rules and *held-out* rules. A "rule" is a derivation of the propagated tier
(``mitigation.propagation.tiers``): a mined rule of the inductive tier, or a deductive
kind and property path (``composition:birthPlace/country``); a tier left out is held
out whole. The consequences of the propagated rules become
extra edit requests, made together with the case's own edit (a MEMIT batch, or
sequential ROME/FT). Consistency is then measured on the entailed probes of the
held-out rules only, so nothing the extra edits were made from is tested:

- rules are split in **groups**: two rules are in one group when their consequences
  share a relation (the cloze's relation template, "… is located in the country of")
  or a new answer. Held-out and propagated rules then never share either, so an extra
  edit "The alma mater of {} is located in the country of → Belgium" is never tested
  by "The place of birth of Emmanuel Macron is located in the country of → Belgium".
  When a case's rules form a single group, they are grouped by relation alone (held-out
  and propagated rules then share no relation template), and failing that split one by
  one; each held-out probe that shares a relation or a new answer with an extra edit
  of its case is marked ``shared`` (else ``disjoint``): gap closure is reported for
  each;
- a case whose consequences come from a single rule has nothing to hold out, and a
  case without entailed probes nothing to test; both are excluded, with the reason;
- a held-out probe whose consequence (subject, relation, new answer) is also entailed
  by a propagated rule is dropped as a leak, and counted;
- the extra edits act jointly with the case's own edit: a locality probe of the case
  whose fact (``fact_subject_uri``, ``fact_relation``) is a consequence an extra edit
  rewrites is dropped (role ``rewritten``), and counted, rather than scored as a
  locality failure.

An extra request states the consequence in one of two forms:

    chained: the consequence's own cloze, which names it from the edited subject
        ("The country of citizenship of the spouse of {} is" → Canada);
    atomic: the consequence as a plain fact about its own subject
        ("The country of citizenship of {} is" → Canada, subject Michelle Obama).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pandas as pd

from kebench.editing.requests import EditRequest
from kebench.qa.entailment import derivation_id
from kebench.qa.verbaliser import Verbaliser
from kebench.schemas import MITIGATION_PROBES, PROPAGATION_REQUESTS, TIERS

FORMS = ("chained", "atomic")


def consequence_keys(entailed_facts: pd.DataFrame) -> pd.Series:
    """What makes two consequences the same fact: subject, relation and new answer."""
    return (
        entailed_facts["subject_uri"]
        + " "
        + entailed_facts["relation"]
        + " "
        + entailed_facts["answer_new_uri"]
    )


def _components(facts: pd.DataFrame, links: Sequence[str]) -> list[list[str]]:
    """The rules as connected components: two rules are linked when their
    consequences share a value of one of the ``links`` columns."""
    group = {rule: rule for rule in sorted(set(facts["rule_id"]))}

    def root(rule: str) -> str:
        while group[rule] != rule:
            rule = group[rule]
        return rule

    for column in links:
        for _, linked in facts.groupby(column)["rule_id"]:
            first, *rest = sorted(set(linked))
            for rule in rest:
                group[root(rule)] = root(first)
    components: dict[str, list[str]] = {}
    for rule in group:
        components.setdefault(root(rule), []).append(rule)
    return sorted(components.values())


# the ways of grouping a case's rules, most disjoint first: no shared relation or new
# answer; no shared relation; none (each rule alone)
GROUPINGS = (("relation", "answer_new_uri"), ("relation",), ("rule_id",))


def rule_groups(facts: pd.DataFrame) -> list[list[str]]:
    """The case's rules in groups to split whole: the first of ``GROUPINGS`` that
    gives two groups or more, so held-out and propagated rules share neither a
    consequence relation nor a new answer where the rules allow it, else no relation."""
    for links in GROUPINGS:
        groups = _components(facts, links)
        if len(groups) > 1:
            return groups
    return groups


def split_rules(
    groups: Sequence[Sequence[str]], case_id: str, held_out_share: float, seed: int
) -> tuple[list[str], list[str]]:
    """``(propagated, held_out)`` rules of one case: a seeded shuffle of its rule
    groups, at least one group on each side (nothing is held out of a single one)."""
    if len(groups) < 2:  # noqa: PLR2004 - one side each
        return sorted(rule for g in groups for rule in g), []
    digest = hashlib.sha256(f"{seed}:{case_id}".encode()).digest()
    order = np.random.default_rng(int.from_bytes(digest[:8], "big")).permutation(
        len(groups)
    )
    n_held = min(max(1, round(held_out_share * len(groups))), len(groups) - 1)
    shuffled = [groups[i] for i in order]
    return (
        sorted(rule for g in shuffled[n_held:] for rule in g),
        sorted(rule for g in shuffled[:n_held] for rule in g),
    )


def atomic_prompt(verbaliser: Verbaliser, relation: str) -> str:
    """The cloze stating ``relation`` of a subject, with ``{}`` for the subject."""
    _, prompt, _ = verbaliser.question("{}", [], relation)
    return prompt


def _request(
    fact: pd.Series, cloze: str, case_subject: str, form: str, verbaliser: Verbaliser
) -> dict[str, str] | None:
    """The extra edit stating ``fact``, or None when its subject is not in the prompt.

    A deductive consequence's question already names its own subject, so its two
    forms are one: its cloze, about that subject."""
    if fact["tier"] == "deductive":
        subject = fact["subject_label"]
        if subject not in cloze:
            return None
        prompt = cloze.replace(subject, "{}", 1)
    elif form == "atomic":
        prompt = atomic_prompt(verbaliser, fact["relation"])
        subject = fact["subject_label"]
    else:
        subject = next(
            (s for s in (case_subject, fact["subject_label"]) if s in cloze), None
        )
        if subject is None:
            return None
        prompt = cloze.replace(subject, "{}", 1)
    return {
        "case_id": fact["case_id"],
        "fact_id": fact["fact_id"],
        "tier": fact["tier"],
        "rule_id": fact["rule_id"],
        "prompt": prompt,
        "subject": subject,
        "target_true": fact["answer_old"],
        "target_new": fact["answer_new"],
    }


def _overlap(held: pd.DataFrame, made: pd.DataFrame) -> np.ndarray:
    """``shared`` where a held-out probe's consequence has the relation or the new
    answer of an extra edit's consequence, else ``disjoint``."""
    shared = held["relation"].isin(made["relation"]) | held["answer_new_uri"].isin(
        made["answer_new_uri"]
    )
    return np.where(shared, "shared", "disjoint")


def _rewritten(locality: pd.DataFrame, made: pd.DataFrame) -> pd.DataFrame:
    """The locality probes whose fact (subject IRI, one of its KG relations) is the
    last fact of an extra edit's consequence."""
    changed = set(zip(made["fact_subject_uri"], made["fact_relation"], strict=True))
    asks = [
        pd.notna(subject) and any((subject, r) in changed for r in relation.split("|"))
        for subject, relation in zip(
            locality["fact_subject_uri"], locality["fact_relation"], strict=True
        )
    ]
    return locality[np.array(asks, dtype=bool)]


def plan_propagation(  # noqa: PLR0913 - the plan's inputs and settings
    case_ids: Sequence[str],
    entailed_facts: pd.DataFrame,
    entailed_questions: pd.DataFrame,
    probes: pd.DataFrame,
    *,
    verbaliser: Verbaliser,
    form: str = "chained",
    tiers: Sequence[str] = ("deductive",),
    held_out_share: float = 0.5,
    max_extra_edits: int = 8,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The extra edits, the probes' roles, and the excluded cases.

    Only probed consequences (facts with a question) are propagated or held out. In
    each tier of ``tiers`` a case's derivations (a mined rule, or a deductive kind and
    property path) are split into propagated and held-out ones; the deductive tier
    is sound to propagate, the inductive one propagates correlations (optional). A
    tier that is not propagated has every probe held out: its gap closure says what
    the other tier's extra edits did to it.

    Returns:
        requests: the extra edits (``PROPAGATION_REQUESTS``), in case order; each is
            named by its consequence's ``fact_id``.
        roles: ``MITIGATION_PROBES``: every entailed probe of a mitigated case as
            ``held_out`` (with its ``overlap``), ``propagated`` or ``leak`` (dropped),
            and its locality probes that an extra edit rewrites (``rewritten``,
            dropped).
        excluded: ``case_id, reason`` of every case left out of the mitigation.
    """
    if form not in FORMS:
        raise ValueError(f"unknown propagation form {form!r}; use one of {FORMS}")
    unknown = sorted(set(tiers) - set(TIERS))
    if unknown or not tiers:
        raise ValueError(
            f"mitigation.propagation.tiers: {list(tiers)!r}; use one or both of "
            f"{list(TIERS)}"
        )
    facts = entailed_facts[
        entailed_facts["fact_id"].isin(entailed_questions["fact_id"])
    ]
    facts = facts.assign(
        key=consequence_keys(facts),
        rule_id=[derivation_id(f) for f in facts.to_dict("records")],
    )
    questions = entailed_questions.merge(facts[["fact_id", "key"]], on="fact_id")
    entailed = probes[
        (probes["probe_type"] == "entailed") & probes["tier"].isin(list(TIERS))
    ]
    locality = probes[probes["probe_type"] == "locality"]
    # each probe's consequence: the fact whose question it asks
    probe_facts = entailed.merge(
        questions[["case_id", "rule_id", "cloze", "fact_id"]],
        left_on=["case_id", "rule_id", "prompt"],
        right_on=["case_id", "rule_id", "cloze"],
    )[["probe_id", "fact_id"]].merge(
        facts[["fact_id", "key", "relation", "answer_new_uri"]], on="fact_id"
    )
    subjects = (
        probes.drop_duplicates("case_id").set_index("case_id")["subject"].to_dict()
    )
    first_cloze = questions.drop_duplicates("fact_id").set_index("fact_id")["cloze"]
    requests, roles, excluded = [], [], []
    for case_id in case_ids:
        case_probes = entailed[entailed["case_id"] == case_id]
        case_facts = facts[facts["case_id"] == case_id]
        if case_probes.empty:
            excluded.append((case_id, "no entailed probes"))
            continue
        propagated, held_out = [], []
        for tier in tiers:
            own = case_facts[case_facts["tier"] == tier]
            if not own.empty:
                sent, kept = split_rules(
                    rule_groups(own), f"{tier}:{case_id}", held_out_share, seed
                )
                propagated += sent
                held_out += kept
        chosen = case_facts[case_facts["rule_id"].isin(propagated)].drop_duplicates(
            "key"
        )
        extra = [
            _request(
                fact, first_cloze[fact["fact_id"]], subjects[case_id], form, verbaliser
            )
            for _, fact in chosen.iterrows()
        ]
        extra = [r for r in extra if r is not None][:max_extra_edits]
        if not extra:
            reason = (
                "one derivation per tier only: nothing to hold out"
                if propagated and not held_out
                else "no consequence of the propagated derivations to edit"
            )
            excluded.append((case_id, reason))
            continue
        made = chosen[chosen["fact_id"].isin([r["fact_id"] for r in extra])]
        asked = case_probes[["case_id", "probe_id", "rule_id", "tier"]].merge(
            probe_facts.drop_duplicates("probe_id"), on="probe_id", how="left"
        )
        leaked = asked["key"].isin(made["key"])
        role = np.where(
            asked["rule_id"].isin(propagated),
            "propagated",
            np.where(leaked, "leak", "held_out"),
        )
        if not (role == "held_out").any():
            if (role == "leak").any():
                reason = "every held-out probe shares a consequence with an extra edit"
            elif not held_out:
                reason = "one derivation per tier only: nothing to hold out"
            else:
                reason = "no entailed probe of a held-out derivation"
            excluded.append((case_id, reason))
            continue
        requests += extra
        overlap = np.where(role == "held_out", _overlap(asked, made), None)
        rewritten = _rewritten(locality[locality["case_id"] == case_id], made)
        roles += [
            asked[["case_id", "probe_id", "rule_id", "tier"]].assign(
                role=role, overlap=overlap
            ),
            rewritten[["case_id", "probe_id"]].assign(
                tier=None, rule_id=None, role="rewritten", overlap=None
            ),
        ]
    return (
        PROPAGATION_REQUESTS.validate(
            pd.DataFrame(requests, columns=list(PROPAGATION_REQUESTS.columns))
        ),
        MITIGATION_PROBES.validate(
            pd.concat(roles, ignore_index=True)
            if roles
            else pd.DataFrame(columns=list(MITIGATION_PROBES.columns))
        ),
        pd.DataFrame(excluded, columns=["case_id", "reason"]),
    )


def requests_from_plan(plan: pd.DataFrame) -> list[EditRequest]:
    """One ``EditRequest`` per extra edit, named by its consequence's ``fact_id``."""
    return [
        EditRequest(
            case_id=row.fact_id,
            prompt=row.prompt,
            subject=row.subject,
            target_true=row.target_true,
            target_new=row.target_new,
        )
        for row in plan.itertuples(index=False)
    ]


def joint_requests(
    direct: Mapping[str, EditRequest], plan: pd.DataFrame, case_ids: Collection[str]
) -> list[list[EditRequest]]:
    """Each planned case of ``case_ids`` as the edits made together: its own edit
    (``direct``, by case) first, then its extra edits, in plan order."""
    return [
        [direct[case_id], *requests_from_plan(part)]
        for case_id, part in plan.groupby("case_id", sort=False)
        if case_id in case_ids
    ]
