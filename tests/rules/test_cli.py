"""`kebench mine-rules`: AMIE-compatible output, JSON lines, and the jar backend."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kebench.cli import cli
from kebench.rules import HEADER, RULE_COLUMNS, MiningParams, RuleMiningError
from kebench.rules.amie_format import canonical_rule_text, parse_rule_line
from kebench.rules.jar import amie_arguments, run_amie_jar

from .helpers import MISSING_REFERENCE, REFERENCE_DIR

pytestmark = pytest.mark.skipif(not REFERENCE_DIR.is_dir(), reason=MISSING_REFERENCE)


def _rule_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if " => " in line]


def _columns_by_rule(lines: list[str]) -> dict[str, str]:
    """Raw printed columns of each line, keyed by its rule up to fresh-variable renaming."""
    keyed = {}
    for line in lines:
        rule = parse_rule_line(line)
        keyed[canonical_rule_text(rule.body, rule.head)] = line.split("\t", 1)[1]
    assert len(keyed) == len(lines)
    return keyed


def _reference(name: str) -> tuple[Path, str]:
    return REFERENCE_DIR / f"{name}.tsv", (
        REFERENCE_DIR / f"{name}.amie.out"
    ).read_text(encoding="utf-8")


def _mine(*arguments: str, env: dict[str, str] | None = None):
    return CliRunner(env=env).invoke(cli, ["mine-rules", *arguments])


def _fake_java(tmp_path: Path, body: str) -> Path:
    """An executable standing in for `java -jar amie.jar ...`."""
    script = tmp_path / "java"
    script.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.parametrize("name", ["kg_mlake", "edge_kb5"])
def test_amie_format_matches_amie_lines_up_to_renaming(name):
    kb, expected = _reference(name)
    result = _mine(str(kb))
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert lines[0] == HEADER
    assert _columns_by_rule(_rule_lines(result.stdout)) == _columns_by_rule(
        _rule_lines(expected)
    )


def test_amie_format_is_byte_identical_where_amie_names_variables_by_its_source_order():
    kb, expected = _reference("edge_kb2")
    assert sorted(_rule_lines(_mine(str(kb)).stdout)) == sorted(_rule_lines(expected))


def test_jsonl_has_one_rules_table_row_per_rule():
    kb, expected = _reference("edge_kb4")
    result = _mine(str(kb), "--format", "jsonl")
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert all(list(record) == list(RULE_COLUMNS) for record in records)
    assert sorted(record["amie_line"] for record in records) == sorted(
        _rule_lines(expected)
    )


def test_thresholds_are_passed_on():
    kb, _ = _reference("kg_mlake")
    lines = _rule_lines(
        _mine(str(kb), "--mins", "5", "--minpca", "0.5", "--maxad", "2").stdout
    )
    rules = [parse_rule_line(line) for line in lines]
    assert rules and all(r.support >= 5 and r.pca_confidence >= 0.5 for r in rules)  # noqa: PLR2004
    assert {len(rule.body) for rule in rules} == {1}


def test_bad_input_ends_with_a_clear_message(tmp_path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("not\ta fact\n", encoding="utf-8")
    result = _mine(str(empty))
    assert result.exit_code == 1
    assert f"{empty}: the knowledge base has no fact" in result.stderr
    lonely = tmp_path / "lonely.tsv"
    lonely.write_text("a\tp\tb\nc\tq\td\n", encoding="utf-8")
    result = _mine(str(lonely))
    assert result.exit_code == 0
    assert result.stdout == HEADER + "\n"
    assert "No rule" in result.stderr
    assert (
        _mine(str(lonely), "--maxad", "4").exit_code == 2
    )  # built-in miner: at most 3


# --- jar backend ---------------------------------------------------------------------


def test_amie_arguments_reproduce_the_parameters():
    assert amie_arguments(MiningParams()) == [
        "-mins", "1", "-minis", "1", "-minc", "0.0", "-minpca", "0.1", "-maxad", "3", "-rl", "3",
    ]  # fmt: skip
    hc = amie_arguments(MiningParams.from_amie_options(minhc=0.2, maxad=4))
    assert hc[:4] == ["-minhc", "0.2", "-minis", "100"] and "4" in hc


def test_jar_output_becomes_the_same_rules(tmp_path):
    kb, expected = _reference("kg_mlake")
    reference_file = REFERENCE_DIR / "kg_mlake.amie.out"
    java = _fake_java(tmp_path, f"cat '{reference_file}'")
    jar = tmp_path / "amie.jar"
    jar.write_bytes(b"")
    result = _mine(str(kb), "--jar", str(jar), env={"KEBENCH_JAVA": str(java)})
    assert result.exit_code == 0, result.output
    assert _rule_lines(result.stdout) == _rule_lines(expected)


def test_failing_jar_is_a_clear_error(tmp_path):
    kb, _ = _reference("edge_kb1")
    jar = tmp_path / "amie.jar"
    jar.write_bytes(b"")
    java = _fake_java(tmp_path, "echo 'Exception in thread main' >&2; exit 3")
    with pytest.raises(RuleMiningError, match="exit 3.*Exception in thread main"):
        run_amie_jar(jar, kb, MiningParams(), java=str(java))
    with pytest.raises(RuleMiningError, match="AMIE jar not found"):
        run_amie_jar(tmp_path / "none.jar", kb, MiningParams(), java=str(java))


def test_mining_imports_no_more_than_it_uses():
    """`kebench mine-rules` is timed as a whole process against AMIE's: what it
    imports and never uses (pandas, torch, Kedro) would count in its time."""
    kb, expected = _reference("kg_mlake")
    script = (
        "import sys\n"
        "from kebench.cli import cli\n"
        f"cli(['mine-rules', {str(kb)!r}], standalone_mode=False)\n"
        "heavy = sorted({'pandas', 'torch', 'kedro', 'transformers'} & set(sys.modules))\n"
        "print('imported:', heavy, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert "imported: []" in result.stderr
    assert _columns_by_rule(_rule_lines(result.stdout)) == _columns_by_rule(
        _rule_lines(expected)
    )
