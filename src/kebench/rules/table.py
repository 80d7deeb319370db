"""The ``rules`` table: one row per rule, with AMIE's measures and output line."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from kebench.rules.amie_format import canonical_rule_text, format_rule_line
from kebench.rules.model import Rule

if TYPE_CHECKING:
    import pandas as pd

RULE_COLUMNS = (
    "rule_id",
    "body",
    "head",
    "head_coverage",
    "std_confidence",
    "pca_confidence",
    "support",
    "body_size",
    "pca_body_size",
    "functional_variable",
    "amie_line",
)


def rule_id(rule: Rule) -> str:
    """Stable id of a rule, the same for rules equal up to the fresh variable's name."""
    digest = hashlib.sha1(canonical_rule_text(rule.body, rule.head).encode("utf-8"))
    return f"R{digest.hexdigest()[:12]}"


def rule_record(rule: Rule) -> dict[str, object]:
    """One row of the rules table (atoms as [subject, relation, object] lists)."""
    return {
        "rule_id": rule_id(rule),
        "body": [list(atom) for atom in rule.body],
        "head": list(rule.head),
        "head_coverage": rule.head_coverage,
        "std_confidence": rule.std_confidence,
        "pca_confidence": rule.pca_confidence,
        "support": rule.support,
        "body_size": rule.body_size,
        "pca_body_size": rule.pca_body_size,
        "functional_variable": rule.functional_variable,
        "amie_line": format_rule_line(rule),
    }


def to_frame(rules: list[Rule]) -> pd.DataFrame:
    """The rules table, in the order of the given rules."""
    # imported here: `kebench mine-rules` needs no pandas, and its start-up counts
    import pandas as pd  # noqa: PLC0415

    return pd.DataFrame(
        [rule_record(rule) for rule in rules], columns=list(RULE_COLUMNS)
    )
