"""Every reference KB: the built-in miner prints exactly AMIE 3's rules and columns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kebench.rules import format_rule_line, mine_rules, parse_amie_output, read_amie_tsv

from .helpers import MISSING_REFERENCE, REFERENCE_KBS, by_canonical_text

KBS = [pytest.param(path, id=path.stem) for path in REFERENCE_KBS] or [
    pytest.param(None, marks=pytest.mark.skip(reason=MISSING_REFERENCE))
]


def _amie_output(kb: Path) -> str:
    return kb.with_name(f"{kb.stem}.amie.out").read_text(encoding="utf-8")


@pytest.mark.parametrize("kb", KBS)
def test_parser_reads_every_rule_line_byte_for_byte(kb):
    output = _amie_output(kb)
    rules = parse_amie_output(output)
    mined_count = int(re.search(r"^(\d+) rules mined\.$", output, re.MULTILINE)[1])
    assert len(rules) == mined_count
    rule_lines = [line for line in output.split("\n") if " => " in line]
    assert [format_rule_line(rule) for rule in rules] == rule_lines


@pytest.mark.parametrize("kb", KBS)
def test_miner_reproduces_amie_rules_and_columns(kb):
    expected = by_canonical_text(parse_amie_output(_amie_output(kb)))
    mined = by_canonical_text(mine_rules(read_amie_tsv(kb)))
    assert sorted(set(expected) - set(mined)) == [], (
        "rules AMIE outputs but kebench does not"
    )
    assert sorted(set(mined) - set(expected)) == [], (
        "rules kebench outputs but AMIE does not"
    )
    different = {
        text: (expected[text], mined[text])
        for text in expected
        if expected[text] != mined[text]
    }
    assert different == {}
