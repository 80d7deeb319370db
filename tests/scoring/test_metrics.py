"""Metric arithmetic on small hand-checked score tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kebench.scoring.metrics import (
    bootstrap_ci,
    cluster_bootstrap_ci,
    exact_match,
    failed_outcomes,
    metrics_table,
    per_edit_consistency,
    probe_outcomes,
    token_f1,
)


def score(  # noqa: PLR0913
    case,
    probe_type,
    base_old,
    edit_new,
    *,
    edit_old=-5.0,
    agree=True,
    tier="deductive",
    kind="composition",
    echo=False,
):
    entailed = probe_type == "entailed"
    return {
        "tier": tier if entailed else None,
        "kind": kind if entailed else None,
        "echo": echo,
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
    table = metrics_table(outcomes)
    table = table[table["population"] == "ok_edits"].set_index(["probe_type", "metric"])
    assert table.loc[("direct", "edit_succ"), "value"] == pytest.approx(2 / 3)
    assert table.loc[("entailed", "consistency_deductive"), "value"] == pytest.approx(
        0.75
    )
    gap = table.loc[("direct-entailed", "gap_deductive")]
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


def test_intention_to_treat_counts_a_failed_edit_as_a_failure(outcomes):
    probes = pd.DataFrame(
        {
            "case_id": ["c4"] * 4,
            "probe_id": ["c4/d", "c4/e0", "c4/e1", "c4/l"],
            "probe_type": ["direct", "entailed", "entailed", "locality"],
            "risk": "counterfactual",
            "source": "demo",
            "answer_old": ["a", "b", "c", "d"],
            "tier": [None, "deductive", "deductive", None],
            "kind": [None, "composition", "composition", None],
            "echo": False,
        }
    )
    failed = pd.DataFrame({"model": ["m"], "method": ["ROME"], "case_id": ["c4"]})
    table = metrics_table(outcomes, failed=failed_outcomes(probes, failed, ["direct"]))
    table = table.set_index(["population", "probe_type", "metric"])
    # ok_edits: as without the failure (c1, c2, c3 succeeded)
    assert table.loc[("ok_edits", "direct", "edit_succ"), "value"] == pytest.approx(
        2 / 3
    )
    # itt: c4's direct probe is a failure, 2 of 4
    direct = table.loc[("itt", "direct", "edit_succ")]
    assert direct["value"] == pytest.approx(0.5) and direct["n_edits"] == 4
    assert table.loc[("itt", "direct", "counterfact_efficacy"), "value"] == 0.5
    # token accuracy: c1..c3 reproduce 1 of 2 tokens, c4 none
    assert table.loc[("itt", "direct", "token_accuracy"), "value"] == pytest.approx(
        (0.5 * 3 + 0) / 4
    )
    # consistency per edit: c1 0.5, c2 1, c4 0 (c3 has no entailed probe)
    itt_cons = table.loc[("itt", "entailed", "consistency_deductive")]
    assert itt_cons["value"] == pytest.approx(1.5 / 3) and itt_cons["n"] == 3
    # gap per edit: c1 1 - 0.5, c2 1 - 1, c4 0 - 0; n: 2 + 1 + 2 entailed probes
    gap = table.loc[("itt", "direct-entailed", "gap_deductive")]
    assert gap["value"] == pytest.approx(0.5 / 3) and gap["n"] == 5
    # locality is not a success metric: no itt form
    assert ("itt", "locality", "locality") not in table.index
    assert ("ok_edits", "locality", "locality") in table.index


def test_cluster_bootstrap_resamples_edits_not_probes():
    # edit A: four passing probes; edit B: one failing probe. Resampling the two
    # edits gives AA -> 1, AB or BA -> 4/5, BB -> 0, with chances 1/4, 1/2, 1/4, so
    # the 95% interval is [0, 1]; probes resampled alone would hardly ever give 0.
    values = [1, 1, 1, 1, 0]
    clusters = ["A", "A", "A", "A", "B"]
    assert cluster_bootstrap_ci(values, clusters, n_boot=4000) == (0.0, 1.0)
    low, _ = bootstrap_ci(values, n_boot=4000)
    assert low > 0.0


def test_cluster_bootstrap_matches_a_loop_over_resampled_edits():
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 6, size=12)
    clusters = np.repeat([f"e{i}" for i in range(12)], sizes)
    values = rng.integers(0, 2, size=clusters.size).astype(float)
    # the reference: the same seeded draws of 12 edits, then a plain loop that
    # gathers every probe of the drawn edits and averages them
    draws = np.random.default_rng(7).integers(0, 12, size=(500, 12))
    means = []
    for draw in draws:
        picked = [v for i in draw for v, c in zip(values, clusters) if c == f"e{i}"]
        means.append(sum(picked) / len(picked))
    expected = (np.quantile(means, 0.025), np.quantile(means, 0.975))
    got = cluster_bootstrap_ci(values, clusters, n_boot=500, seed=7)
    assert got == pytest.approx(expected)


def test_metric_cis_are_over_edits(outcomes):
    # c1 has two entailed probes (one passes), c2 one (passes): the probe-level
    # EditSucc of entailed probes is 2/3, its CI resamples c1 and c2 whole:
    # c1c1 -> 1/2, c1c2 or c2c1 -> 2/3, c2c2 -> 1
    table = metrics_table(outcomes)
    row = table[
        (table["population"] == "ok_edits")
        & (table["probe_type"] == "entailed_deductive")
        & (table["metric"] == "edit_succ")
    ].iloc[0]
    assert row["value"] == pytest.approx(2 / 3) and row["n"] == 3
    assert row["n_edits"] == 2
    assert (row["ci_low"], row["ci_high"]) == (0.5, 1.0)


def test_squad_normalisation():
    assert exact_match("The Eiffel Tower.", "eiffel tower") == 1.0
    assert token_f1("Paris, France", "Paris") == pytest.approx(2 / 3)
    assert token_f1("", "Paris") == 0.0


def test_protocol_gap_is_token_accuracy_minus_wild_paired_per_probe(outcomes):
    """Hand-worked: direct probes have token accuracy 0.5 each; WILD gets c1 and c2
    right and c3 wrong, so WILD EM is 2/3 and the gap 0.5 - 2/3 = -1/6; the locality
    probes keep the base answer on c1 only (1/2)."""
    wild = {("c1", "direct"): 1.0, ("c2", "direct"): 1.0, ("c3", "direct"): 0.0}
    local = {"c1": 1.0, "c3": 0.0}
    scored = outcomes.assign(
        wild_em=[
            wild.get((c, t), local.get(c) if t == "locality" else np.nan)
            for c, t in zip(outcomes["case_id"], outcomes["probe_type"], strict=True)
        ],
        bke_f1=np.nan,
    )
    table = metrics_table(scored).query("population == 'ok_edits'")

    def value(metric, protocol, probe_type):
        row = table[
            (table["metric"] == metric)
            & (table["protocol"] == protocol)
            & (table["probe_type"] == probe_type)
        ]
        assert len(row) == 1, (metric, protocol, probe_type)
        return row.iloc[0]

    assert value("wild_em", "wild", "direct")["value"] == pytest.approx(2 / 3)
    gap = value("protocol_gap", "token_vs_wild", "direct")
    assert gap["value"] == pytest.approx(0.5 - 2 / 3)
    assert (gap["n"], gap["n_edits"]) == (3, 3)
    assert gap["ci_low"] <= gap["value"] <= gap["ci_high"]
    assert value("wild_locality", "wild", "locality")["value"] == pytest.approx(0.5)
    # the entailed probes have no generation: no wild number for them
    assert not (
        (table["protocol"] == "wild")
        & table["probe_type"].isin(["entailed_deductive", "entailed"])
    ).any()


def test_mellos_exact_match_is_its_own_protocol_per_probe_type(outcomes):
    """Hand-worked: MeLLo answers c1's and c3's direct questions right, c2's wrong
    (2/3); one of c1's two entailed questions and c2's one (2/3); it keeps c1's
    unrelated answer and loses c3's (1/2)."""
    right = {
        ("c1", "direct"): [1.0],
        ("c2", "direct"): [0.0],
        ("c3", "direct"): [1.0],
        ("c1", "entailed"): [0.0, 1.0],
        ("c2", "entailed"): [1.0],
        ("c1", "locality"): [1.0],
        ("c3", "locality"): [0.0],
    }
    answers = {key: iter(values) for key, values in right.items()}
    scored = outcomes.assign(
        mello_em=[
            next(answers[(c, t)])
            for c, t in zip(outcomes["case_id"], outcomes["probe_type"], strict=True)
        ]
    )
    table = metrics_table(scored).query("population == 'ok_edits'")
    mello = table[table["protocol"] == "mello"].set_index(["metric", "probe_type"])
    assert mello.loc[("mello_em", "direct"), "value"] == pytest.approx(2 / 3)
    assert mello.loc[("mello_em", "entailed_deductive"), "value"] == pytest.approx(
        2 / 3
    )
    assert mello.loc[("mello_locality", "locality"), "value"] == pytest.approx(0.5)
    assert mello.loc[("mello_em", "entailed_deductive"), "n_edits"] == 2
    # MQuAKE's count: an edit is right when any of its questions is (c1: 1 of 2)
    assert mello.loc[("mello_case_em", "entailed_deductive"), "value"] == 1.0
    assert mello.loc[("mello_case_em", "entailed_deductive"), "n"] == 2
    assert mello.loc[("mello_case_em", "direct"), "value"] == pytest.approx(2 / 3)
    assert len(mello) == 5


def test_a_failed_edit_counts_as_a_wrong_generation_in_itt():
    probes = pd.DataFrame(
        {
            "case_id": ["c9", "c9"],
            "probe_id": ["c9/direct/0", "c9/locality/0"],
            "probe_type": ["direct", "locality"],
            "risk": "counterfactual",
            "source": "demo",
            "answer_old": ["A", "B"],
            "tier": None,
            "kind": None,
            "echo": False,
        }
    )
    failed = pd.DataFrame({"model": ["m"], "method": ["ROME"], "case_id": ["c9"]})
    rows = failed_outcomes(probes, failed, wild_types=["direct"])
    assert rows[["probe_id", "wild_em", "bke_f1"]].to_dict("records") == [
        {"probe_id": "c9/direct/0", "wild_em": 0.0, "bke_f1": 0.0}
    ]


def test_each_tier_and_subset_is_a_number_of_its_own():
    """Hand-worked, one edit (EditSucc 1) with: two deductive compositions (one
    passes), one composition that is an echo (passes), one alias (passes), one
    inductive rule probe (fails) and one deductive probe with no old answer whose new
    answer the edit raised. Deductive Consistency counts the non-echo compositions
    only (1/2); the inductive one is 0; the deductive tier with its echoes is 3/4
    (the no-old-answer probe has no EditSucc); without them 1/2."""
    rows = [
        score("c1", "direct", -3.0, -1.0),
        score("c1", "entailed", -2.0, -1.0),
        score("c1", "entailed", -2.0, -4.0),
        score("c1", "entailed", -2.0, -1.0, echo=True),
        score("c1", "entailed", -2.0, -1.0, kind="subject_alias", echo=True),
        score("c1", "entailed", -2.0, -4.0, tier="inductive", kind="rule"),
        score("c1", "entailed", np.nan, -1.0),
    ]
    table = metrics_table(probe_outcomes(pd.DataFrame(rows)))
    table = table[table["population"] == "ok_edits"].set_index(["metric"])
    expected = {
        "consistency_deductive": 0.5,
        "gap_deductive": 0.5,
        "consistency_inductive": 0.0,
        "gap_inductive": 1.0,
        "consistency_deductive_tier": 0.75,
        "consistency_deductive_tier_no_echo": 0.5,
        "consistency_echo": 1.0,
        "consistency_alias": 1.0,
        "edit_succ_paired_deductive": 1.0,
    }
    for metric, value in expected.items():
        assert table.loc[metric, "value"] == pytest.approx(value), metric
    # the probe without an old answer: lp_edit_new -1 > lp_base_new -9
    no_old = table.loc["consistency_deductive_no_old_answer"]
    assert (no_old["value"], no_old["protocol"], no_old["n"]) == (1.0, "prob_gain", 1)
    # per-type rows never mix the tiers
    types = set(table["probe_type"])
    assert {"entailed_deductive", "entailed_inductive"} <= types
    assert "consistency_inverse" not in table.index  # no such probe


def test_the_generated_gap_of_each_tier():
    """Hand-worked under ``wild``: the direct answer is generated right; of the two
    compositions one is; the inductive probe is not: deductive gap 1 - 1/2, inductive
    gap 1 - 0."""
    rows = [
        score("c1", "direct", -3.0, -1.0),
        score("c1", "entailed", -2.0, -1.0),
        score("c1", "entailed", -2.0, -4.0),
        score("c1", "entailed", -2.0, -4.0, tier="inductive", kind="rule"),
    ]
    outcomes = probe_outcomes(pd.DataFrame(rows)).assign(
        wild_em=[1.0, 1.0, 0.0, 0.0], bke_f1=np.nan, wild_strict=[0.0, 1.0, 0.0, 0.0]
    )
    table = metrics_table(outcomes).query("population == 'ok_edits'")
    table = table.set_index("metric")
    assert table.loc["wild_gap_deductive", "value"] == pytest.approx(0.5)
    assert table.loc["wild_gap_deductive", "protocol"] == "wild"
    assert table.loc["wild_gap_inductive", "value"] == pytest.approx(1.0)
    assert table.loc["wild_consistency_deductive", "value"] == pytest.approx(0.5)
    assert table.loc["wild_em_paired_deductive", "value"] == pytest.approx(1.0)
    # the strict reading of the same replies: the direct answer missed, one
    # composition right: gap 0 - 1/2, under its own tag
    assert table.loc["wild_strict_gap_deductive", "value"] == pytest.approx(-0.5)
    assert table.loc["wild_strict_gap_deductive", "protocol"] == "wild_strict"
    assert table.loc["wild_strict_em_paired_deductive", "value"] == pytest.approx(0.0)
