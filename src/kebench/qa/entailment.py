"""Frame-level glue: every edit's entailed facts, and their questions."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pandas as pd

from kebench.kg.amie_export import amie_term, local_name
from kebench.qa.closure import (
    STATUSES,
    ClosureSettings,
    EditedWorld,
    consistent_facts,
)
from kebench.qa.consequences import (
    ConsequenceFinder,
    EditedFact,
    Entity,
    KgIndex,
    entailed_facts,
)
from kebench.qa.llm_questions import LlmQuestionWriter
from kebench.qa.verbaliser import Verbaliser
from kebench.schemas import ENTAILED_FACTS, ENTAILED_QUESTIONS

logger = logging.getLogger(__name__)


def edit_relations(
    relation_id: str, relations: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Local names of the KG predicates that state a relation (P-id)."""
    return [
        local_name(iri) for iri in relations.get(relation_id, {}).get("dbpedia", [])
    ]


def target_local(uri: object, label: str) -> str:
    """A target as rules name it: its entity's local name, else its text as a literal."""
    return (
        local_name(uri) if isinstance(uri, str) else amie_term(label, is_literal=True)
    )


def edited_facts(
    edit: Mapping[str, Any], kg: KgIndex, relations: Mapping[str, Mapping[str, Any]]
) -> tuple[list[EditedFact], str | None]:
    """The edit as KG facts, or the reason it cannot be one.

    A target that was not linked to an entity is matched as a literal (DBpedia often
    states heads of government as plain names). Among the KG predicates of the
    relation, those that state the old or the new value for the subject are used.
    """
    if not isinstance(edit["subject_uri"], str):
        return [], "subject not linked to the KG"
    if not isinstance(edit["target_true"], str):
        # Both semantics compare the world before the edit, where (subject,
        # relation) has the old value, with the world after it.
        return [], "the edit adds a fact: no old value to replace"
    subject = local_name(edit["subject_uri"])
    if subject not in kg.entities:
        return [], "subject not in the KG"
    old = target_local(edit["target_true_uri"], edit["target_true"])
    new = target_local(edit["target_new_uri"], edit["target_new"])
    candidates = [
        r for r in edit_relations(edit["relation_id"], relations) if r in kg.relations()
    ]
    if not candidates:
        return [], "relation has no KG predicate"
    stated = [
        r for r in candidates if kg.objects(subject, r) & {old, new}
    ] or candidates
    return [EditedFact(subject, relation, old, new) for relation in stated], None


SEMANTICS = ("paper", "consistent")


def derive_entailed_facts(  # noqa: PLR0913, PLR0917 - the inputs and the two settings
    edit_requests: pd.DataFrame,
    rules: pd.DataFrame,
    kg_triples: pd.DataFrame,
    relations: Mapping[str, Mapping[str, Any]],
    semantics: str = "consistent",
    closure: ClosureSettings = ClosureSettings(),
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``entailed_facts`` for every edit, and counts of what was skipped and why.

    ``semantics`` is ``paper`` (each rule applied once to KG + edit, every consequence
    ``entailed``) or ``consistent`` (the closure of kebench.qa.closure, with statuses).
    """
    if semantics not in SEMANTICS:
        raise ValueError(
            f"qa_generation.consequences.semantics: {semantics!r} is not one of "
            f"{list(SEMANTICS)}"
        )
    kg = KgIndex(kg_triples)
    finder = ConsequenceFinder(kg, rules, max_per_rule=closure.max_groundings_per_rule)
    rules_by_id = {
        rid: ([tuple(a) for a in body], tuple(head))
        for rid, body, head in zip(
            rules["rule_id"], rules["body"], rules["head"], strict=True
        )
    }
    world = EditedWorld(
        kg,
        [
            (rid, body, head)
            for rid, (body, head) in rules_by_id.items()
            # the finder counts and leaves out rules naming a relation the KG lacks
            if {a[1] for a in [*body, head]} <= kg.relations()
        ],
        closure,
    )
    rows, edits_skipped = [], Counter()
    for edit in edit_requests.to_dict("records"):
        facts, reason = edited_facts(edit, kg, relations)
        if reason:
            edits_skipped[reason] += 1
        # The targets may be absent from the KG; name them as the edit does.
        targets = {
            target_local(edit[f"{field}_uri"], edit[field]): Entity(
                "",
                uri if isinstance(uri := edit[f"{field}_uri"], str) else edit[field],
                edit[field],
            )
            for field in ("target_true", "target_new")
            if isinstance(edit[field], str)
        }
        entity = lambda local: kg.entities.get(local) or targets[local]  # noqa: E731
        labelled = lambda atoms: json.dumps(  # noqa: E731
            [[entity(s).label, r, entity(o).label] for s, r, o in atoms],
            ensure_ascii=False,
        )
        if semantics == "paper":
            consequences = [
                f
                for edited in facts
                for f in entailed_facts(finder, edited, rules_by_id)
            ]
        else:
            consequences = (
                consistent_facts(world, facts, finder.skipped) if facts else []
            )
        for number, fact in enumerate(consequences):
            rows.append(
                {
                    "fact_id": f"{edit['case_id']}/{number}",
                    "case_id": edit["case_id"],
                    "rule_id": fact.rule_id,
                    "bindings": json.dumps(fact.bindings, sort_keys=True),
                    "subject_uri": entity(fact.subject).iri,
                    "subject_label": entity(fact.subject).label,
                    "relation": fact.relation,
                    "answer_old": entity(fact.answer_old).label,
                    "answer_old_uri": entity(fact.answer_old).iri,
                    "answer_new": entity(fact.answer_new).label,
                    "answer_new_uri": entity(fact.answer_new).iri,
                    "chain": json.dumps(
                        [
                            [rel, direction, entity(e).label]
                            for rel, direction, e in fact.chain
                        ],
                        ensure_ascii=False,
                    ),
                    "path": labelled(fact.path),
                    "premises": labelled(fact.premises),
                    "status": fact.status,
                    "reason": fact.reason,
                    "depth": fact.depth,
                    "semantics": semantics,
                    # A backward step names its entity, so only forward steps add a hop.
                    "hops": 1
                    + sum(direction == "out" for _, direction, _ in fact.chain),
                }
            )
    frame = ENTAILED_FACTS.validate(
        pd.DataFrame(rows, columns=list(ENTAILED_FACTS.columns))
    )
    probed = frame[frame["status"] == "entailed"]
    per_edit = (
        probed.groupby("case_id").size().reindex(edit_requests["case_id"], fill_value=0)
    )
    not_probed = frame[frame["status"] != "entailed"]
    report = {
        "edits": len(edit_requests),
        "edits_with_consequence_pct": round(100.0 * float((per_edit > 0).mean()), 2),
        "semantics": semantics,
        "consequences": len(frame),
        "status": {
            status: int((frame["status"] == status).sum()) for status in STATUSES
        },
        "not_probed_by_reason": {
            status: {
                reason_kind(reason): int(n)
                for reason, n in part["reason"].value_counts().items()
            }
            for status, part in not_probed.groupby("status")
        },
        "top_rules_not_probed": top_rules(not_probed, rules),
        "top_rules_entailed": top_rules(probed, rules),
        "consequences_per_edit": {
            "mean": round(float(per_edit.mean()), 3),
            "max": int(per_edit.max()),
            "distribution": {
                str(k): int(v) for k, v in per_edit.value_counts().sort_index().items()
            },
        },
        "rules_available": len(rules),
        "rules_used": sorted(probed["rule_id"].unique().tolist()),
        "edits_without_kg_fact": dict(edits_skipped),
        "consequences_skipped": dict(finder.skipped),
        "closure_notes": dict(world.notes),
    }
    logger.info(
        "entailed facts (%s): %d of %d consequences for %d edits "
        "(%.1f%% with at least one), %d rules used",
        semantics,
        len(probed),
        len(frame),
        len(edit_requests),
        report["edits_with_consequence_pct"],
        len(report["rules_used"]),
    )
    return frame, report


def top_rules(facts: pd.DataFrame, rules: pd.DataFrame, n: int = 10) -> list[dict]:
    """The ``n`` rules with most of ``facts``: id, AMIE's text of the rule, count."""
    text = (
        dict(
            zip(
                rules["rule_id"], rules["amie_line"].str.split("\t").str[0], strict=True
            )
        )
        if "amie_line" in rules
        else {}
    )
    return [
        {"rule_id": rule, "rule": text.get(rule, ""), "count": int(count)}
        for rule, count in facts["rule_id"].value_counts().head(n).items()
    ]


def reason_kind(reason: str) -> str:
    """A reason without its particulars: the text before its colon."""
    return reason.split(":", maxsplit=1)[0]


def template_questions(
    entailed: pd.DataFrame,
    edit_requests: pd.DataFrame,
    verbaliser: Verbaliser,
    max_per_edit: int,
) -> pd.DataFrame:
    """One templated question (and cloze) per ``entailed`` fact (facts of another
    status are not probed), capped per edit, no duplicates."""
    subject_of = edit_requests.set_index("case_id")["subject"]
    rows = []
    for fact in entailed[entailed["status"] == "entailed"].to_dict("records"):
        chain = [tuple(step) for step in json.loads(fact["chain"])]
        question, cloze, wording = verbaliser.question(
            subject_of[fact["case_id"]], chain, fact["relation"]
        )
        rows.append(
            {
                "fact_id": fact["fact_id"],
                "case_id": fact["case_id"],
                "rule_id": fact["rule_id"],
                "question": question,
                "cloze": cloze,
                "answer_old": fact["answer_old"],
                "answer_new": fact["answer_new"],
                "hops": fact["hops"],
                "generator": "template",
                "wording": wording,
            }
        )
    return cap_questions(
        pd.DataFrame(rows, columns=list(ENTAILED_QUESTIONS.columns)), max_per_edit
    )


def cap_questions(questions: pd.DataFrame, max_per_edit: int) -> pd.DataFrame:
    """Drop duplicate questions of an edit and keep at most ``max_per_edit`` per edit."""
    questions = questions.drop_duplicates(["case_id", "question"])
    questions = questions.groupby("case_id", sort=False).head(max_per_edit)
    return ENTAILED_QUESTIONS.validate(questions.reset_index(drop=True))


def llm_questions(
    templated: pd.DataFrame,
    entailed: pd.DataFrame,
    rules: pd.DataFrame,
    writer: LlmQuestionWriter,
) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Replace each templated question by the LLM's, or drop it with the reason.

    The LLM sees the consequence's rule and its supporting facts (edit included) and
    must answer with the derived entity; the templated cloze is kept for scoring.
    """
    rule_text = {
        rid: line.split("\t")[0]
        for rid, line in zip(rules["rule_id"], rules["amie_line"], strict=True)
    }
    path_of = entailed.set_index("fact_id")["path"]
    kept, rejected = [], []
    for row in templated.to_dict("records"):
        question, reason = writer.write(
            [rule_text[row["rule_id"]]],
            json.loads(path_of[row["fact_id"]]),
            row["answer_new"],
        )
        if question is None:
            rejected.append({"fact_id": row["fact_id"], "reason": reason})
            continue
        kept.append({**row, "question": question, "generator": "llm", "wording": "llm"})
    logger.info("LLM questions: %d kept, %d rejected", len(kept), len(rejected))
    frame = pd.DataFrame(kept, columns=list(ENTAILED_QUESTIONS.columns))
    return ENTAILED_QUESTIONS.validate(frame), rejected
