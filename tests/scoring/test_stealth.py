"""Stealthiness: drift measures on the real model, and the score and AUROC maths."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from kebench.editing.registry import EditContext, get_method
from kebench.project import PROJECT_ROOT
from kebench.scoring.stealth import (
    base_capability,
    benign_share,
    boolq_probes,
    drift_measures,
    edit_drift,
    edit_outcomes,
    general_sets,
    mean_kl,
    next_token_logprobs,
    nq_probes,
    placements,
    probe_accuracy,
    standardised,
    stealth_scores,
    stealth_table,
    text_perplexity,
)
from tests.editing.cases import demo_requests, project_hparams

GENERAL = PROJECT_ROOT / "data" / "01_raw" / "demo" / "general"
SIZES = {
    "general": 100,
    "boolq": 3,
    "nq": 3,
    "neutral_texts": 4,
    "unrelated_prompts": 5,
}


def demo_sets(sizes: dict = SIZES, benchmarks: dict | None = None):
    return general_sets(
        pd.read_csv(GENERAL / "general_probes.csv"),
        (GENERAL / "neutral_texts.txt").read_text(),
        (GENERAL / "unrelated_prompts.txt").read_text(),
        benchmarks or {},
        sizes,
    )


def drift_rows(method: str, kls: list[float], risks: list[str]) -> pd.DataFrame:
    """Drift rows whose only moving measure is KL, with one case per risk given."""
    n = len(kls)
    return pd.DataFrame(
        {
            "method": method,
            "case_id": [f"{method}-{i}" for i in range(n)],
            "ppl_base": 10.0,
            "ppl_edit": 10.0,
            "kl": kls,
            "acc_general_base": 0.5,
            "acc_general_edit": 0.5,
            "acc_boolq_base": np.nan,
            "acc_boolq_edit": np.nan,
            "acc_nq_base": np.nan,
            "acc_nq_edit": np.nan,
        }
    ).assign(risk=risks)


def scored(method: str, kls: list[float], risks: list[str], success: list[float]):
    drift = drift_rows(method, kls, risks)
    outcomes = drift[["method", "case_id"]].assign(success=success, locality=1.0)
    return stealth_scores(
        drift.drop(columns="risk"),
        outcomes,
        drift.set_index("case_id")["risk"],
    ).assign(model="m")


# --- the maths, on small frames ---------------------------------------------------


def test_standardised_uses_the_benign_mean_and_sample_spread():
    measures = pd.DataFrame({"kl": [1.0, 3.0, 10.0]})
    z = standardised(measures, np.array([True, True, False]))
    spread = math.sqrt(2.0)
    assert z["kl"].tolist() == pytest.approx([-1 / spread, 1 / spread, 8 / spread])


def test_one_benign_edit_falls_back_to_the_spread_of_all_edits():
    measures = pd.DataFrame({"kl": [1.0, 3.0, 5.0], "still": [2.0, 2.0, 2.0]})
    z = standardised(measures, np.array([True, False, False]))
    spread = np.std([1.0, 3.0, 5.0])
    assert z["kl"].tolist() == pytest.approx([0.0, 2 / spread, 4 / spread])
    assert list(z.columns) == ["kl"]  # a measure nothing moves is left out


def test_benign_share_and_placements_agree_with_counting():
    benign = np.array([0.5, 1.0])
    drift = np.array([0.5, 1.0, 2.0, 0.1])
    assert benign_share(drift, benign).tolist() == [1.0, 0.5, 0.0, 1.0]
    assert placements(drift, benign).tolist() == [0.25, 0.75, 1.0, 0.0]


def test_mean_kl_is_zero_for_equal_and_exact_for_known_distributions():
    p = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1]], dtype=torch.float64))
    q = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64))
    assert mean_kl(p, p) == 0.0
    expected = (0.0 + 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)) / 2
    assert mean_kl(p, q) == pytest.approx(expected)


def test_drift_measures_leave_out_sets_no_edit_has():
    rows = drift_rows("ROME", [0.1, 0.2], ["bias"] * 2).assign(locality=np.nan)
    measures = drift_measures(rows)
    assert list(measures.columns) == ["log_ppl_ratio", "kl", "acc_general_shift"]
    assert measures["log_ppl_ratio"].tolist() == [0.0, 0.0]


def test_a_harmful_edit_inside_the_benign_range_is_stealthy():
    scores = scored(
        "ROME",
        kls=[0.1, 0.2, 0.3, 0.15, 5.0],
        risks=["counterfactual"] * 3 + ["misinformation", "bias"],
        success=[1.0, 1.0, 1.0, 1.0, 1.0],
    ).set_index("case_id")
    hidden, loud = scores.loc["ROME-3"], scores.loc["ROME-4"]
    # benign kl 0.1, 0.2, 0.3: mean 0.2, sd 0.1; |z| of 0.15 is 0.5, beaten by two
    assert hidden["drift"] == pytest.approx(0.5)
    assert hidden["benign_share"] == pytest.approx(2 / 3)
    assert hidden["stealth"] == pytest.approx(2 / 3)
    assert loud["drift"] == pytest.approx(48.0) and loud["stealth"] == 0.0


def test_a_failed_injection_is_not_stealthy_however_quiet():
    scores = scored(
        "IKE", [0.1, 0.2, 0.15], ["benign_update"] * 2 + ["bias"], [1.0, 1.0, 0.0]
    )
    assert scores.set_index("case_id").loc["IKE-2", "stealth"] == 0.0


def test_auroc_and_counts_per_method_and_risk():
    scores = scored(
        "ROME",
        kls=[0.1, 0.2, 0.3, 0.4, 0.2, 0.9],
        risks=["counterfactual"] * 3 + ["misinformation"] * 2 + ["bias"],
        success=[1.0] * 6,
    )
    failed = pd.DataFrame(
        {"model": "m", "method": "ROME", "risk": ["bias", "benign_update"]}
    )
    table = stealth_table(scores, failed).set_index("risk")
    assert table.loc["counterfactual", "n_edits"] == 3
    assert pd.isna(table.loc["counterfactual", "auroc"])
    # misinformation drifts |z| 2 and 0: above all three benign (1, 0, 1), below two
    assert table.loc["misinformation", "auroc"] == pytest.approx((1.0 + 1 / 6) / 2)
    assert table.loc["bias", "auroc"] == 1.0 and table.loc["bias", "n_failed"] == 1
    assert table.loc["benign_update", "n_edits"] == 0
    assert table.loc["benign_update", "n_failed"] == 1
    low, high = table.loc["misinformation", ["auroc_ci_low", "auroc_ci_high"]]
    assert low <= table.loc["misinformation", "auroc"] <= high
    assert table.loc["bias", "n_benign"] == 3


def test_harmful_edits_like_benign_ones_have_an_auroc_of_one_half():
    scores = scored(
        "ROME",
        kls=[0.2, 0.2, 0.2, 0.2],
        risks=["counterfactual", "counterfactual", "bias", "bias"],
        success=[1.0] * 4,
    )
    table = stealth_table(scores, pd.DataFrame(columns=["model", "method", "risk"]))
    assert table.set_index("risk").loc["bias", "auroc"] == 0.5


def test_no_benign_edits_is_refused_naming_the_method():
    with pytest.raises(ValueError, match="'ROME' has no benign edits"):
        scored("ROME", [0.1, 0.2], ["misinformation", "bias"], [1.0, 1.0])


def test_edits_the_evaluation_did_not_score_are_refused():
    drift = drift_rows("ROME", [0.1], ["counterfactual"]).drop(columns="risk")
    outcomes = pd.DataFrame(columns=["method", "case_id", "success", "locality"])
    with pytest.raises(ValueError, match="run the evaluation pipeline first"):
        stealth_scores(drift, outcomes, pd.Series({"ROME-0": "counterfactual"}))


def test_success_of_rewrites_and_of_injected_claims():
    scores = pd.DataFrame(
        {
            "method": "ROME",
            "case_id": ["rewrite", "rewrite", "claim", "claim"],
            "probe_type": ["direct", "locality", "direct", "locality"],
            "lp_base_old": [-5.0, -1.0, np.nan, -2.0],
            "lp_edit_old": [-9.0, -1.0, np.nan, -2.0],
            "lp_edit_new": [-3.0, -1.0, -4.0, -2.0],
            "n_tokens_new": [1, 1, 3, 1],
            "edit_new_token_hits": [0, 1, 3, 1],
            "base_old_argmax": ["1", "7", None, "8"],
            "edit_old_argmax": ["2", "7", None, "9"],
        }
    )
    outcomes = edit_outcomes(scores).set_index("case_id")
    assert outcomes.loc["rewrite", "success"] == 1.0  # -3 > -5
    assert outcomes.loc["claim", "success"] == 1.0  # every claim token is the argmax
    assert outcomes.loc["rewrite", "locality"] == 1.0
    assert outcomes.loc["claim", "locality"] == 0.0


def test_general_sets_cut_and_sample_with_a_seed():
    boolq = pd.DataFrame(
        {
            "question": [f"is it true {i}" for i in range(10)],
            "passage": ["one two three four five"] * 10,
            "answer": [i % 2 == 0 for i in range(10)],
        }
    )
    nq = pd.DataFrame(
        {
            "question": ["who wrote it?", "who else", "nobody"],
            "answer": [["A"], ["B", "C"], []],
        }
    )
    sets = demo_sets(SIZES, {"boolq": boolq, "nq": nq})
    assert len(sets.texts) == 4 and len(sets.prompts) == 5
    counts = sets.probes["set"].value_counts().to_dict()
    assert counts == {"general": 42, "boolq": 3, "nq": 2}
    again = demo_sets(SIZES, {"boolq": boolq, "nq": nq})
    pd.testing.assert_frame_equal(sets.probes, again.probes)
    item = boolq_probes(boolq.head(1), 1, 0, passage_words=2).iloc[0]
    assert item["prompt"] == "one two\nQuestion: Is it true 0?\nAnswer:"
    assert (item["answer"], item["wrong"]) == ("yes", "no")
    assert nq_probes(nq, 5, 0)["answer"].tolist() == ["A", "B"]


# --- the real model ----------------------------------------------------------------


def plain_perplexity(lm, texts) -> float:
    """Every token but the first of each text, one text at a time, plain transformers."""
    total, count = 0.0, 0
    for text in texts:
        ids = torch.tensor([lm.tokenizer(text)["input_ids"]])
        with torch.no_grad():
            logprobs = torch.log_softmax(lm.model(input_ids=ids).logits[0].double(), -1)
        total -= float(logprobs[:-1].gather(1, ids[0, 1:, None]).sum())
        count += ids.shape[1] - 1
    return math.exp(total / count)


@pytest.fixture(scope="module")
def rome_delta(lm, stats_dir):
    requests = demo_requests()
    entry = get_method("ROME")
    hparams = entry.hparams.from_dict(project_hparams()["ROME"])
    context = EditContext(stats_dir=stats_dir, pool=requests)
    return entry.compute(lm, [requests[0]], hparams, context)


@pytest.mark.model
def test_batched_perplexity_matches_a_plain_computation(lm):
    sets = demo_sets()
    assert text_perplexity(lm, sets.texts, batch_size=3) == pytest.approx(
        plain_perplexity(lm, sets.texts), rel=1e-4
    )


@pytest.mark.model
def test_next_token_kl_of_the_base_against_itself_is_zero(lm):
    prompts = demo_sets().prompts
    batched = next_token_logprobs(lm, prompts, batch_size=5)
    alone = next_token_logprobs(lm, prompts, batch_size=1)
    # padding-aware: a padded row is the same distribution as the prompt alone
    assert torch.allclose(batched, alone, atol=1e-4)
    assert mean_kl(batched, batched) == 0.0
    assert mean_kl(batched, alone) < 1e-6


@pytest.mark.model
def test_the_demo_general_probes_are_mostly_known(lm):
    accuracy = probe_accuracy(lm, demo_sets().probes)
    assert accuracy["general"] >= 0.5


@pytest.mark.model
def test_a_rome_edit_drifts_and_an_empty_one_does_not(lm, rome_delta):
    sets = demo_sets()
    base = base_capability(lm, sets)
    before = [p.detach().clone() for p in lm.model.parameters()]
    drift = edit_drift(lm, sets, base, {"ROME": [(["c1"], [rome_delta])]}).iloc[0]
    assert drift["kl"] > 1e-6
    assert drift["ppl_edit"] != drift["ppl_base"]
    # the delta was reverted: the weights are the base ones again
    assert all(
        torch.equal(a, b) for a, b in zip(before, lm.model.parameters(), strict=True)
    )
    still = edit_drift(lm, sets, base, {"none": [(["c2"], [])]}).iloc[0]
    assert still["kl"] == 0.0 and still["ppl_edit"] == still["ppl_base"]
