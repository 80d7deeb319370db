"""CounterFact's standard metrics through the evaluation pipeline, on a copy of the
shared demo run: its edited counterfactual cases get CounterFact's prompt kinds."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from kebench.project import project_catalog, run_pipeline
from kebench.schemas import COUNTERFACT_PROMPTS, COUNTERFACT_SCORES, METRICS
from tests.pipelines.conftest import DEMO_EDITS


def demo_counterfact_prompts(catalog) -> pd.DataFrame:
    """CounterFact-style prompts of the demo's edited counterfactual cases: the
    rewrite prompt, its question as a paraphrase, another subject's fact of the same
    relation as a neighbour, and two generation prompts."""
    requests = catalog.load("edit_requests").set_index("case_id")
    edited = set(catalog.load("edit_manifest")["case_id"])
    rows = []
    for case_id, edit in requests.iterrows():
        if case_id not in edited or edit["risk"] != "counterfactual":
            continue
        common = {
            "case_id": case_id,
            "source": "demo",
            "risk": "counterfactual",
            "target_new": edit["target_new"],
            "target_true": edit["target_true"],
            "relation_id": edit["relation_id"],
            "target_new_id": "Q-new",
        }
        subject = edit["subject"]
        rows += [
            common | {"kind": "rewrite", "prompt": edit["prompt"].format(subject)},
            common | {"kind": "paraphrase", "prompt": f"{edit['question']} Answer:"},
            common
            | {"kind": "neighborhood", "prompt": edit["prompt"].format("Europe")},
            common | {"kind": "generation", "prompt": f"{subject} is"},
            common | {"kind": "generation", "prompt": f"Speaking of {subject},"},
        ]
    return COUNTERFACT_PROMPTS.validate(pd.DataFrame(rows))


@pytest.mark.model
def test_counterfact_metrics_of_every_method_and_the_unedited_model(
    evaluated_root, tmp_path
):
    root = tmp_path / "run"
    shutil.copytree(evaluated_root, root)
    snippets = tmp_path / "attribute_snippets.json"
    catalog = project_catalog(DEMO_EDITS, root)
    prompts = demo_counterfact_prompts(catalog)
    assert not prompts.empty
    first = prompts.iloc[0]
    snippets.write_text(
        json.dumps(
            [
                {
                    "relation_id": first["relation_id"],
                    "target_id": "Q-new",
                    "samples": [{"name": "x", "text": f"It is {first['target_new']}."}],
                }
            ]
        )
    )
    params = DEMO_EDITS | {"evaluation": {"counterfact": {"snippets": str(snippets)}}}
    catalog = project_catalog(params, root)
    catalog.save("counterfact_prompts", prompts)
    run_pipeline("evaluation", params, root)

    scores = COUNTERFACT_SCORES.validate(catalog.load("counterfact_scores"))
    cases = set(prompts["case_id"])
    for method in ("unedited", "ROME", "IKE"):
        assert set(scores.loc[scores["method"] == method, "case_id"]) == cases
    assert scores["reference_score"].notna().all()
    assert (scores["generated"].map(lambda t: len(json.loads(t))) == 2).all()

    # the rewrite prompt is the direct probe's prompt: its score is the probe's
    # per-token comparison, from the probe scores' independent pass
    probes = catalog.load("probes")
    probe_scores = catalog.load("probe_scores").merge(
        probes[["probe_id", "prompt"]], on="probe_id"
    )
    for row in scores[scores["method"] == "ROME"].to_dict("records"):
        rewrite = prompts[(prompts["case_id"] == row["case_id"])]
        rewrite = rewrite[rewrite["kind"] == "rewrite"]["prompt"].iloc[0]
        direct = probe_scores[
            (probe_scores["method"] == "ROME")
            & (probe_scores["case_id"] == row["case_id"])
            & (probe_scores["probe_type"] == "direct")
            & (probe_scores["prompt"] == rewrite)
        ]
        assert len(direct) == 1
        probe = direct.iloc[0]
        wins = (probe["lp_edit_new"] / probe["n_tokens_new"]) > (
            probe["lp_edit_old"] / probe["n_tokens_old"]
        )
        assert row["rewrite_score"] == float(wins)

    metrics = METRICS.validate(catalog.load("metrics"))
    standard = metrics[metrics["protocol"] == "counterfact"]
    assert set(standard["method"]) == {"unedited", "ROME", "IKE"}
    assert {"cf_score", "cf_efficacy_score", "cf_ngram_entropy"} <= set(
        standard["metric"]
    )
    assert "## CounterFact's standard metrics" in catalog.load("evaluation_report")
