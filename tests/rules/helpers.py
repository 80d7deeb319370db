"""Shared helpers of the rule-mining tests: the reference folder and rule comparison."""

from __future__ import annotations

import os
from pathlib import Path

from kebench.rules import Rule, format_rule_line
from kebench.rules.amie_format import canonical_rule_text

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = Path(
    os.environ.get("KEBENCH_DATA_DIR", PROJECT_ROOT.parent / "shared" / "data")
)
REFERENCE_DIR = DATA_DIR / "amie_reference"
REFERENCE_KBS = sorted(REFERENCE_DIR.glob("*.tsv")) if REFERENCE_DIR.is_dir() else []
MISSING_REFERENCE = (
    f"AMIE reference outputs not found in {REFERENCE_DIR}; set KEBENCH_DATA_DIR"
)


def by_canonical_text(rules: list[Rule]) -> dict[str, str]:
    """Printed columns of each rule, keyed by its text up to the fresh variable's name."""
    keyed = {
        canonical_rule_text(rule.body, rule.head): format_rule_line(rule).split(
            "\t", 1
        )[1]
        for rule in rules
    }
    assert len(keyed) == len(rules), "two rules equal up to renaming"
    return keyed
