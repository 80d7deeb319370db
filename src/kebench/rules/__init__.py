"""Horn rule mining with AMIE 3's exact semantics (built-in, or AMIE's own jar)."""

from __future__ import annotations

import logging
from pathlib import Path

from kebench.rules.amie_format import HEADER, format_rule_line, parse_amie_output
from kebench.rules.jar import configured_jar, run_amie_jar
from kebench.rules.kb import KnowledgeBase, RuleMiningError, read_amie_tsv
from kebench.rules.miner import MiningParams, mine_rules
from kebench.rules.model import Atom, Rule
from kebench.rules.table import RULE_COLUMNS, rule_id, rule_record, to_frame

__all__ = [
    "HEADER",
    "RULE_COLUMNS",
    "Atom",
    "KnowledgeBase",
    "MiningParams",
    "Rule",
    "RuleMiningError",
    "format_rule_line",
    "mine_file",
    "mine_rules",
    "parse_amie_output",
    "read_amie_tsv",
    "rule_id",
    "rule_record",
    "to_frame",
]

logger = logging.getLogger(__name__)


def mine_file(
    kb_path: str | Path,
    params: MiningParams | None = None,
    jar: str | Path | None = None,
) -> list[Rule]:
    """Mine an AMIE TSV with AMIE's jar when one is configured, else the built-in miner.

    Args:
        kb_path: the knowledge base, in AMIE's TSV input format.
        params: mining parameters (default: AMIE's ``-mins 1``).
        jar: AMIE jar path; None falls back to ``$KEBENCH_AMIE_JAR``.

    Raises:
        RuleMiningError: for an unusable knowledge base or a failing jar.
    """
    params = params or MiningParams()
    jar_path = configured_jar(jar)
    if jar_path is None:
        return mine_rules(read_amie_tsv(kb_path), params)
    rules = run_amie_jar(jar_path, kb_path, params)
    if not rules:
        logger.warning("%s: AMIE found no rule above the thresholds", kb_path)
    return rules
