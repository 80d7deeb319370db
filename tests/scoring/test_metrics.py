"""Metric arithmetic on small hand-checked score tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kebench.scoring.metrics import (
    bootstrap_ci,
    exact_match,
    metrics_table,
    per_edit_consistency,
    probe_outcomes,
    token_f1,
)


def score(case, probe_type, base_old, edit_new, *, edit_old=-5.0, agree=True):  # noqa: PLR0913
    return {
        "model": "m",
        "method": "ROME",
        "risk": "counterfactual",
        "case_id": case,
        "probe_type": probe_type,
        "lp_base_old": base_old,
        "lp_base_new": -9.0,
        "lp_edit_old": edit_old,
        "lp_edit_new": edit_new,
        "n_tokens_new": 2,
        "edit_new_token_hits": 1,
        "base_old_argmax": "1 2",
        "edit_old_argmax": "1 2" if agree else "1 3",
    }


@pytest.fixture
def outcomes() -> pd.DataFrame:
    rows = [
        score("c1", "direct", -3.0, -1.0),  # success
        score("c1", "entailed", -2.0, -4.0),  # fails
        score("c1", "entailed", -2.0, -1.0),  # passes -> consistency 0.5
        score("c2", "direct", -3.0, -1.0),
        score("c2", "entailed", -2.0, -1.0),  # consistency 1
        score(
            "c3", "direct", -1.0, -2.0, edit_old=-1.0
        ),  # EditSucc 0, no entailed probe
        score("c3", "locality", -1.0, -1.0, agree=False),
        score("c1", "locality", -1.0, -1.0),
    ]
    return probe_outcomes(pd.DataFrame(rows))


def test_indicators(outcomes):
    direct = outcomes[outcomes["probe_type"] == "direct"]
    assert direct["edit_succ"].tolist() == [True, True, False]
    assert direct["efficacy"].tolist() == [True, True, False]
    assert direct["token_acc"].tolist() == [0.5, 0.5, 0.5]


def test_consistency_and_gap(outcomes):
    per_edit = per_edit_consistency(outcomes).set_index("case_id")
    assert (
        per_edit.loc["c1", "consistency"] == 0.5
        and per_edit.loc["c2", "consistency"] == 1.0
    )
    assert np.isnan(per_edit.loc["c3", "consistency"])
    table = metrics_table(outcomes).set_index(["probe_type", "metric"])
    assert table.loc[("direct", "edit_succ"), "value"] == pytest.approx(2 / 3)
    assert table.loc[("entailed", "consistency"), "value"] == pytest.approx(0.75)
    gap = table.loc[("direct-entailed", "gap")]
    # paired over c1 and c2: (1 - 0.5 + 1 - 1) / 2; n counts their 3 entailed probes
    assert gap["value"] == pytest.approx(0.25) and gap["n"] == 3 and gap["n_edits"] == 2
    assert gap["ci_low"] <= gap["value"] <= gap["ci_high"]
    assert table.loc[("locality", "locality"), "value"] == 0.5
    assert set(table["protocol"]) == {"prob", "token", "argmax"}


def test_bootstrap_ci_brackets_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(1)
    small, large = rng.integers(0, 2, 20), rng.integers(0, 2, 2000)
    low_s, high_s = bootstrap_ci(small)
    low_l, high_l = bootstrap_ci(large)
    assert low_s <= small.mean() <= high_s and low_l <= large.mean() <= high_l
    assert high_l - low_l < high_s - low_s
    assert np.isnan(bootstrap_ci([])[0])


def test_squad_normalisation():
    assert exact_match("The Eiffel Tower.", "eiffel tower") == 1.0
    assert token_f1("Paris, France", "Paris") == pytest.approx(2 / 3)
    assert token_f1("", "Paris") == 0.0
