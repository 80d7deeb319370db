"""The report's protocol table: teacher-forced vs generated, per probe type."""

from __future__ import annotations

import pandas as pd

from kebench.scoring.report import (
    counterfact_table,
    headline_table,
    protocol_table,
    report_markdown,
    sign_disagreements,
)


def metric(probe_type, metric_name, protocol, value, population="itt"):  # noqa: PLR0913
    return {
        "model": "m",
        "method": "ROME",
        "risk": "counterfactual",
        "probe_type": probe_type,
        "metric": metric_name,
        "protocol": protocol,
        "population": population,
        "value": value,
        "ci_low": value - 0.1,
        "ci_high": value + 0.1,
        "n": 10,
        "n_edits": 5.0,
    }


METRICS = pd.DataFrame(
    [
        metric("entailed", "token_accuracy", "token", 0.9),
        metric("entailed", "wild_em", "wild", 0.3),
        metric("entailed", "bke_f1", "bke_f1", 0.4),
        metric("entailed", "protocol_gap", "token_vs_wild", 0.6),
        metric("direct", "token_accuracy", "token", 1.0),
        metric("direct", "wild_em", "wild", 0.8),
        metric("direct", "wild_em", "wild", 0.1, population="ok_edits"),
        metric("locality", "locality", "argmax", 0.95, population="ok_edits"),
        metric("locality", "wild_locality", "wild", 0.7, population="ok_edits"),
    ]
)


def test_protocol_table_sets_each_probe_type_beside_its_generated_answer():
    table = protocol_table(METRICS, "itt")
    assert table["probe_type"].tolist() == ["direct", "entailed", "locality"]
    rows = table.set_index("probe_type")
    assert rows.loc["entailed", "Gap (token − WILD)"] == 0.6
    assert rows.loc["direct", "WILD (generated)"] == 0.8  # the itt row
    assert rows.loc["locality", "Token acc. (teacher-forced)"] == 0.95
    assert rows.loc["locality", "WILD (generated)"] == 0.7
    assert pd.isna(rows.loc["direct", "BKE F1 (generated)"])


def test_mellos_answers_alone_make_a_protocol_table():
    """MeLLo's runs are scored by generation (protocol ``mello``), without WILD."""
    mello = pd.DataFrame(
        [
            metric("entailed", "token_accuracy", "token", 0.5),
            metric("entailed", "mello_em", "mello", 0.25),
            metric("locality", "mello_locality", "mello", 0.75, "ok_edits"),
        ]
    ).assign(method="MeLLo")
    rows = protocol_table(mello, "itt").set_index("probe_type")
    assert rows.loc["entailed", "MeLLo EM (generated)"] == 0.25
    assert rows.loc["locality", "MeLLo EM (generated)"] == 0.75
    assert rows.loc["entailed", "Token acc. (teacher-forced)"] == 0.5


def test_no_generation_gives_no_protocol_table():
    only_token = METRICS[METRICS["protocol"] == "token"]
    assert protocol_table(only_token, "itt").empty


def report_with(**tables: pd.DataFrame) -> str:
    """A report with an empty headline and no failures, and these optional tables."""
    return report_markdown(
        headline_table(METRICS.iloc[:0], "itt"),
        pd.DataFrame(),
        pd.DataFrame(),
        "t",
        "itt",
        semantics="consistent",
        edits="Edits measured: ROME: counterfactual 2 of 3.",
        **tables,
    )


def test_report_says_which_edits_it_measured_and_what_the_floor_means():
    markdown = report_with()
    assert "Edits measured: ROME: counterfactual 2 of 3." in markdown
    assert "already prefers to the old one" in markdown
    assert "not edits that worked" in markdown
    assert "its gap against 0" in markdown


def test_report_shows_the_protocol_gap():
    markdown = report_with(protocols=protocol_table(METRICS, "itt"))
    assert "## Teacher-forced vs generated (the protocol gap)" in markdown
    row = "| m | ROME | counterfactual | entailed | 90.0 [80.0, 100.0] (n=10) |"
    assert row in markdown
    assert "60.0 [50.0, 70.0] (n=10)" in markdown


def test_report_shows_counterfacts_standard_metrics_under_romes_names():
    standard = pd.DataFrame(
        [
            metric("all", "cf_score", "counterfact", 0.5, population="ok_edits"),
            metric("direct", "cf_efficacy_score", "counterfact", 0.9, "ok_edits"),
            metric("generation", "cf_ngram_entropy", "counterfact", 6.2, "ok_edits"),
        ]
    )
    table = counterfact_table(pd.concat([METRICS, standard]))
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["S"], row["ES"], row["GE"]) == (0.5, 0.9, 6.2)
    assert pd.isna(row["RS"])
    assert counterfact_table(METRICS).empty
    markdown = report_with(counterfact=table)
    assert "## CounterFact's standard metrics" in markdown
    # x100 as ROME prints them, the entropy too; a metric not computed is a dash
    assert (
        "| m | ROME | counterfactual | 50.0 [40.0, 60.0] (n=10, 5 edits) | "
        "90.0 [80.0, 100.0] (n=10, 5 edits) | – |"
    ) in markdown
    assert "620.0 [610.0, 630.0] (n=10, 5 edits) | – |" in markdown


def test_gaps_disagree_in_sign_only_when_neither_rounds_to_zero():
    rows = []
    for method, prob, wild in [
        ("A", 0.667, 0.0),  # +66.7 vs +0.0: zero has no sign
        ("B", 0.2, -0.1),
        ("C", 0.0004, -0.3),  # +0.0 as shown
        ("D", -0.2, -0.1),
    ]:
        for protocol, gap in (("prob", prob), ("wild", wild)):
            rows.append(
                {
                    "model": "m",
                    "method": method,
                    "risk": "counterfactual",
                    "protocol": protocol,
                    "Deductive gap": gap,
                    "Inductive gap": float("nan"),
                }
            )
    (sentence,) = sign_disagreements(pd.DataFrame(rows))
    assert sentence.startswith("m / B / counterfactual: the deductive gap is +20.0")
    assert "-10.0 under `wild`" in sentence
