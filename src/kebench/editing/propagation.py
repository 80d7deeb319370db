"""Rule-guided propagation: an edit's rule-entailed consequences as extra edits (issue 7).

For each edited case, the rules that entail its consequences are split, seeded, into
*propagated* rules and *held-out* rules. The consequences of the propagated rules become
extra edit requests, made together with the case's own edit (a MEMIT batch, or
sequential ROME/FT). Consistency is then measured on the entailed probes of the
held-out rules only, so nothing the extra edits were made from is tested:

- a case whose consequences come from a single rule has nothing to hold out, and a
  case without entailed probes nothing to test; both are excluded, with the reason;
- a held-out probe whose consequence (subject, relation, new answer) is also entailed
  by a propagated rule is dropped as a leak, and counted.

An extra request states the consequence in one of two forms:

    chained: the consequence's own cloze, which names it from the edited subject
        ("The country of citizenship of the spouse of {} is" → Canada);
    atomic: the consequence as a plain fact about its own subject
        ("The country of citizenship of {} is" → Canada, subject Michelle Obama).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from kebench.editing.requests import EditRequest
from kebench.qa.verbaliser import Verbaliser
from kebench.schemas import MITIGATION_PROBES, PROPAGATION_REQUESTS

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


def split_rules(
    rule_ids: Sequence[str], case_id: str, held_out_share: float, seed: int
) -> tuple[list[str], list[str]]:
    """``(propagated, held_out)`` rules of one case: a seeded shuffle, at least one
    rule on each side (nothing is held out of a single rule)."""
    rules = sorted(set(rule_ids))
    if len(rules) < 2:  # noqa: PLR2004 - one side each
        return rules, []
    digest = hashlib.sha256(f"{seed}:{case_id}".encode()).digest()
    order = np.random.default_rng(int.from_bytes(digest[:8], "big")).permutation(
        len(rules)
    )
    n_held = min(max(1, round(held_out_share * len(rules))), len(rules) - 1)
    shuffled = [rules[i] for i in order]
    return sorted(shuffled[n_held:]), sorted(shuffled[:n_held])


def atomic_prompt(verbaliser: Verbaliser, relation: str) -> str:
    """The cloze stating ``relation`` of a subject, with ``{}`` for the subject."""
    _, prompt, _ = verbaliser.question("{}", [], relation)
    return prompt


def _request(
    fact: pd.Series, cloze: str, case_subject: str, form: str, verbaliser: Verbaliser
) -> dict[str, str] | None:
    """The extra edit stating ``fact``, or None when its subject is not in the prompt."""
    if form == "atomic":
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
        "rule_id": fact["rule_id"],
        "prompt": prompt,
        "subject": subject,
        "target_true": fact["answer_old"],
        "target_new": fact["answer_new"],
    }


def plan_propagation(  # noqa: PLR0913 - the plan's inputs and settings
    case_ids: Sequence[str],
    entailed_facts: pd.DataFrame,
    entailed_questions: pd.DataFrame,
    probes: pd.DataFrame,
    *,
    verbaliser: Verbaliser,
    form: str = "chained",
    held_out_share: float = 0.5,
    max_extra_edits: int = 8,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The extra edits, the entailed probes' roles, and the excluded cases.

    Returns:
        requests: the extra edits (``PROPAGATION_REQUESTS``), in case order; each is
            named by its consequence's ``fact_id``.
        roles: ``case_id, probe_id, rule_id, role`` for every entailed probe of a
            mitigated case: ``held_out``, ``propagated``, or ``leak`` (dropped).
        excluded: ``case_id, reason`` of every case left out of the mitigation.
    """
    if form not in FORMS:
        raise ValueError(f"unknown propagation form {form!r}; use one of {FORMS}")
    facts = entailed_facts.assign(key=consequence_keys(entailed_facts))
    questions = entailed_questions.merge(facts[["fact_id", "key"]], on="fact_id")
    entailed = probes[probes["probe_type"] == "entailed"]
    # a probe's cloze may ask for several facts (groundings) of one consequence
    probe_keys = entailed.merge(
        questions[["case_id", "rule_id", "cloze", "key"]],
        left_on=["case_id", "rule_id", "prompt"],
        right_on=["case_id", "rule_id", "cloze"],
    )[["probe_id", "key"]]
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
        propagated, held_out = split_rules(
            case_facts["rule_id"], case_id, held_out_share, seed
        )
        if not held_out:
            excluded.append((case_id, "one rule only: nothing to hold out"))
            continue
        chosen = case_facts[
            case_facts["rule_id"].isin(propagated)
            & case_facts["fact_id"].isin(first_cloze.index)
        ].drop_duplicates("key")
        extra = [
            _request(
                fact, first_cloze[fact["fact_id"]], subjects[case_id], form, verbaliser
            )
            for _, fact in chosen.iterrows()
        ]
        extra = [r for r in extra if r is not None][:max_extra_edits]
        if not extra:
            excluded.append((case_id, "no consequence of the propagated rules to edit"))
            continue
        made = set(
            chosen.loc[chosen["fact_id"].isin([r["fact_id"] for r in extra]), "key"]
        )
        leaked = set(probe_keys.loc[probe_keys["key"].isin(made), "probe_id"])
        role = np.where(
            case_probes["rule_id"].isin(propagated),
            "propagated",
            np.where(case_probes["probe_id"].isin(leaked), "leak", "held_out"),
        )
        if not case_probes["rule_id"].isin(held_out).any():
            excluded.append((case_id, "no entailed probe of a held-out rule"))
            continue
        if not (role == "held_out").any():
            excluded.append(
                (
                    case_id,
                    "every held-out probe shares a consequence with an extra edit",
                )
            )
            continue
        requests += extra
        roles.append(case_probes[["case_id", "probe_id", "rule_id"]].assign(role=role))
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
