"""Gap closure and locality cost from per-edit measures; measures from probe scores;
the summaries and report."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kebench.scoring.mitigation import (
    HELD_OUT,
    compare_edits,
    edit_measures,
    gap_closure_rows,
    plot_gap_closure,
)
from kebench.scoring.mitigation_report import (
    excluded_edits,
    mitigation_markdown,
    mitigation_table,
    tracked_metrics,
)


def edits(succ, base, mitigated, locality=(1.0,), locality_mitigated=(1.0,)):
    """Per-edit measures with deductive disjoint held-out probes only (two per
    edit)."""
    n = len(succ)
    empty = {
        column: value
        for held in HELD_OUT[1:]
        for column, value in (
            (f"consistency_{held}", np.nan),
            (f"consistency_{held}_mitigated", np.nan),
            (f"n_{held}", 0),
        )
    }
    return pd.DataFrame(
        {
            "model": "m",
            "method": "ROME",
            "risk": "counterfactual",
            "case_id": [f"c{i}" for i in range(n)],
            "edit_succ": succ,
            "consistency_deductive_disjoint": base,
            "consistency_deductive_disjoint_mitigated": mitigated,
            **empty,
            "propagated": 0.5,
            "propagated_mitigated": 1.0,
            "edit_succ_mitigated": succ,
            "locality": np.resize(locality, n),
            "locality_mitigated": np.resize(locality_mitigated, n),
            "n_deductive_disjoint": 2,
            "n_rewritten": 1,
        }
    )


def test_gap_closure_is_the_share_of_the_gap_closed():
    # EditSucc 1, Consistency 0.25 -> 0.625: half of the 0.75 gap is closed
    table = edits(
        [1.0, 1.0, 1.0, 1.0],
        [0.0, 0.5, 0.5, 0.0],
        [0.5, 1.0, 0.5, 0.5],
        locality=(1.0, 0.8),
        locality_mitigated=(0.8, 0.8),
    )
    (row,) = gap_closure_rows(table)  # no edit has shared probes: no shared row
    assert row["held_out"] == "deductive_disjoint"
    assert row["gap_closure"] == pytest.approx(0.5)
    assert row["gap_closure_ci_low"] <= 0.5 <= row["gap_closure_ci_high"]
    assert row["locality_cost"] == pytest.approx(0.1)
    assert row["n_edits"] == 4 and row["n_held_out_probes"] == 8
    assert row["n_locality_dropped"] == 4
    assert row["consistency"] == pytest.approx(0.25)
    assert row["consistency_mitigated"] == pytest.approx(0.625)


def test_shared_and_disjoint_probes_are_closed_apart():
    table = edits([1.0, 1.0], [0.0, np.nan], [1.0, np.nan]).assign(
        consistency_inductive_shared=[np.nan, 0.0],
        consistency_inductive_shared_mitigated=[np.nan, 0.5],
        n_deductive_disjoint=[1, 0],
        n_inductive_shared=[0, 2],
    )
    rows = {row["held_out"]: row for row in gap_closure_rows(table)}
    # c0 alone has deductive disjoint probes: 0 -> 1 closes its whole gap; c1 alone
    # inductive shared ones: each tier and overlap is closed apart
    assert set(rows) == {"deductive_disjoint", "inductive_shared"}
    assert rows["deductive_disjoint"]["gap_closure"] == pytest.approx(1.0)
    assert rows["deductive_disjoint"]["n_edits"] == 1
    assert rows["inductive_shared"]["gap_closure"] == pytest.approx(0.5)
    assert rows["inductive_shared"]["n_held_out_probes"] == 2


def test_a_mitigation_that_hurts_has_negative_closure_and_no_gap_gives_nan():
    (worse,) = gap_closure_rows(edits([1.0, 1.0], [0.5, 0.5], [0.0, 0.5]))
    assert worse["gap_closure"] == pytest.approx(-0.5)
    (none,) = gap_closure_rows(edits([1.0, 1.0], [1.0, 1.0], [1.0, 1.0]))
    assert np.isnan(none["gap_closure"]) and np.isnan(none["gap_closure_ci_low"])
    figure = plot_gap_closure(pd.DataFrame([worse, none | {"method": "FT-L"}]))
    assert len(figure.axes[0].patches) == 6


def scores(method, lp_new):
    """probe_scores rows of one edit: a direct, three entailed and two locality
    probes."""
    n = len(lp_new)
    return pd.DataFrame(
        {
            "model": "m",
            "method": method,
            "risk": "counterfactual",
            "case_id": "c0",
            "probe_id": ["d", "e1", "e2", "e3", "l1", "l2"],
            "probe_type": ["direct", *["entailed"] * 3, "locality", "locality"],
            "lp_base_old": [-1.0] * n,
            "lp_base_new": [-4.0] * n,
            "lp_edit_old": [-3.0, -3.0, -3.0, -3.0, -1.0, -1.0],
            "lp_edit_new": lp_new,
            "edit_new_token_hits": 1,
            "n_tokens_new": 1,
            "base_old_argmax": ["1"] * n,
            "edit_old_argmax": ["1", "1", "1", "1", "2", "1"],
        }
    )


ROLES = pd.DataFrame(
    {
        "probe_id": ["e1", "e2", "e3", "l1"],
        "role": ["held_out", "held_out", "propagated", "rewritten"],
        "tier": ["deductive", "deductive", "deductive", None],
        "overlap": ["disjoint", "shared", None, None],
    }
)


def test_measures_follow_the_roles_of_the_probes():
    original = edit_measures(scores("ROME", [-0.5, -2.0, -0.5, -2.0, -1, -1]), ROLES)
    mitigated = edit_measures(scores("ROME", [-0.5, -0.5, -2.0, -0.5, -1, -1]), ROLES)
    (row,) = compare_edits(original, mitigated).to_dict("records")
    assert row["edit_succ"] == 1.0
    assert row["consistency_deductive_disjoint"] == 0.0
    assert row["consistency_deductive_shared"] == 1.0
    assert row["consistency_deductive_disjoint_mitigated"] == 1.0
    assert row["consistency_deductive_shared_mitigated"] == 0.0
    assert row["propagated"] == 0.0 and row["propagated_mitigated"] == 1.0
    # l1 (argmax changed) is rewritten by an extra edit: dropped, not a failure
    assert row["locality"] == 1.0 and row["n_rewritten"] == 1
    assert (row["n_deductive_disjoint"], row["n_deductive_shared"]) == (1, 1)
    # a leaked probe is scored by neither set
    leak = ROLES.assign(role=["leak", "leak", "propagated", "rewritten"])
    measured = edit_measures(scores("ROME", [-0.5] * 6), leak)
    assert (
        measured[["consistency_deductive_disjoint", "consistency_deductive_shared"]]
        .isna()
        .all(axis=None)
    )


def test_exclusions_table_report_and_mlflow_keys():
    selected = pd.DataFrame(
        {
            "method": ["ROME"] * 4,
            "case_id": ["c0", "c1", "c2", "c3"],
            "status": ["ok", "ok", "failed", "ok"],
            "reason": [None, None, "norm explosion", None],
        }
    )
    requests = pd.DataFrame({"case_id": ["c0", "c3"], "fact_id": ["c0/0", "c3/0"]})
    mitigated = pd.DataFrame(
        {
            "method": "ROME",
            "case_id": ["c0", "c0/0", "c3", "c3/0"],
            "status": ["ok", "ok", "ok", "failed"],
            "reason": [None, None, None, "diverged"],
        }
    )
    plan = pd.DataFrame({"case_id": ["c1"], "reason": ["no entailed probes"]})
    excluded = excluded_edits(selected, mitigated, plan, requests)
    assert dict(zip(excluded["case_id"], excluded["reason"], strict=True)) == {
        "c2": "the edit failed: norm explosion",
        "c1": "no entailed probes",
        "c3": "a propagation edit failed: diverged",
    }
    table = mitigation_table(edits([1.0], [0.0], [0.5]), excluded)
    assert table["n_excluded"].tolist() == [3]
    with pytest.raises(ValueError, match="no edit can be mitigated and tested"):
        mitigation_table(edits([1.0], [0.0], [0.5]).iloc[:0], excluded)
    tamper = pd.DataFrame(
        {
            "method": ["ROME"],
            "detector": ["margin"],
            "negatives": ["unseen"],
            "auroc": [0.9],
            "auroc_ci_low": [0.7],
            "auroc_ci_high": [1.0],
            "n_edited": [1],
            "n_unedited": [3],
            "n_seen_excluded": [2],
        }
    )
    report = mitigation_markdown(table, tamper, excluded, ROLES, "Edits measured: 1.")
    assert "Edits measured: 1." in report
    assert "| ROME | deductive_disjoint | 1 | 2 |" in report
    assert "1 deductive_disjoint, 1 deductive_shared" in report
    assert "1 locality probes" in report
    assert "- ROME: 1 × no entailed probes" in report
    assert "| ROME | margin | 0.90 [0.70, 1.00] | 1 | 3 | 2 |" in report
    assert "headline is not computed" not in report
    shared = table.assign(held_out="deductive_shared")
    assert "headline is not computed" in mitigation_markdown(
        shared, tamper, excluded, ROLES, ""
    )
    keys = set(tracked_metrics(table, tamper)["ROME"])
    assert {
        "deductive_disjoint.gap_closure",
        "deductive_disjoint.n_locality_dropped",
    } <= keys
    assert "tamper_unseen.margin.auroc" in keys
    assert not any(key.startswith("deductive_shared.") for key in keys)
