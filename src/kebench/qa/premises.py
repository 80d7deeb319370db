"""Premise probes: does the base model know the facts an edit's tests rest on?

A model that never knew Obama's spouse cannot be blamed for a wrong "spouse's
citizenship" (RippleEdits checks such prerequisites). Each entailed probe rests on the
KG facts of its derivation other than the edit (``entailed_facts.premises``); each
direct edit rests on its original fact (s, r, o). Every such fact becomes a cloze probe
with the KG's answer and up to ``n_candidates`` other answers of the same relation in
the KG (a seeded draw, never a true answer of that subject), plus, for the edit's own
fact, the edit's new target. ``kebench.scoring.premises`` scores them on the base model.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from kebench.qa.entailment import edit_relations
from kebench.qa.verbaliser import Verbaliser
from kebench.schemas import PREMISE_PROBES

KINDS = ("edit_fact", "premise", "condition")


class _Answers:
    """Per relation, the distinct answers of some facts; per (subject, relation), the
    true ones."""

    def __init__(self, facts: Iterable[tuple[str, str, Iterable[str]]]) -> None:
        """``facts``: (subject, relation, its true answers: an answer and aliases)."""
        self.of_relation: dict[str, list[str]] = defaultdict(list)
        self.true: dict[tuple[str, str], set[str]] = defaultdict(set)
        for subject, relation, answers in facts:
            self.true[(subject, relation)].update(answers)
        by_relation: dict[str, set[str]] = defaultdict(set)
        for (_, relation), answers in self.true.items():
            by_relation[relation].update(answers)
        self.of_relation.update({r: sorted(a) for r, a in by_relation.items()})

    @classmethod
    def of_kg(cls, kg_triples: pd.DataFrame) -> _Answers:
        """The KG's entity facts, by subject label and predicate local name."""
        entities = kg_triples[~kg_triples["o_is_literal"]]
        return cls(
            (s, r, [o])
            for s, r, o in zip(
                entities["s_label"],
                entities["p_local"],
                entities["o_label"],
                strict=True,
            )
        )

    def candidates(
        self, subject: str, relations: Sequence[str], n: int, seed: int
    ) -> list[str]:
        """Up to ``n`` answers of ``relations`` that are not true of ``subject``."""
        true = set().union(*(self.true[(subject, r)] for r in relations))
        pool = sorted(
            {a for r in relations for a in self.of_relation.get(r, [])} - true
        )
        # a stable seed per fact: the same fact draws the same candidates in any run
        key = f"{seed}|{subject}|{'|'.join(relations)}".encode()
        rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
        return rng.sample(pool, min(n, len(pool)))


def _entailed_fact_ids(
    probes: pd.DataFrame, entailed_questions: pd.DataFrame
) -> pd.Series:
    """The ``entailed_facts.fact_id`` of each entailed probe (its cloze and answer)."""
    entailed = probes[probes["probe_type"] == "entailed"]
    keyed = entailed_questions.drop_duplicates(["case_id", "cloze", "answer_new"])
    joined = entailed.merge(
        keyed[["case_id", "cloze", "answer_new", "fact_id"]],
        left_on=["case_id", "prompt", "answer_new"],
        right_on=["case_id", "cloze", "answer_new"],
        how="left",
    )
    return pd.Series(joined["fact_id"].to_numpy(), index=joined["probe_id"])


def premise_probes(  # noqa: PLR0913 - the tables a premise is read from, and settings
    probes: pd.DataFrame,
    entailed_questions: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    edit_requests: pd.DataFrame,
    kg_triples: pd.DataFrame,
    *,
    verbaliser: Verbaliser,
    relations: Mapping[str, Mapping[str, Any]],
    n_candidates: int,
    seed: int,
    dataset_probes: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per (probe, premise): the premise as a cloze, its KG answer and the
    candidates it must beat. A direct probe's premise is the edit's original fact; an
    entailed probe's are its derivation's KG facts (none: the probe rests on the edit
    alone). Injected claims have no original fact and no premise. A dataset's own
    probes add the conditions the dataset names (``condition_rows``)."""
    answers = _Answers.of_kg(kg_triples)
    rows = []
    edits = edit_requests.set_index("case_id")
    direct = probes[(probes["probe_type"] == "direct") & probes["answer_old"].notna()]
    for probe in direct.to_dict("records"):
        edit = edits.loc[probe["case_id"]]
        predicates = edit_relations(edit["relation_id"], relations)
        others = answers.candidates(edit["subject"], predicates, n_candidates, seed)
        rows.append(
            {
                "probe_id": probe["probe_id"],
                "case_id": probe["case_id"],
                "kind": "edit_fact",
                "subject": edit["subject"],
                "relation": "|".join(predicates) or edit["relation_id"],
                "prompt": probe["prompt"],
                "answer": edit["target_true"],
                # the edit's own target first: a model that already prefers it does
                # not know the fact the edit replaces
                "candidates": [edit["target_new"]]
                + [
                    c
                    for c in others
                    if c not in (edit["target_new"], edit["target_true"])
                ],
            }
        )
    premises_of = entailed_facts.set_index("fact_id")["premises"]
    case_of = probes.set_index("probe_id")["case_id"]
    fact_ids = _entailed_fact_ids(probes, entailed_questions).dropna()
    for probe_id, fact_id in fact_ids.items():
        for subject, relation, answer in json.loads(premises_of[fact_id]):
            _, cloze, _ = verbaliser.question(subject, [], relation)
            rows.append(
                {
                    "probe_id": probe_id,
                    "case_id": case_of[probe_id],
                    "kind": "premise",
                    "subject": subject,
                    "relation": relation,
                    "prompt": cloze,
                    "answer": answer,
                    "candidates": answers.candidates(
                        subject, [relation], n_candidates, seed
                    ),
                }
            )
    if dataset_probes is not None:
        rows += condition_rows(probes, dataset_probes, n_candidates, seed)
    frame = pd.DataFrame(rows, columns=list(PREMISE_PROBES.columns))
    frame["candidates"] = frame["candidates"].map(
        lambda c: json.dumps(list(c), ensure_ascii=False)
    )
    return PREMISE_PROBES.validate(frame)


def condition_rows(
    probes: pd.DataFrame, dataset_probes: pd.DataFrame, n_candidates: int, seed: int
) -> list[dict]:
    """Premise rows (kind ``condition``) of the dataset probes that name conditions
    (``DATASET_PROBES.premises``: RippleEdits' ``condition_queries``), for the probes
    they became. A condition's candidates are the answers of the dataset's other
    conditions of its relation, never its own answer or an alias of it."""
    wanted = dataset_probes[dataset_probes["premises"] != "[]"]
    if wanted.empty:
        return []
    conditions = wanted.assign(premises=wanted["premises"].map(json.loads))
    answers = _Answers(
        (c["subject"], c["relation"], [c["answer"], *c["aliases"]])
        for premises in conditions["premises"]
        for c in premises
    )
    # the probe a dataset probe became: same case, type, text and answer
    keyed = probes.assign(text=probes["question"].fillna(probes["prompt"]))
    joined = conditions.merge(
        keyed[["case_id", "probe_type", "text", "answer_new", "probe_id"]],
        on=["case_id", "probe_type", "text", "answer_new"],
    )
    rows = []
    for probe in joined.to_dict("records"):
        for condition in probe["premises"]:
            rows.append(
                {
                    "probe_id": probe["probe_id"],
                    "case_id": probe["case_id"],
                    "kind": "condition",
                    "subject": condition["subject"],
                    "relation": condition["relation"],
                    "prompt": condition["prompt"],
                    "answer": condition["answer"],
                    "candidates": answers.candidates(
                        condition["subject"],
                        [condition["relation"]],
                        n_candidates,
                        seed,
                    ),
                }
            )
    return rows
