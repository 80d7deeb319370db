"""Gap closure and locality cost from per-edit measures; measures from probe scores."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kebench.scoring.mitigation import (
    compare_edits,
    edit_measures,
    gap_closure_rows,
    plot_gap_closure,
)


def edits(succ, base, mitigated, locality=(1.0,), locality_mitigated=(1.0,)):
    n = len(succ)
    return pd.DataFrame(
        {
            "model": "m",
            "method": "ROME",
            "risk": "counterfactual",
            "case_id": [f"c{i}" for i in range(n)],
            "edit_succ": succ,
            "consistency": base,
            "consistency_mitigated": mitigated,
            "propagated": 0.5,
            "propagated_mitigated": 1.0,
            "edit_succ_mitigated": succ,
            "locality": np.resize(locality, n),
            "locality_mitigated": np.resize(locality_mitigated, n),
            "n_held_out": 2,
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
    (row,) = gap_closure_rows(table)
    assert row["gap_closure"] == pytest.approx(0.5)
    assert row["gap_closure_ci_low"] <= 0.5 <= row["gap_closure_ci_high"]
    assert row["locality_cost"] == pytest.approx(0.1)
    assert row["n_edits"] == 4 and row["n_held_out_probes"] == 8
    assert row["consistency"] == pytest.approx(0.25)
    assert row["consistency_mitigated"] == pytest.approx(0.625)


def test_a_mitigation_that_hurts_has_negative_closure_and_no_gap_gives_nan():
    (worse,) = gap_closure_rows(edits([1.0, 1.0], [0.5, 0.5], [0.0, 0.5]))
    assert worse["gap_closure"] == pytest.approx(-0.5)
    (none,) = gap_closure_rows(edits([1.0, 1.0], [1.0, 1.0], [1.0, 1.0]))
    assert np.isnan(none["gap_closure"]) and np.isnan(none["gap_closure_ci_low"])
    figure = plot_gap_closure(pd.DataFrame([worse, none | {"method": "FT-L"}]))
    assert len(figure.axes[0].patches) == 6


def scores(method, lp_new):
    """probe_scores rows of one edit: a direct, two entailed and a locality probe."""
    return pd.DataFrame(
        {
            "model": "m",
            "method": method,
            "risk": "counterfactual",
            "case_id": "c0",
            "probe_id": ["d", "e1", "e2", "l"],
            "probe_type": ["direct", "entailed", "entailed", "locality"],
            "lp_base_old": [-1.0, -1.0, -1.0, -1.0],
            "lp_edit_old": [-3.0, -3.0, -3.0, -1.0],
            "lp_edit_new": lp_new,
            "edit_new_token_hits": 1,
            "n_tokens_new": 1,
            "base_old_argmax": ["1", "1", "1", "1"],
            "edit_old_argmax": ["1", "1", "1", "2"],
        }
    )


def test_measures_follow_the_roles_of_the_entailed_probes():
    roles = pd.DataFrame({"probe_id": ["e1", "e2"], "role": ["held_out", "propagated"]})
    original = edit_measures(scores("ROME", [-0.5, -2.0, -0.5, -1.0]), roles)
    mitigated = edit_measures(scores("ROME", [-0.5, -0.5, -0.5, -1.0]), roles)
    (row,) = compare_edits(original, mitigated).to_dict("records")
    assert row["edit_succ"] == 1.0 and row["consistency"] == 0.0
    assert row["consistency_mitigated"] == 1.0 and row["propagated"] == 1.0
    assert row["locality"] == 0.0 and row["n_held_out"] == 1
    # a leaked probe is scored by neither measure
    leak = roles.assign(role=["leak", "propagated"])
    assert np.isnan(
        edit_measures(scores("ROME", [-0.5] * 4), leak)["consistency"]
    ).all()
