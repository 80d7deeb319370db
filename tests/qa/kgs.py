"""Small hand-written KGs and rule tables for the consequence tests."""

from __future__ import annotations

import pandas as pd

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
    return pd.DataFrame([{"rule_id": i, "body": b, "head": h} for i, b, h in specs])


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
