"""Small hand-written KGs and rule tables for the consequence tests."""

from __future__ import annotations

import pandas as pd

from kebench.kg.vocabulary import Vocabulary
from kebench.qa.entailment import DerivationContext, derive_entailed_facts

R = "http://dbpedia.org/resource/"
DBO = "http://dbpedia.org/ontology/"


def kg(*facts: tuple[str, str, str]) -> pd.DataFrame:
    """A ``kg_triples`` frame of entity facts, labels from the local names."""
    rows = [
        {
            "s": R + s,
            "p": DBO + p,
            "o": R + o,
            "o_is_literal": False,
            "o_lang": None,
            "s_label": s.replace("_", " "),
            "p_local": p,
            "o_label": o.replace("_", " "),
        }
        for s, p, o in facts
    ]
    return pd.DataFrame(rows)


def rules(*specs) -> pd.DataFrame:
    """A ``rules`` frame (rule_id, body, head) from (id, body, head) triples."""
    return pd.DataFrame(
        [{"rule_id": i, "body": b, "head": h} for i, b, h in specs],
        columns=["rule_id", "body", "head"],
    )


def edit_row(case_id, subject, relation_id, old, new) -> dict:
    """An ``edit_requests`` row over local names ("Atlantis" is never linked)."""
    return {
        "case_id": case_id,
        "subject": subject.replace("_", " "),
        "relation_id": relation_id,
        "target_true": old.replace("_", " "),
        "target_new": new.replace("_", " "),
        "subject_uri": R + subject if subject != "Atlantis" else None,
        "target_true_uri": R + old,
        "target_new_uri": R + new,
    }


def every_predicate_factual(kg_triples: pd.DataFrame) -> DerivationContext:
    """A context in which every predicate of ``kg_triples`` states facts and no axiom
    holds: the rule closure's tests, on KGs without an axiom table."""
    return DerivationContext(Vocabulary(factual=frozenset(kg_triples["p"])))


def derive(edits, rule_table, kg_triples, relations, **settings):
    """``derive_entailed_facts`` under ``every_predicate_factual``."""
    return derive_entailed_facts(
        edits,
        rule_table,
        kg_triples,
        relations,
        every_predicate_factual(kg_triples),
        **settings,
    )
