"""Premise probes: does the base model know the facts an edit's tests rest on?

A model that never knew Obama's spouse cannot be blamed for a wrong "spouse's
citizenship" (RippleEdits checks such prerequisites). Each entailed probe rests on the
KG facts of its derivation other than the edit (``entailed_facts.premises``); each
direct edit rests on its original fact (s, r, o). Every such fact becomes a cloze probe
with the KG's answer and the other names the KG gives that answer;
``kebench.scoring.premises`` asks the base model to generate each answer.

A premise is asked in the direction its probe walks it. "The head of state of the
country whose head of state is Macron" walks (France, head of state, Macron) from
Macron: knowing that France's head of state is Macron is not knowing which country
Macron heads, so it is asked backward ("Emmanuel Macron is the head of state of" ->
France). A backward question may have several KG answers (every subject with that
object); any of them counts (``other_answers``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from kebench.kg.vocabulary import edit_relations
from kebench.qa.verbaliser import Verbaliser
from kebench.schemas import PREMISE_PROBES

KINDS = ("edit_fact", "premise", "condition")
FORWARD, BACKWARD = "forward", "backward"


def walked_direction(premise: Sequence[str], chain: Sequence[Sequence[str]]) -> str:
    """How a probe's chain walks ``premise`` (subject, relation, object): ``backward``
    when a step follows the relation in reverse and reaches the subject, else
    ``forward`` (a step that reaches the object, or a premise no step walks, as a
    mined rule's side condition)."""
    subject, relation, _ = premise
    for step_relation, direction, reached, *_ in chain:
        if step_relation == relation and direction == "in" and reached == subject:
            return BACKWARD
    return FORWARD


def backward_answers(kg_triples: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    """(relation local name, object label) -> the labels of every KG subject with that
    object under that relation: the answers of a premise asked backward."""
    entities = kg_triples[~kg_triples["o_is_literal"]]
    grouped = entities.groupby(["p_local", "o_label"])["s_label"]
    return {key: list(dict.fromkeys(labels)) for key, labels in grouped}


def entailed_fact_ids(
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
    *,
    verbaliser: Verbaliser,
    relations: Mapping[str, Mapping[str, Any]],
    aliases: Mapping[str, Sequence[str]],
    kg_triples: pd.DataFrame,
    dataset_probes: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per (probe, premise): the premise as a cloze in the direction the probe
    walks it (``walked_direction``), its KG answer and that answer's other names
    (``aliases``: answer label -> names, ``kebench.kg.aliases.aliases_by_label``),
    and, asked backward, the KG's other answers with their names. A direct probe's
    premise is the edit's original fact; an entailed probe's are its derivation's KG
    facts (none: the probe rests on the edit alone). Injected claims have no original
    fact and no premise. A dataset's own probes add the conditions the dataset names
    (``condition_rows``)."""
    rows = []
    edits = edit_requests.set_index("case_id")
    direct = probes[(probes["probe_type"] == "direct") & probes["answer_old"].notna()]
    for probe in direct.to_dict("records"):
        edit = edits.loc[probe["case_id"]]
        predicates = edit_relations(edit["relation_id"], relations)
        rows.append(
            {
                "probe_id": probe["probe_id"],
                "case_id": probe["case_id"],
                "kind": "edit_fact",
                "subject": edit["subject"],
                "relation": "|".join(predicates) or edit["relation_id"],
                "prompt": probe["prompt"],
                "direction": FORWARD,
                "answer": edit["target_true"],
                "aliases": aliases.get(edit["target_true"], []),
                "other_answers": [],
            }
        )
    facts = entailed_facts.set_index("fact_id")
    case_of = probes.set_index("probe_id")["case_id"]
    fact_ids = entailed_fact_ids(probes, entailed_questions).dropna()
    answers_of = backward_answers(kg_triples)
    for probe_id, fact_id in fact_ids.items():
        chain = json.loads(facts.at[fact_id, "chain"])
        for premise in json.loads(facts.at[fact_id, "premises"]):
            rows.append(
                _premise_row(premise, chain, verbaliser, aliases, answers_of)
                | {"probe_id": probe_id, "case_id": case_of[probe_id]}
            )
    if dataset_probes is not None:
        rows += condition_rows(probes, dataset_probes)
    frame = pd.DataFrame(rows, columns=list(PREMISE_PROBES.columns))
    for column in ("aliases", "other_answers"):
        frame[column] = frame[column].map(
            lambda names: json.dumps(list(names), ensure_ascii=False)
        )
    return PREMISE_PROBES.validate(frame)


def _premise_row(
    premise: Sequence[str],
    chain: Sequence[Sequence[str]],
    verbaliser: Verbaliser,
    aliases: Mapping[str, Sequence[str]],
    answers_of: Mapping[tuple[str, str], Sequence[str]],
) -> dict[str, Any]:
    """One entailed probe's premise (subject, relation, object), asked the way the
    probe's ``chain`` walks it."""
    subject, relation, answer = premise
    direction = walked_direction(premise, chain)
    if direction == FORWARD:
        _, cloze, _ = verbaliser.question(subject, [], relation)
        others: list[str] = []
    else:
        # asked from the object: which subject has it
        _, cloze, _ = verbaliser.path_question(answer, [(relation, "in", subject)])
        subject, answer = answer, subject
        others = [
            name
            for other in answers_of.get((relation, subject), [])
            if other != answer
            for name in (other, *aliases.get(other, []))
        ]
    return {
        "kind": "premise",
        "subject": subject,
        "relation": relation,
        "prompt": cloze,
        "direction": direction,
        "answer": answer,
        "aliases": aliases.get(answer, []),
        "other_answers": others,
    }


def condition_rows(probes: pd.DataFrame, dataset_probes: pd.DataFrame) -> list[dict]:
    """Premise rows (kind ``condition``) of the dataset probes that name conditions
    (``DATASET_PROBES.premises``: RippleEdits' ``condition_queries``), for the probes
    they became, each with the aliases the dataset gives its answer."""
    wanted = dataset_probes[dataset_probes["premises"] != "[]"]
    if wanted.empty:
        return []
    conditions = wanted.assign(premises=wanted["premises"].map(json.loads))
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
                    "direction": FORWARD,
                    "answer": condition["answer"],
                    "aliases": list(condition["aliases"]),
                    "other_answers": [],
                }
            )
    return rows
