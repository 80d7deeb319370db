"""rule_mining on the demo KG: real rules come out, in AMIE's format, and are filtered."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from kebench.pipelines.rule_mining.nodes import filter_rules_for_qa, mine_kg_rules
from kebench.project import run_pipeline
from kebench.rules import HEADER, RuleMiningError


@pytest.fixture(scope="module")
def demo_catalog(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("rules")
    run_pipeline("kg_build", {"dataset": "demo"}, root)
    return run_pipeline("rule_mining", {"dataset": "demo"}, root)


def rule_texts(rules: pd.DataFrame) -> set[str]:
    return {line.split("\t")[0] for line in rules["amie_line"]}


def test_demo_yields_the_expected_rules(demo_catalog):
    rules = demo_catalog.load("rules")
    texts = rule_texts(rules)
    assert "?b  capital  ?a   => ?a  country  ?b" in texts
    assert "?a  birthPlace  ?h  ?h  country  ?b   => ?a  citizenship  ?b" in texts
    spouse_rules = [
        t for t in texts if t.endswith("=> ?a  citizenship  ?b") and "spouse" in t
    ]
    assert spouse_rules, "spouse(x,y) & citizenship(x,z) => citizenship(y,z) is missing"
    amie = demo_catalog.load("rules_amie").splitlines()
    assert amie[0] == HEADER and amie[1:] == list(rules["amie_line"])


def test_filter_keeps_strong_rules_and_reports(demo_catalog):
    rules, kept = demo_catalog.load("rules"), demo_catalog.load("rules_for_qa")
    report = demo_catalog.load("rule_filter_report")
    assert report["rules"] == len(rules) and report["kept"] == len(kept)
    assert sum(report["removed_by"].values()) == len(rules) - len(kept)
    assert (kept["pca_confidence"] >= 0.8).all() and (kept["support"] >= 5).all()
    assert (kept["std_confidence"] >= 0.75).all()
    assert "?a  birthPlace  ?h  ?h  country  ?b   => ?a  citizenship  ?b" in rule_texts(
        kept
    )


def test_excluded_predicates_remove_rules(caplog):
    triples = pd.DataFrame(
        {
            "s": [f"e{i}" for i in range(6)] * 2,
            "p": ["wikiPageWikiLink"] * 6 + ["related"] * 6,
            "o": [f"f{i}" for i in range(6)] * 2,
        }
    )
    rules = mine_kg_rules(triples, {"amie": {"mins": 1, "maxad": 3}})
    assert len(rules) == 2  # each relation implies the other
    params = {
        "min_pca_confidence": 0.1,
        "min_std_confidence": 0.0,
        "min_support": 1,
        "excluded_predicates": ["wikiPageWikiLink"],
    }
    with caplog.at_level(logging.WARNING):
        kept, report = filter_rules_for_qa(rules, params)
    assert kept.empty and report["removed_by"]["excluded_predicates"] == 2
    # an empty inductive tier is said, with each filter's count
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "no mined rule is kept for QA (2 mined" in warning
    assert "excluded_predicates: 2" in warning


def test_empty_kb_is_a_clear_error():
    empty = pd.DataFrame({"s": [], "p": [], "o": []})
    with pytest.raises(RuleMiningError, match="no fact"):
        mine_kg_rules(empty, {"amie": {"mins": 1}})
