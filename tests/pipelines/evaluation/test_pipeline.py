"""evaluation on the demo with the real SmolLM2: scores, metrics, report, MLflow."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from kebench.pipelines.evaluation.nodes import (
    list_failed_edits,
    plan_score_shards,
    track_metrics,
)
from kebench.project import project_catalog
from kebench.schemas import METRICS, PROBE_SCORES
from tests.pipelines.conftest import DEMO_EDITS


@pytest.fixture(scope="module")
def evaluated(evaluated_root):
    """The catalog of the shared demo run (tests/pipelines/conftest.py)."""
    return project_catalog(DEMO_EDITS, evaluated_root)


def plain_logprob(lm, prompt: str, answer: str) -> float:
    """log P(answer | prompt) one example at a time, with nothing but transformers."""
    tokenizer = lm.tokenizer
    prompt_ids = tokenizer(prompt)["input_ids"]
    answer_ids = tokenizer(" " + answer, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + answer_ids])
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return sum(
        float(logprobs[len(prompt_ids) - 1 + i, token])
        for i, token in enumerate(answer_ids)
    )


@pytest.mark.model
def test_pipeline_logprobs_match_a_plain_computation(evaluated, lm):
    scores = evaluated.load("probe_scores")
    probes = evaluated.load("probes").set_index("probe_id")
    floor = scores[
        (scores["method"] == "unedited") & scores["lp_base_old"].notna()
    ].head(5)
    assert len(floor) == 5
    for row in floor.to_dict("records"):
        probe = probes.loc[row["probe_id"]]
        assert row["lp_base_old"] == pytest.approx(
            plain_logprob(lm, probe["prompt"], probe["answer_old"]), abs=1e-4
        )
        assert row["lp_base_new"] == pytest.approx(
            plain_logprob(lm, probe["prompt"], probe["answer_new"]), abs=1e-4
        )


@pytest.mark.model
def test_scores_and_metrics_cover_every_method_with_the_floor(evaluated):
    scores = PROBE_SCORES.validate(evaluated.load("probe_scores"))
    assert set(scores["method"]) == {"unedited", "ROME", "IKE"}
    # the floor is the base model: its edited columns are its base columns
    floor = scores[scores["method"] == "unedited"]
    pd.testing.assert_series_equal(
        floor["lp_edit_new"], floor["lp_base_new"], check_names=False
    )
    metrics = METRICS.validate(evaluated.load("metrics"))
    rome = metrics[
        (metrics["method"] == "ROME") & (metrics["population"] == "ok_edits")
    ]
    rome = rome.set_index(["probe_type", "metric"])
    assert rome.loc[("direct", "edit_succ"), "value"] >= 2 / 3
    assert ("direct-entailed", "gap") in rome.index and (
        "entailed",
        "consistency",
    ) in rome.index
    assert set(metrics["protocol"]) >= {"prob", "token", "argmax", "gen"}
    assert (metrics["ci_low"] <= metrics["value"] + 1e-12).all()
    report = evaluated.load("evaluation_report")
    assert "| smollm2-135m | ROME |" in report and "Gap" in report


@pytest.mark.model
def test_failed_edits_are_excluded_and_counted(evaluated):
    selected = evaluated.load("edit_manifest")
    selected = selected[selected["method"] == "ROME"].copy()
    failed_case = selected["case_id"].iloc[0]
    selected.loc[
        selected["case_id"] == failed_case, ["status", "reason", "delta_file"]
    ] = ["failed", "norm explosion", None]
    plan = plan_score_shards(
        selected,
        evaluated.load("probes"),
        {"batch_size": 16, "generation": {"probe_types": [], "max_new_tokens": 1}},
        {"shard_size": 8},
    )
    assert failed_case not in set(plan["case_id"])
    assert set(plan["case_id"]) == set(selected["case_id"]) - {failed_case}
    failed = list_failed_edits(selected)
    assert failed["case_id"].tolist() == [failed_case]
    tracked = track_metrics(evaluated.load("metrics"), failed)
    assert tracked["ROME"]["failed_edits"] == 1.0
