"""The tamper audit's detectors and AUROC, on hand-made scores."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kebench.qa.verbaliser import Verbaliser
from kebench.scoring.auroc import auroc
from kebench.scoring.tamper import (
    DETECTORS,
    audit_pool,
    audit_probes,
    auroc_table,
    fact_scores,
    facts_in_prefix,
    pick_negatives,
    plot_roc,
)


def test_auroc_counts_pairs_and_half_ties():
    assert auroc(np.array([3.0, 2.0]), np.array([1.0, 0.0])) == 1.0
    assert auroc(np.array([0.0]), np.array([1.0])) == 0.0
    # pairs: 2>1 yes, 2>2 tie, 1>1 tie, 1>2 no -> (1 + 0.5 + 0.5) / 4
    assert auroc(np.array([2.0, 1.0]), np.array([1.0, 2.0])) == pytest.approx(0.5)
    assert auroc(np.array([2.0, 1.0]), np.array([1.0, 0.0])) == pytest.approx(0.875)


def test_negatives_are_other_facts_drawn_seeded():
    pool = [f"c{i}" for i in range(30)]
    drawn = pick_negatives(pool, "c3", 10, seed=0)
    assert len(set(drawn)) == 10 and "c3" not in drawn
    assert drawn == pick_negatives(pool, "c3", 10, seed=0)
    assert drawn != pick_negatives(pool, "c3", 10, seed=1)
    assert sorted(pick_negatives(pool[:3], "c0", 10, seed=0)) == ["c1", "c2"]


def test_facts_are_audited_in_the_world_they_assert():
    """c0 asserts its new answer but answers its consequence the old way (violates);
    c1 asserts its old answer and agrees with its consequence."""
    probes = pd.DataFrame(
        {
            "probe_id": ["d0", "a0", "d1", "a1"],
            "case_id": ["c0", "c0", "c1", "c1"],
            "kind": ["direct", "atomic", "direct", "atomic"],
        }
    ).set_index("probe_id", drop=False)
    scores = pd.DataFrame(
        {"lp_old": [-4.0, -1.0, -1.0, -0.5], "lp_new": [-1.0, -3.0, -5.0, -2.5]},
        index=probes.index,
    )
    base = pd.DataFrame(
        {
            "lp_old": [-2.0, -1.0],
            "lp_new": [-6.0, -4.0],
            "n_tokens_old": [2, 1],
            "n_tokens_new": [2, 1],
        },
        index=["d0", "d1"],
    )
    facts = fact_scores(probes, scores, base)
    assert facts["asserts_new"].to_dict() == {"c0": True, "c1": False}
    assert facts.loc["c0", "rule_violation"] == pytest.approx(2.0)  # -1 - (-3)
    assert facts.loc["c1", "rule_violation"] == pytest.approx(-2.0)  # -2.5 - (-0.5)
    assert np.isnan(facts["rule_violation_chained"]).all()
    assert facts.loc["c0", "confidence"] == pytest.approx(-0.5)
    assert facts.loc["c0", "confidence_shift"] == pytest.approx(5.0)  # -1 - (-6)
    assert facts.loc["c1", "confidence_shift"] == pytest.approx(0.0)
    # the direct margins the rule detectors read the sign of: new - old
    assert facts.loc["c0", "margin"] == pytest.approx(3.0)  # -1 - (-4)
    assert facts.loc["c0", "margin_shift"] == pytest.approx(7.0)  # 3 - (-6 - (-2))
    assert facts.loc["c1", "margin"] == pytest.approx(-4.0)  # -5 - (-1)
    assert facts.loc["c1", "margin_shift"] == pytest.approx(-1.0)  # -4 - (-4 - (-1))


def test_facts_shown_in_the_prefix_are_never_negatives():
    probes = pd.DataFrame(
        {
            "case_id": ["c0", "c1", "c2", "c2"],
            "kind": ["direct", "direct", "direct", "atomic"],
            "prompt": [
                "Barack Obama is a citizen of",
                "Tim Cook works for",
                "The Eiffel Tower is in",
                "Tim Cook works for",  # not a direct prompt: says nothing of c1
            ],
        }
    )
    prefix = (
        "New Fact: Tim Cook works for Microsoft\nPrompt: Tim Cook works for "
        "Microsoft\n\nNew Fact: Barack Obama is a citizen of Canada\nPrompt: "
    )
    assert facts_in_prefix(probes, prefix) == {"c0", "c1"}
    assert facts_in_prefix(probes, "") == set()
    pool = [f"c{i}" for i in range(6)]
    drawn = pick_negatives(pool, "c0", 10, seed=0, seen={"c0", "c1"})
    assert sorted(drawn) == ["c2", "c3", "c4", "c5"]


def test_atomic_probes_ask_each_consequence_about_its_own_subject():
    probes = pd.DataFrame(
        {
            "probe_id": ["c0/d", "c0/e", "c1/d"],
            "case_id": ["c0", "c0", "c1"],
            "probe_type": ["direct", "entailed", "direct"],
            "prompt": [
                "Obama is a citizen of",
                "The spouse of Obama is a citizen of",
                "x",
            ],
            "answer_old": ["USA", "USA", "y"],
            "answer_new": ["Canada", "Canada", "z"],
            "question": ["Of which country is Obama a citizen?", None, "x?"],
            "form": ["cloze", "cloze", "cloze"],
        }
    )
    facts = pd.DataFrame(
        {
            "fact_id": ["c0/0", "c0/1"],
            "case_id": "c0",
            "tier": "inductive",
            "status": "entailed",
            "subject_label": "Michelle Obama",
            "relation": "citizenship",
            "answer_old": "USA",
            "answer_new": "Canada",
        }
    )
    pool = audit_pool(probes, ["c0", "c1", "c0"])
    assert pool == ["c0"]  # c1 has no entailed probe
    verbaliser = Verbaliser(
        templates={"citizenship": {"noun": "country of citizenship"}}
    )
    audit = audit_probes(probes, facts, pool, verbaliser)
    assert list(audit["kind"]) == ["direct", "chained", "atomic"]  # duplicates merged
    assert audit["prompt"].iloc[-1] == "The country of citizenship of Michelle Obama is"
    # each probe keeps its question (a memory-based edit is asked it); atomic has none
    assert [q if isinstance(q, str) else None for q in audit["question"]] == [
        "Of which country is Obama a citizen?",
        None,
        None,
    ]


def test_auroc_table_per_detector_and_roc_plot():
    rng = np.random.default_rng(0)
    audit = pd.DataFrame(
        {
            "model": "m",
            "method": "ROME",
            "edited": [True] * 5 + [False] * 20,
            "rule_violation": np.r_[rng.normal(2, 1, 5), rng.normal(0, 1, 20)],
            "rule_violation_chained": np.r_[rng.normal(0, 1, 5), rng.normal(0, 1, 20)],
            "confidence": np.r_[np.full(5, 9.0), np.zeros(20)],
            "confidence_shift": np.nan,
            "margin": np.r_[np.full(5, 2.0), np.full(20, 2.0)],
            "margin_shift": np.nan,
            "n_seen_excluded": np.r_[np.ones(5, dtype=int), np.zeros(20, dtype=int)],
        }
    )
    table = auroc_table(audit).set_index("detector")
    assert set(table.index) == set(DETECTORS) - {"confidence_shift", "margin_shift"}
    assert table.loc["margin", "auroc"] == 0.5  # all tied
    assert (table["n_seen_excluded"] == 5).all() and (
        table["negatives"] == "unseen"
    ).all()
    assert table.loc["confidence", "auroc"] == 1.0
    assert (table["auroc_ci_low"] <= table["auroc"]).all()
    assert (table["auroc"] <= table["auroc_ci_high"]).all()
    assert table.loc["rule_violation", "n_edited"] == 5
    assert len(plot_roc(audit, table.reset_index()).axes[0].lines) == 5
