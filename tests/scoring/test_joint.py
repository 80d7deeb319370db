"""Joint scoring: a probe whose fact another edit of its batch or run rewrites is
dropped, with its reason; the report counts them."""

from __future__ import annotations

import pandas as pd

from kebench.scoring.evaluate import drop_counts, joint_drops
from kebench.scoring.report import headline_table, report_markdown

BIDEN, SWEDEN = "dbr:Joe_Biden", "dbr:Sweden"


def manifest(mode: str, fingerprints: list[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": "m",
            "method": "MEMIT",
            "mode": mode,
            "case_id": ["e1", "e2", "e3"],
            "order": [0, 1, 2],
            "status": ["ok", "ok", "failed"],
            "fingerprint": fingerprints,
        }
    )


PROBES = pd.DataFrame(
    [
        # e1's own edited fact: never dropped because of itself
        ("e1/direct/0", "e1", "direct", BIDEN, "birthPlace"),
        # e2's own fact, Sweden's head of state, which e1's edit also implies: the
        # stated edit stands over another edit's consequence
        ("e2/direct/0", "e2", "direct", SWEDEN, "leader"),
        # asks Sweden's head of state, which e2 edits
        ("e1/locality/0", "e1", "locality", SWEDEN, "leaderName"),
        # asks Biden's citizenship, a consequence of e1
        ("e2/entailed/0", "e2", "entailed", BIDEN, "citizenship"),
        # asks Biden's birthplace, e1's edited fact
        ("e3/locality/0", "e3", "locality", BIDEN, "birthPlace"),
        # e3 edits Biden's birthplace too: two edits of one fact
        ("e3/direct/0", "e3", "direct", BIDEN, "birthPlace"),
        ("e3/multihop/0", "e3", "multihop", None, None),
    ],
    columns=["probe_id", "case_id", "probe_type", "fact_subject_uri", "fact_relation"],
)
REWRITTEN = pd.DataFrame(
    [
        ("e3", BIDEN, "birthPlace", "direct"),
        ("e1", BIDEN, "birthPlace", "direct"),
        ("e1", BIDEN, "citizenship", "consequence"),
        ("e1", SWEDEN, "leader", "consequence"),
        ("e2", SWEDEN, "leader", "direct"),
        ("e2", SWEDEN, "leaderName", "direct"),
    ],
    columns=["case_id", "fact_subject_uri", "fact_relation", "kind"],
)


def dropped(drops: pd.DataFrame) -> dict[str, tuple[str, str]]:
    return {
        row["probe_id"]: (row["reason"], row["rewritten_by"])
        for row in drops.to_dict("records")
    }


def test_a_batch_drops_the_probes_its_other_edits_rewrite():
    # e1 and e2 share a batch (one unit fingerprint); e3 is in the next one
    drops = joint_drops(manifest("batch", ["b1", "b1", "b2"]), PROBES, REWRITTEN)
    assert dropped(drops) == {
        "e1/locality/0": ("other_edit_fact", "e2"),
        "e2/entailed/0": ("other_edit_consequence", "e1"),
    }
    counts = drop_counts(drops).set_index(["probe_type", "reason"])["probes"]
    assert counts.to_dict() == {
        ("entailed", "other_edit_consequence"): 1,
        ("locality", "other_edit_fact"): 1,
    }


def test_a_sequential_run_is_one_group_with_its_failed_edits():
    drops = joint_drops(manifest("sequential", ["s1", "s2", "s3"]), PROBES, REWRITTEN)
    assert dropped(drops) == {
        "e1/locality/0": ("other_edit_fact", "e2"),
        "e2/entailed/0": ("other_edit_consequence", "e1"),
        # e3 failed: it keeps its group, so both populations see the same probes
        "e3/locality/0": ("other_edit_fact", "e1"),
        # e1 and e3 edit the same fact: each one's direct probe is dropped
        "e3/direct/0": ("other_edit_fact", "e1"),
        "e1/direct/0": ("other_edit_fact", "e3"),
    }


def test_single_mode_drops_nothing():
    drops = joint_drops(manifest("single", ["a", "b", "c"]), PROBES, REWRITTEN)
    assert drops.empty and drop_counts(drops).empty


def test_the_report_names_its_population_and_counts_the_drops():
    rows = [
        ("direct", "edit_succ", "prob", "ok_edits", 1.0),
        ("direct", "edit_succ", "prob", "itt", 0.5),
        ("locality", "locality", "argmax", "ok_edits", 0.9),
    ]
    metrics = pd.DataFrame(
        [
            {
                "model": "m",
                "method": "MEMIT",
                "risk": "counterfactual",
                "probe_type": probe_type,
                "metric": metric,
                "protocol": protocol,
                "population": population,
                "value": value,
                "ci_low": value,
                "ci_high": value,
                "n": 2,
            }
            for probe_type, metric, protocol, population, value in rows
        ]
    )
    headline = headline_table(metrics, "itt")
    assert headline["protocol"].tolist() == ["prob"]
    assert headline["EditSucc"].tolist() == [0.5]
    assert headline["Locality"].tolist() == [0.9]  # locality has no itt form
    drops = joint_drops(manifest("batch", ["b1", "b1", "b2"]), PROBES, REWRITTEN)
    markdown = report_markdown(
        headline,
        pd.DataFrame(),
        drop_counts(drops),
        "t",
        "itt",
        semantics="paper",
        edits="",
    )
    assert "Population of EditSucc, Consistency and the gaps: `itt`" in markdown
    assert "| MEMIT | batch | locality | other_edit_fact | 1 |" in markdown
    assert "| m | MEMIT | counterfactual | prob | 50.0 [50.0, 50.0] (n=2) |" in markdown
