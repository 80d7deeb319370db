"""risk_unification on a RippleEdits source: its own tests become probes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from tests.helpers import ripple_project

RIPPLE_ONE = Path(__file__).parents[2] / "kg" / "data" / "rippleedits" / "one"


def test_one_record_rippleedits_files_become_probes(tmp_path):
    """A file of one record each from popular, random and recent: too few subjects to
    infer a relation's phrase, so the edits and the dataset's tests read with the
    shipped relation table. Expected values are read off the files by hand."""
    files = [RIPPLE_ONE / f"{name}.json" for name in ("popular", "random", "recent")]
    root = ripple_project(tmp_path, files)
    bootstrap_project(root)
    with KedroSession.create(
        project_path=root, runtime_params={"dataset": "ripple"}
    ) as session:
        session.run(
            pipeline_names=[
                "kg_build",
                "rule_mining",
                "qa_generation",
                "risk_unification",
            ]
        )
    probes = pd.read_parquet(root / "data/05_model_input/ripple/probes.parquet")
    # EditAttack's injections join them where the reference data is present
    probes = probes[probes["case_id"].str.startswith("ripple-")]
    direct = probes[probes["probe_type"] == "direct"].set_index("case_id")
    assert direct["prompt"].to_dict() == {
        "ripple-popular-0": "The name of the mother of Leonardo DiCaprio is",
        "ripple-random-0": "The name of the capital city of Burkina Faso is",
        "ripple-recent-0": (
            "The name of the sports team which Kylian Mbappé is a member of is"
        ),
    }
    # the dataset's Logical_Generalization tests, one in popular and one in random
    entailed = probes[probes["probe_type"] == "entailed"]
    assert set(
        zip(
            entailed["case_id"], entailed["prompt"], entailed["answer_new"], strict=True
        )
    ) == {
        (
            "ripple-popular-0",
            "The name of the child of Meryl Streep is",
            "Leonardo DiCaprio",
        ),
        (
            "ripple-random-0",
            "The name of the country which Bobo-Dioulasso is the capital of is",
            "Burkina Faso",
        ),
    }
    # each case's other tests: popular's and recent's subject aliasing, and two
    # compositional tests
    counts = probes.groupby(["case_id", "probe_type"]).size()
    assert counts.loc[("ripple-popular-0", "paraphrase")] == 1
    assert counts.loc[("ripple-recent-0", "paraphrase")] == 1
    assert ("ripple-random-0", "paraphrase") not in counts.index
    assert counts.loc[("ripple-popular-0", "multihop")] == 1
    assert counts.loc[("ripple-random-0", "multihop")] == 1
    # and its Relation_Specificity test, a locality probe whose answer must stay
    locality = probes[probes["probe_type"] == "locality"]
    asked = set(
        zip(
            locality["case_id"],
            locality["prompt"],
            locality["answer_old"],
            locality["answer_new"],
            strict=True,
        )
    )
    assert {
        (
            "ripple-popular-0",
            "The name of the country of citizenship of Leonardo DiCaprio is",
            "United States of America",
            "United States of America",
        ),
        (
            "ripple-random-0",
            "The official language of Burkina Faso is",
            "French",
            "French",
        ),
        (
            "ripple-recent-0",
            "The name of the country of citizenship of Kylian Mbappé is",
            "France",
            "France",
        ),
    } <= asked
