"""Nodes of rule_mining: thin glue over ``kebench.rules``."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from kebench.kg.amie_export import write_amie_tsv
from kebench.rules import (
    HEADER,
    KnowledgeBase,
    MiningParams,
    mine_file,
    mine_rules,
    to_frame,
)
from kebench.schemas import RULES

logger = logging.getLogger(__name__)


def mine_kg_rules(
    kg_triples_amie: pd.DataFrame, params: dict[str, Any]
) -> pd.DataFrame:
    """Mine AMIE 3 rules from the KG (built-in miner, or AMIE's jar when configured)."""
    mining = MiningParams.from_amie_options(**params["amie"])
    if params.get("jar"):
        # The jar reads a file; hand it the same AMIE TSV the catalog holds.
        with tempfile.TemporaryDirectory() as scratch:
            kb_path = Path(scratch) / "kg.tsv"
            write_amie_tsv(kg_triples_amie, kb_path)
            rules = mine_file(kb_path, mining, jar=params["jar"])
    else:
        kb = KnowledgeBase.from_triples(
            kg_triples_amie["s"].tolist(),
            kg_triples_amie["p"].tolist(),
            kg_triples_amie["o"].tolist(),
            source="kg_triples_amie",
        )
        rules = mine_rules(kb, mining)
    logger.info("mined %d rules from %d triples", len(rules), len(kg_triples_amie))
    return RULES.validate(to_frame(rules))


def format_amie_rules(rules: pd.DataFrame) -> str:
    """AMIE's output table: its header line, then one line per rule."""
    return "\n".join([HEADER, *rules["amie_line"]]) + "\n"


def filter_rules_for_qa(
    rules: pd.DataFrame, params: dict[str, Any]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Keep the rules worth turning into questions, and say how many each filter removed.

    Filters, applied in order: minimum PCA confidence, minimum standard confidence,
    minimum support, and no atom over an excluded predicate (e.g. wikiPageWikiLink,
    which only yields trivial rules).
    """
    excluded = set(params["excluded_predicates"])
    filters = {
        "min_pca_confidence": rules["pca_confidence"] >= params["min_pca_confidence"],
        "min_std_confidence": rules["std_confidence"] >= params["min_std_confidence"],
        "min_support": rules["support"] >= params["min_support"],
        "excluded_predicates": [
            not any(atom[1] in excluded for atom in [*body, head])
            for body, head in zip(rules["body"], rules["head"], strict=True)
        ],
    }
    keep = pd.Series(True, index=rules.index)
    removed = {}
    for name, mask in filters.items():
        passes = pd.Series(mask, index=rules.index)
        removed[name] = int((keep & ~passes).sum())
        keep &= passes
    report = {"rules": len(rules), "kept": int(keep.sum()), "removed_by": removed}
    logger.info("rules for QA: %s", report)
    if not keep.any():
        # the inductive tier is then empty, and its report columns show "–"
        logger.warning(
            "no mined rule is kept for QA (%d mined; removed by %s): the inductive "
            "tier will have no probes. A rule needs %s supporting facts at PCA "
            "confidence %s, so a KG needs at least that many subjects sharing each "
            "pair of relations (docs/rule_mining.md#how-large-a-kg-needs-to-be); or "
            "lower rule_mining.filter in conf",
            len(rules),
            ", ".join(f"{name}: {n}" for name, n in removed.items()),
            params["min_support"],
            params["min_pca_confidence"],
        )
    return RULES.validate(rules[keep].reset_index(drop=True)), report
