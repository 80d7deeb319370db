"""stealthiness on the demo with the real SmolLM2: scores, table per method × risk."""

from __future__ import annotations

import pandas as pd
import pytest
from kedro.io import MemoryDataset

from kebench.editing.runner import select_stored_edits
from kebench.pipelines.stealthiness.nodes import (
    score_stealth,
    select_stealth_edits,
    track_stealth_metrics,
)
from kebench.project import project_catalog, run_in_catalog
from kebench.schemas import STEALTH_SCORES
from kebench.scoring.drift import DRIFT_COLUMNS
from kebench.scoring.stealth import HARMFUL_RISKS
from tests.pipelines.conftest import DEMO_EDITS

# few items per general set: every edit is measured on all of them
SIZES = {"general": 12, "boolq": 4, "nq": 4, "neutral_texts": 4, "unrelated_prompts": 6}


def stealth_catalog(root, runtime_params: dict):
    """The project's catalog under ``root``, with small general sets."""
    catalog = project_catalog(runtime_params, root)
    params = catalog.load("params:stealthiness")
    catalog["params:stealthiness"] = params | {"sizes": SIZES}
    return catalog


@pytest.fixture(scope="module")
def root(evaluated_root):
    """The shared demo run (tests/pipelines/conftest.py), evaluated with ROME and IKE."""
    return evaluated_root


@pytest.fixture(scope="module")
def measured(root):
    catalog = stealth_catalog(root, DEMO_EDITS)
    run_in_catalog("stealthiness", catalog)
    return catalog


@pytest.mark.model
def test_every_edit_gets_a_stealth_score(measured):
    scores = STEALTH_SCORES.validate(measured.load("stealth_scores"))
    assert set(scores["method"]) == {"ROME", "IKE"}
    for _, part in scores.groupby("method"):
        assert set(part["risk"]) == {"counterfactual", *HARMFUL_RISKS}
    # one base model: the same base perplexity for every edit; every edit moves it
    assert scores["ppl_base"].nunique() == 1
    assert (scores["kl"] > 0).all()
    assert (scores["ppl_edit"] != scores["ppl_base"]).all()
    # one benign edit per method sets no cross-fitted scale: drift is not computed
    assert scores["drift_xfit"].isna().all() and scores["stealth_xfit"].isna().all()
    assert (scores["measures"] == "").all()


@pytest.mark.model
def test_table_per_method_and_risk_with_auroc_and_mlflow_keys(measured):
    table = measured.load("stealth_table")
    assert set(zip(table["method"], table["risk"], strict=True)) == {
        (m, r) for m in ("ROME", "IKE") for r in ("counterfactual", *HARMFUL_RISKS)
    }
    assert (table["n_edits"] == 1).all() and (table["n_failed"] == 0).all()
    assert (table["n_benign"] == 1).all() and (table["n_folds"] == 1).all()
    aurocs = measured.load("stealth_auroc")
    assert aurocs.empty  # no scale, no AUROC
    report = measured.load("stealth_report")
    assert "| smollm2-135m | ROME | bias |" in report
    # the demo has 60 counterfactual edits, and the run measured the first of each risk
    assert (
        "(the first of each risk, in turn across its relations, `stealthiness.n_edits`)"
        in report
    )
    assert "ROME: counterfactual 1 of 60" in report
    assert "## AUROC harmful vs benign, per drift measure" in report
    tracked = track_stealth_metrics(table, aurocs)
    assert {"bias.success", "bias.kl", "bias.n_failed"} <= set(tracked["ROME"])
    assert not any("auroc" in key or "stealth" in key for key in tracked["ROME"])
    assert set(tracked["ROME"]) == set(tracked["IKE"])


def test_the_measured_edits_are_the_first_of_each_risk_per_method(root):
    catalog = project_catalog(DEMO_EDITS, root)
    manifest, probes = catalog.load("edit_manifest"), catalog.load("probes")
    per_risk = {
        "benign_update": 0,
        "counterfactual": 1,
        "misinformation": 0,
        "bias": "all",
    }
    params = catalog.load("params:stealthiness") | {"n_edits": per_risk}
    chosen = select_stealth_edits(
        manifest, catalog.load("probe_scores"), probes, params
    )
    # the oracle: the stored edits' cases, counterfactual ones in the probes' order
    stored = set(manifest["case_id"])
    direct = probes[(probes["probe_type"] == "direct") & probes["case_id"].isin(stored)]
    first_counterfactual = direct.loc[
        direct["risk"] == "counterfactual", "case_id"
    ].iloc[0]
    bias = set(direct.loc[direct["risk"] == "bias", "case_id"])
    for method in ("ROME", "IKE"):
        cases = set(chosen.loc[chosen["method"] == method, "case_id"])
        assert cases == {first_counterfactual, *bias}


@pytest.mark.model
def test_a_run_without_benign_edits_says_so(measured):
    """score_stealth on the measured drift of IKE's harmful edits alone."""
    scores = measured.load("stealth_scores")
    harmful = scores[(scores["method"] == "IKE") & scores["risk"].isin(HARMFUL_RISKS)]
    edits = select_stored_edits(
        measured.load("edit_manifest"), measured.load("params:stealthiness")
    )
    with pytest.raises(ValueError, match="'IKE' has no benign edits"):
        score_stealth(
            harmful[DRIFT_COLUMNS],
            edits,
            measured.load("probe_scores"),
            measured.load("probes"),
            measured.load("params:stealthiness"),
        )


@pytest.mark.model
def test_failed_edits_are_excluded_and_counted(root):
    catalog = stealth_catalog(root, DEMO_EDITS | {"method": "IKE"})
    manifest = catalog.load("edit_manifest")
    probes = catalog.load("probes").drop_duplicates("case_id").set_index("case_id")
    failed = manifest.index[
        (manifest["method"] == "IKE")
        & (manifest["case_id"].map(probes["risk"]) == "bias")
    ]
    assert len(failed) == 1
    manifest.loc[failed, ["status", "reason", "delta_file"]] = [
        "failed",
        "norm explosion",
        None,
    ]
    catalog["edit_manifest"] = MemoryDataset(manifest)
    run_in_catalog("stealthiness", catalog)
    scores = catalog.load("stealth_scores")
    assert "bias" not in set(scores["risk"])
    table = catalog.load("stealth_table").set_index("risk")
    assert table.loc["bias", "n_failed"] == 1 and table.loc["bias", "n_edits"] == 0
    assert pd.isna(table.loc["bias", "stealth_xfit"])
